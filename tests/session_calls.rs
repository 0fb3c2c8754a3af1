//! Default (session) mode, where a plain 2025-era `tools/call` on a session
//! whose client is owed nothing but the result is answered by toolhost's
//! direct path with one JSON body, and everything else by rmcp's session.
//!
//! Two daemons on the same plugins, one with the direct path and one with
//! `direct_calls = false`, each get a session opened the same way and the
//! same requests on it. The JSON-RPC message in each answer must be the
//! same (rmcp frames its own as an SSE event, the direct path as a JSON
//! body: both are the transport's), and so must the HTTP status. What the
//! direct path must leave to rmcp (a progress token, a session that set a
//! log level, other methods, a session that is not the caller's or no
//! longer exists) is checked by the counter of calls it answered.
//!
//! Then what rmcp's session gave its calls and the direct path must give
//! too: `notifications/cancelled` and the session's end cancel a call. And
//! the protocol's own clients: the official Python SDK gets its results
//! through the direct path; rmcp's client, which puts a progress token on
//! every call, through the session.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use toolhost_e2e::asker::{Asker, ERAS, call, connect, params, texts};
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, TestConfig, dechunk, events, eventually, http_exchange, mask_ids,
    python_client, richplug_dir, testplug_dir,
};

const WAIT: Duration = Duration::from_secs(20);
const DIRECT: &str = "toolhost_http_direct_calls_total";

const AUTH: (&str, &str) = ("Authorization", "Bearer test-token-0123456789");
const CT: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const V2025: (&str, &str) = ("MCP-Protocol-Version", "2025-11-25");
/// A second token the daemons know, on the same surface.
const OTHER: &str = "other-token-0123456789";

/// A default-mode daemon serving `tp` (protocol 1) and `rp` (protocol 2).
async fn daemon(root: &Path, direct: bool) -> Daemon {
    let plugins = [testplug_dir(root, "tp", "normal"), richplug_dir(root, "rp")];
    let config = TestConfig::new(root, &plugins)
        .ids("task-sc", "session-sc")
        .http(&format!("direct_calls = {direct}"))
        .extra(&format!("[[http.tokens]]\ntoken = \"{OTHER}\"\nsurface = \"chat\"\ntask_id = \"task-o\"\nsession_id = \"session-o\"\n"))
        .build();
    let d = Daemon::start(root, &config, &[]);
    for p in ["tp", "rp"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{p}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    d
}

/// An answer: the HTTP status, its content type, and the JSON-RPC message
/// it carries (ids masked), or the body as text when it carries none.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    content_type: String,
    message: Value,
}

async fn post(d: &Daemon, headers: &[(&str, &str)], body: &str) -> Answer {
    exchange(d, "POST", headers, body).await
}

async fn exchange(d: &Daemon, method: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let (status, head, body) = http_exchange(&d.base(), method, "/mcp", headers, body).await;
    let content_type = header(&head, "content-type").unwrap_or_default();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    let body = mask_ids(&body);
    let message = if content_type.starts_with("text/event-stream") {
        // The one event that answers the request (rmcp may prime the
        // stream with an empty event first).
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or(Value::Null)
    } else {
        serde_json::from_str(&body).unwrap_or(Value::String(body))
    };
    Answer {
        status,
        content_type,
        message,
    }
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

/// Opens a 2025-11-25 session (no capabilities: it cannot answer questions)
/// and says it is initialized; its id.
async fn open_session(d: &Daemon) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "session-calls-test", "version": "1"}}});
    let (status, head, body) = http_exchange(
        &d.base(),
        "POST",
        "/mcp",
        &[AUTH, CT, ACCEPT, V2025],
        &init.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{head}\n{body}");
    let id = header(&head, "mcp-session-id").expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let done = post(
        d,
        &[AUTH, CT, ACCEPT, V2025, ("Mcp-Session-Id", &id)],
        &initialized.to_string(),
    )
    .await;
    assert!((200..300).contains(&done.status), "initialized: {done:?}");
    id
}

/// What a case is, the headers it adds or replaces, its body.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String);

fn plain(id: Value, name: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
    .to_string()
}

async fn direct_count(d: &Daemon) -> f64 {
    d.metric(DIRECT).await.unwrap_or(0.0)
}

/// Waits until a session's facts are settled (the handler reads
/// `notifications/initialized` on the session's own task): an echo on it is
/// answered directly.
async fn wait_settled(d: &Daemon, session: &str) {
    eventually(WAIT, "the session's calls answered directly", async || {
        let before = direct_count(d).await;
        let a = post(
            d,
            &[AUTH, CT, ACCEPT, V2025, ("Mcp-Session-Id", session)],
            &plain(json!(999), "kandev_tp_nope", json!({})),
        )
        .await;
        assert_eq!(a.status, 200, "{a:?}");
        (direct_count(d).await > before).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_direct_path_on_a_session_answers_as_the_session_does() {
    assert_eq!(TOKEN, AUTH.1.trim_start_matches("Bearer "));
    let with_root = Scratch::new("sc-direct");
    let without_root = Scratch::new("sc-rmcp");
    let (with, without) = tokio::join!(
        daemon(with_root.path(), true),
        daemon(without_root.path(), false)
    );
    let (s_with, s_without) = tokio::join!(open_session(&with), open_session(&without));
    wait_settled(&with, &s_with).await;
    let on = |s: &str| -> Vec<(&'static str, String)> {
        vec![
            ("Authorization", AUTH.1.to_owned()),
            ("Content-Type", CT.1.to_owned()),
            ("Accept", ACCEPT.1.to_owned()),
            ("MCP-Protocol-Version", V2025.1.to_owned()),
            ("Mcp-Session-Id", s.to_owned()),
        ]
    };
    let echo = json!({"msg": "hi", "n": 3});
    // (what it is, whether the direct path answers it, the body)
    let direct_cases: Vec<(&str, String)> = vec![
        ("a valid call", plain(json!(1), "kandev_tp_echo", echo.clone())),
        ("a string id", plain(json!("req-7"), "kandev_tp_echo", echo.clone())),
        ("a negative id", plain(json!(-3), "kandev_tp_echo", echo.clone())),
        ("an alias", plain(json!(3), "kandev_tp_echo", json!({"msg": "a", "n": 1, "limit": 4}))),
        ("an unknown argument", plain(json!(4), "kandev_tp_echo", json!({"msg": "a", "n": 1, "zzz": "v-secret"}))),
        ("a wrong type", plain(json!(5), "kandev_tp_echo", json!({"msg": 7, "n": 1}))),
        ("a missing required argument", plain(json!(6), "kandev_tp_echo", json!({"msg": "a"}))),
        ("too long a string", plain(json!(6), "kandev_tp_echo", json!({"msg": "x".repeat(40), "n": 1}))),
        ("no arguments", json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "kandev_tp_count"}}).to_string()),
        ("null arguments", json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "kandev_tp_count", "arguments": null}}).to_string()),
        ("an unknown tool", plain(json!(9), "kandev_tp_nope", json!({}))),
        ("a tool of another surface", plain(json!(10), "kandev_tp_only_task", json!({}))),
        ("a hostile name", plain(json!(11), &"\u{202e}x\n".repeat(100), json!({}))),
        ("a structured result", plain(json!(12), "kandev_tp_echo_report", json!({"q": "w", "extra": 1}))),
        ("output breaking its schema", plain(json!(13), "kandev_tp_bad_output", json!({}))),
        ("a timeout", plain(json!(14), "kandev_tp_nap", json!({"ms": 3000}))),
        ("every content kind", plain(json!(15), "kandev_rp_media", json!({}))),
        ("a bad content block", plain(json!(16), "kandev_rp_bad_block", json!({}))),
        ("a question this client cannot answer", plain(json!(17), "kandev_rp_confirm", json!({"note": "n"}))),
        ("progress nobody asked for", plain(json!(18), "kandev_rp_steps", json!({"steps": 3}))),
        ("a huge result", plain(json!(19), "kandev_tp_big", json!({"bytes": 300_000}))),
    ];
    for (what, body) in &direct_cases {
        let before = direct_count(&with).await;
        let (h_with, h_without) = (on(&s_with), on(&s_without));
        let h_with: Vec<(&str, &str)> = h_with.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let h_without: Vec<(&str, &str)> =
            h_without.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (a, b) = tokio::join!(post(&with, &h_with, body), post(&without, &h_without, body));
        assert_eq!(
            (a.status, &a.message),
            (b.status, &b.message),
            "{what}: the direct path and the session answer differently"
        );
        assert_eq!(a.content_type, "application/json", "{what}: {a:?}");
        assert!(
            b.content_type.starts_with("text/event-stream"),
            "{what}: {b:?}"
        );
        assert_eq!(
            direct_count(&with).await,
            before + 1.0,
            "{what}: answered directly"
        );
        assert!(
            !a.message.to_string().contains("v-secret"),
            "{what}: an argument echoed: {a:?}"
        );
    }
    // What the direct path hands to rmcp: both daemons answer the same, in
    // the same framing, and the direct path counts none of it.
    let rmcp_cases: Vec<Case<'_>> = vec![
        ("a progress token", vec![], json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "kandev_rp_steps", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}}}).to_string()),
        ("string arguments", vec![], json!({"jsonrpc": "2.0", "id": 22, "method": "tools/call", "params": {"name": "kandev_tp_echo", "arguments": "x"}}).to_string()),
        ("tools/list", vec![], json!({"jsonrpc": "2.0", "id": 23, "method": "tools/list"}).to_string()),
        ("a batch", vec![], format!("[{}]", plain(json!(24), "kandev_tp_echo", echo.clone()))),
        ("not JSON", vec![], "{\"jsonrpc\": \"2.0\", ".to_owned()),
        ("a foreign origin", vec![("Origin", "https://evil.test")], plain(json!(29), "kandev_tp_echo", echo.clone())),
        ("an allowed origin", vec![("Origin", "http://localhost:3000")], plain(json!(28), "kandev_tp_echo", echo.clone())),
        ("json only in Accept", vec![("Accept", "application/json")], plain(json!(31), "kandev_tp_echo", echo.clone())),
        ("a text body", vec![("Content-Type", "text/plain")], plain(json!(33), "kandev_tp_echo", echo.clone())),
        ("an unknown version", vec![("MCP-Protocol-Version", "2030-01-01")], plain(json!(26), "kandev_tp_echo", echo.clone())),
    ];
    for (what, extra, body) in &rmcp_cases {
        let before = direct_count(&with).await;
        let headers = |s: &str| -> Vec<(String, String)> {
            let mut h: Vec<(String, String)> = on(s)
                .into_iter()
                .filter(|(k, _)| !extra.iter().any(|(e, _)| e.eq_ignore_ascii_case(k)))
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
            h.extend(
                extra
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            );
            h
        };
        let (h_with, h_without) = (headers(&s_with), headers(&s_without));
        let h_with: Vec<(&str, &str)> = h_with
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let h_without: Vec<(&str, &str)> = h_without
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (a, b) = tokio::join!(post(&with, &h_with, body), post(&without, &h_without, body));
        assert_eq!(a, b, "{what}: the two daemons answer differently");
        assert_eq!(
            direct_count(&with).await,
            before,
            "{what}: not the direct path's"
        );
    }
    // Another token's session and a made-up one are refused; two ids are
    // rmcp's to read. None is the direct path's.
    let before = direct_count(&with).await;
    let call = plain(json!(40), "kandev_tp_nope", json!({}));
    let other = format!("Bearer {OTHER}");
    for (what, headers, refused) in [
        (
            "another token",
            vec![
                ("Authorization", other.as_str()),
                CT,
                ACCEPT,
                V2025,
                ("Mcp-Session-Id", s_with.as_str()),
            ],
            true,
        ),
        (
            "a made-up session",
            vec![AUTH, CT, ACCEPT, V2025, ("Mcp-Session-Id", "made-up")],
            true,
        ),
        (
            "two session ids",
            vec![
                AUTH,
                CT,
                ACCEPT,
                V2025,
                ("Mcp-Session-Id", s_with.as_str()),
                ("Mcp-Session-Id", s_with.as_str()),
            ],
            false,
        ),
    ] {
        let a = post(&with, &headers, &call).await;
        assert_eq!(a.status != 200, refused, "{what}: {a:?}");
        assert!(
            !a.content_type.starts_with("application/json"),
            "{what}: {a:?}"
        );
    }
    assert_eq!(direct_count(&with).await, before);
    // A session that set a log level is owed the call's log lines: its
    // calls go through the session, which streams them.
    let set_level = json!({"jsonrpc": "2.0", "id": 50, "method": "logging/setLevel", "params": {"level": "debug"}}).to_string();
    let steps = plain(json!(51), "kandev_rp_steps", json!({"steps": 2}));
    for (d, s) in [(&with, &s_with), (&without, &s_without)] {
        let h = [AUTH, CT, ACCEPT, V2025, ("Mcp-Session-Id", s.as_str())];
        assert_eq!(post(d, &h, &set_level).await.status, 200);
    }
    let before = direct_count(&with).await;
    let h =
        |s: &str| [AUTH, CT, ACCEPT, V2025, ("Mcp-Session-Id", s)].map(|(k, v)| (k, v.to_owned()));
    let (hw, ho) = (h(&s_with), h(&s_without));
    let hw: Vec<(&str, &str)> = hw.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ho: Vec<(&str, &str)> = ho.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (a, b) = tokio::join!(post(&with, &hw, &steps), post(&without, &ho, &steps));
    assert_eq!(a, b, "a call on a session with a log level");
    assert!(a.content_type.starts_with("text/event-stream"), "{a:?}");
    assert_eq!(
        direct_count(&with).await,
        before,
        "the session's, not the direct path's"
    );
    // The plugin saw each call once on both daemons.
    let count = plain(json!(60), "kandev_tp_count", json!({}));
    let (a, b) = tokio::join!(post(&with, &hw, &count), post(&without, &ho, &count));
    assert_eq!(a.message, b.message, "both plugins counted the same calls");
    // A closed session is gone for the direct path too.
    for (d, hs) in [(&with, &hw), (&without, &ho)] {
        let closed = exchange(d, "DELETE", hs, "").await;
        assert!((200..300).contains(&closed.status), "{closed:?}");
    }
    let before = direct_count(&with).await;
    let (a, b) = tokio::join!(post(&with, &hw, &count), post(&without, &ho, &count));
    assert_eq!((a.status, b.status), (404, 404), "{a:?} {b:?}");
    assert_eq!(direct_count(&with).await, before);
}

/// Opens a settled session on `d` and starts `kandev_tp_slow` on it, on its
/// own connection; the session's id and the call's answer, to await.
async fn slow_call(d: &Daemon, id: i64) -> (String, tokio::task::JoinHandle<Answer>) {
    let session = open_session(d).await;
    wait_settled(d, &session).await;
    let base = d.base();
    let s = session.clone();
    let answer = tokio::spawn(async move {
        let (status, head, body) = http_exchange(
            &base,
            "POST",
            "/mcp",
            &[AUTH, CT, ACCEPT, V2025, ("Mcp-Session-Id", &s)],
            &plain(json!(id), "kandev_tp_slow", json!({"ms": 60_000})),
        )
        .await;
        Answer {
            status,
            content_type: header(&head, "content-type").unwrap_or_default(),
            message: serde_json::from_str(&body).unwrap_or(Value::String(body)),
        }
    });
    (session, answer)
}

#[tokio::test]
async fn a_call_answered_directly_stops_when_cancelled_or_when_its_session_ends() {
    let root = Scratch::new("sc-cancel");
    let d = daemon(root.path(), true).await;
    let data = root.path().join("state/data/tp");
    let before = direct_count(&d).await;

    // notifications/cancelled, naming the call.
    let (session, answer) = slow_call(&d, 7).await;
    eventually(WAIT, "the plugin got the call", async || {
        (events(&data, "invoked slow").len() == 1).then_some(())
    })
    .await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "the user changed their mind"}});
    let h = [
        AUTH,
        CT,
        ACCEPT,
        V2025,
        ("Mcp-Session-Id", session.as_str()),
    ];
    let acked = post(&d, &h, &cancel.to_string()).await;
    assert!((200..300).contains(&acked.status), "{acked:?}");
    eventually(WAIT, "the plugin saw the cancellation", async || {
        (events(&data, "cancelled slow").len() == 1).then_some(())
    })
    .await;
    let a = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(
        a.content_type, "application/json",
        "answered directly: {a:?}"
    );

    // The session's end.
    let (session, answer) = slow_call(&d, 8).await;
    eventually(WAIT, "the plugin got the second call", async || {
        (events(&data, "invoked slow").len() == 2).then_some(())
    })
    .await;
    let h = [
        AUTH,
        CT,
        ACCEPT,
        V2025,
        ("Mcp-Session-Id", session.as_str()),
    ];
    let closed = exchange(&d, "DELETE", &h, "").await;
    assert!((200..300).contains(&closed.status), "{closed:?}");
    eventually(WAIT, "the plugin saw the session's end", async || {
        (events(&data, "cancelled slow").len() == 2).then_some(())
    })
    .await;
    let a = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
    assert_eq!(a.status, 200, "{a:?}");
    eventually(WAIT, "both calls counted as cancelled", async || {
        d.metric("toolhost_tool_calls_total{tool=\"kandev_tp_slow\",outcome=\"cancelled\"}")
            .await
            .filter(|n| *n == 2.0)
    })
    .await;
    // Two probes and two slow calls.
    assert_eq!(direct_count(&d).await, before + 4.0);
}

/// Runs the Python SDK's plain client (`support/plain_client.py`): `n`
/// good calls and one bad one on a 2025-11-25 session.
async fn python_agent(d: &Daemon, n: usize) -> Value {
    python_client("plain_client.py", &[&d.url, TOKEN, &n.to_string()]).await
}

#[tokio::test]
async fn the_official_python_client_gets_its_results_on_the_direct_path() {
    let root = Scratch::new("sc-python");
    let d = daemon(root.path(), true).await;
    let before = direct_count(&d).await;
    let got = python_agent(&d, 5).await;
    assert_eq!(got["listed_echo"], json!(true), "{got}");
    assert_eq!(got["texts"], json!(vec!["echoed"; 5]), "{got}");
    assert_eq!(
        (&got["bad_is_error"], &got["bad_code"]),
        (&json!(true), &json!("invalid_arguments")),
        "{got}"
    );
    // The handler settles the session on its own task, so the very first
    // call may still go through the session; the rest are the direct
    // path's.
    let answered = direct_count(&d).await - before;
    assert!(answered >= 5.0, "{answered} of 6 calls answered directly");
    // Each call reached the plugin once.
    assert_eq!(
        events(&root.path().join("state/data/tp"), "invoked echo ").len(),
        5
    );
}

#[tokio::test]
async fn rmcp_clients_mark_every_call_for_progress_and_are_served_by_the_session() {
    let root = Scratch::new("sc-rmcp-client");
    let d = daemon(root.path(), true).await;
    for era in ERAS {
        let c = connect(&d.url, Asker::new(false), era).await;
        let tools = c.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "kandev_tp_echo"), "{era:?}");
        let before = direct_count(&d).await;
        let r = call(&c, params("kandev_tp_echo", json!({"msg": "hi", "n": 2}))).await;
        assert_eq!(r.is_error, Some(false), "{era:?}: {r:?}");
        assert_eq!(texts(&r), ["echoed"], "{era:?}: {r:?}");
        let r = call(&c, params("kandev_tp_echo", json!({"msg": "hi"}))).await;
        assert_eq!(r.is_error, Some(true), "{era:?}: {r:?}");
        // rmcp's client puts a progress token on every call: the client
        // may be owed progress, which only a stream carries.
        assert_eq!(direct_count(&d).await, before, "{era:?}");
        let _ = c.cancel().await;
    }
}
