//! Stateless JSON mode, where a plain 2025-era `tools/call` is answered by
//! toolhost's direct path and every other request by rmcp.
//!
//! The direct path must be invisible: two daemons on the same plugins, one
//! with the direct path and one with `direct_calls = false` (everything
//! through rmcp), get the same requests, and their answers must be the
//! same status, the same content type and the same bytes, once each
//! call's random invocation id is masked. The requests cover what the
//! direct path answers (results of every kind, refusals, unknown tools,
//! ids of every form) and the shapes it must hand to rmcp untouched
//! (metadata, other versions, origins, hosts, media types, other methods).
//!
//! Then the protocol's own clients: rmcp's, in both eras, against the
//! direct path; and a call whose client hangs up, which must still end as
//! cancelled at the plugin, with its audit event, not vanish.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use toolhost_e2e::asker::{Asker, ERAS, call, connect, params, texts};
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, TestConfig, dechunk, events, eventually, http_exchange, http_request,
    mask_ids, richplug_dir, testplug_dir,
};

const WAIT: Duration = Duration::from_secs(20);

/// A stateless JSON daemon serving `tp` (protocol 1) and `rp` (protocol 2).
async fn daemon(root: &Path, direct: bool) -> Daemon {
    let plugins = [testplug_dir(root, "tp", "normal"), richplug_dir(root, "rp")];
    let config = TestConfig::new(root, &plugins)
        .ids("task-sl", "session-sl")
        .http(&format!("stateless_json = true\ndirect_calls = {direct}"))
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

/// One raw request: status, content type, and the body with ids masked.
async fn exchange(d: &Daemon, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let (status, head, body) = http_exchange(&d.base(), "POST", "/mcp", headers, body).await;
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    (status, content_type, mask_ids(&body))
}

const AUTH: (&str, &str) = ("Authorization", "Bearer test-token-0123456789");
const CT: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const V2025: (&str, &str) = ("MCP-Protocol-Version", "2025-11-25");

/// What a case is, its headers, its body.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String);

fn plain(id: Value, name: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
    .to_string()
}

#[tokio::test]
async fn the_direct_path_answers_exactly_as_rmcp_does() {
    assert_eq!(TOKEN, AUTH.1.trim_start_matches("Bearer "));
    let with_root = Scratch::new("sl-direct");
    let without_root = Scratch::new("sl-rmcp");
    let (with, without) = tokio::join!(
        daemon(with_root.path(), true),
        daemon(without_root.path(), false)
    );
    let std_headers = [AUTH, CT, ACCEPT, V2025];
    let echo = json!({"msg": "hi", "n": 3});
    // (what it is, headers, body)
    let cases: Vec<Case<'_>> = vec![
        ("a valid call", std_headers.to_vec(), plain(json!(1), "kandev_tp_echo", echo.clone())),
        ("a string id", std_headers.to_vec(), plain(json!("req-7"), "kandev_tp_echo", echo.clone())),
        ("the largest id", std_headers.to_vec(), plain(json!(i64::MAX), "kandev_tp_echo", echo.clone())),
        ("a negative id", std_headers.to_vec(), plain(json!(-3), "kandev_tp_echo", echo.clone())),
        ("an id past i64", std_headers.to_vec(), plain(json!(u64::MAX), "kandev_tp_echo", echo.clone())),
        ("a fractional id", std_headers.to_vec(), plain(json!(1.5), "kandev_tp_echo", echo.clone())),
        ("no version header", vec![AUTH, CT, ACCEPT], plain(json!(2), "kandev_tp_echo", echo.clone())),
        ("version 2025-06-18", vec![AUTH, CT, ACCEPT, ("MCP-Protocol-Version", "2025-06-18")], plain(json!(2), "kandev_tp_echo", echo.clone())),
        ("an alias", std_headers.to_vec(), plain(json!(3), "kandev_tp_echo", json!({"msg": "a", "n": 1, "limit": 4}))),
        ("an unknown argument", std_headers.to_vec(), plain(json!(4), "kandev_tp_echo", json!({"msg": "a", "n": 1, "zzz": "v-secret"}))),
        ("a wrong type", std_headers.to_vec(), plain(json!(5), "kandev_tp_echo", json!({"msg": 7, "n": 1}))),
        ("a missing required argument", std_headers.to_vec(), plain(json!(6), "kandev_tp_echo", json!({"msg": "a"}))),
        ("too long a string", std_headers.to_vec(), plain(json!(6), "kandev_tp_echo", json!({"msg": "x".repeat(40), "n": 1}))),
        ("no arguments", std_headers.to_vec(), json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "kandev_tp_count"}}).to_string()),
        ("null arguments", std_headers.to_vec(), json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "kandev_tp_count", "arguments": null}}).to_string()),
        ("an unknown tool", std_headers.to_vec(), plain(json!(9), "kandev_tp_nope", json!({}))),
        ("a tool of another surface", std_headers.to_vec(), plain(json!(10), "kandev_tp_only_task", json!({}))),
        ("a hostile name", std_headers.to_vec(), plain(json!(11), &"\u{202e}x\n".repeat(100), json!({}))),
        ("a structured result", std_headers.to_vec(), plain(json!(12), "kandev_tp_echo_report", json!({"q": "w", "extra": 1}))),
        ("output breaking its schema", std_headers.to_vec(), plain(json!(13), "kandev_tp_bad_output", json!({}))),
        ("a timeout", std_headers.to_vec(), plain(json!(14), "kandev_tp_nap", json!({"ms": 3000}))),
        ("every content kind", std_headers.to_vec(), plain(json!(15), "kandev_rp_media", json!({}))),
        ("a bad content block", std_headers.to_vec(), plain(json!(16), "kandev_rp_bad_block", json!({}))),
        ("a question nobody can answer", std_headers.to_vec(), plain(json!(17), "kandev_rp_confirm", json!({"note": "n"}))),
        ("progress nobody asked for", std_headers.to_vec(), plain(json!(18), "kandev_rp_steps", json!({"steps": 3}))),
        ("a huge result", std_headers.to_vec(), plain(json!(19), "kandev_tp_big", json!({"bytes": 300_000}))),
        // What the direct path hands to rmcp.
        ("a progress token", std_headers.to_vec(), json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "kandev_rp_steps", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}}}).to_string()),
        ("string arguments", std_headers.to_vec(), json!({"jsonrpc": "2.0", "id": 22, "method": "tools/call", "params": {"name": "kandev_tp_echo", "arguments": "x"}}).to_string()),
        ("tools/list", std_headers.to_vec(), json!({"jsonrpc": "2.0", "id": 23, "method": "tools/list"}).to_string()),
        ("a notification", std_headers.to_vec(), json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string()),
        ("a batch", std_headers.to_vec(), format!("[{}]", plain(json!(24), "kandev_tp_echo", echo.clone()))),
        ("not JSON", std_headers.to_vec(), "{\"jsonrpc\": \"2.0\", ".to_owned()),
        ("jsonrpc 1.0", std_headers.to_vec(), json!({"jsonrpc": "1.0", "id": 25, "method": "tools/call", "params": {"name": "kandev_tp_echo", "arguments": echo}}).to_string()),
        ("an unknown version", vec![AUTH, CT, ACCEPT, ("MCP-Protocol-Version", "2030-01-01")], plain(json!(26), "kandev_tp_echo", echo.clone())),
        ("version 2026-07-28 without metadata", vec![AUTH, CT, ACCEPT, ("MCP-Protocol-Version", "2026-07-28")], plain(json!(27), "kandev_tp_echo", echo.clone())),
        ("an allowed origin", vec![AUTH, CT, ACCEPT, V2025, ("Origin", "http://localhost:3000")], plain(json!(28), "kandev_tp_echo", echo.clone())),
        ("a foreign origin", vec![AUTH, CT, ACCEPT, V2025, ("Origin", "https://evil.test")], plain(json!(29), "kandev_tp_echo", echo.clone())),
        ("a foreign host", vec![AUTH, CT, ACCEPT, V2025, ("Host", "evil.test")], plain(json!(30), "kandev_tp_echo", echo.clone())),
        ("json only in Accept", vec![AUTH, CT, ("Accept", "application/json"), V2025], plain(json!(31), "kandev_tp_echo", echo.clone())),
        ("sse refused by weight", vec![AUTH, CT, ("Accept", "application/json, text/event-stream;q=0"), V2025], plain(json!(32), "kandev_tp_echo", echo.clone())),
        ("a text body", vec![AUTH, ("Content-Type", "text/plain"), ACCEPT, V2025], plain(json!(33), "kandev_tp_echo", echo.clone())),
        ("a session id", vec![AUTH, CT, ACCEPT, V2025, ("Mcp-Session-Id", "made-up")], plain(json!(34), "kandev_tp_echo", echo.clone())),
        ("no token", vec![CT, ACCEPT, V2025], plain(json!(35), "kandev_tp_echo", echo.clone())),
        ("a wrong token", vec![("Authorization", "Bearer nope"), CT, ACCEPT, V2025], plain(json!(36), "kandev_tp_echo", echo.clone())),
    ];
    let mut direct_answers = 0;
    for (what, headers, body) in &cases {
        let (a, b) = tokio::join!(
            exchange(&with, headers, body),
            exchange(&without, headers, body)
        );
        assert_eq!(a, b, "{what}: the direct path and rmcp answer differently");
        assert!(a.0 != 0, "{what}: no answer");
        if a.1 == "application/json" && a.2.contains("\"jsonrpc\"") {
            direct_answers += 1;
        }
    }
    assert!(
        direct_answers >= 27,
        "most cases reached a tool: {direct_answers}"
    );
    // No argument value in any answer of the direct path.
    let (_, _, refusal) = exchange(
        &with,
        &std_headers,
        &plain(
            json!(40),
            "kandev_tp_echo",
            json!({"msg": "a", "n": 1, "zzz": "v-secret"}),
        ),
    )
    .await;
    assert!(
        refusal.contains("unknown_argument") || refusal.contains("zzz"),
        "{refusal}"
    );
    assert!(!refusal.contains("v-secret"), "{refusal}");
    // A crash: how the plugin's end is worded depends on which end of the
    // socket notices first, so only the outcome is compared.
    let crash = plain(json!(20), "kandev_tp_crash", json!({}));
    let (a, b) = tokio::join!(
        exchange(&with, &std_headers, &crash),
        exchange(&without, &std_headers, &crash)
    );
    for (status, _, body) in [a, b] {
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"code\":\"plugin_unavailable\""), "{body}");
    }
    // The crashing call can answer before the daemon has reaped the
    // process; a call sent in that window is lost with the process, so the
    // count waits until the supervisor has seen the exit.
    for d in [&with, &without] {
        eventually(WAIT, "tp restarted after its crash", async || {
            let restarts = d
                .metric("toolhost_plugin_restarts_total{plugin=\"tp\"}")
                .await?;
            (restarts >= 1.0).then_some(())
        })
        .await;
    }
    // The plugin saw each direct call once.
    let count = exchange(
        &with,
        &std_headers,
        &plain(json!(41), "kandev_tp_count", json!({})),
    )
    .await;
    let again = exchange(
        &without,
        &std_headers,
        &plain(json!(41), "kandev_tp_count", json!({})),
    )
    .await;
    assert_eq!(count, again, "both plugins counted the same calls");
}

#[tokio::test]
async fn rmcp_clients_of_both_eras_call_through_the_direct_path() {
    let root = Scratch::new("sl-clients");
    let d = daemon(root.path(), true).await;
    for era in ERAS {
        let c = connect(&d.url, Asker::new(false), era).await;
        let tools = c.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "kandev_tp_echo"), "{era:?}");
        let r = call(&c, params("kandev_tp_echo", json!({"msg": "hi", "n": 2}))).await;
        assert_eq!(r.is_error, Some(false), "{era:?}: {r:?}");
        assert_eq!(texts(&r), ["echoed"], "{era:?}: {r:?}");
        let echoed = r
            .structured_content
            .as_ref()
            .and_then(|s| s.pointer("/arguments/msg"));
        assert_eq!(echoed, Some(&json!("hi")), "{era:?}: {r:?}");
        let r = call(&c, params("kandev_tp_echo", json!({"msg": "hi"}))).await;
        assert_eq!(r.is_error, Some(true), "{era:?}: {r:?}");
        let r = call(&c, params("kandev_rp_media", json!({}))).await;
        assert_eq!(r.content.len(), 7, "{era:?}");
        let _ = c.cancel().await;
    }
}

#[tokio::test]
async fn a_call_whose_client_hangs_up_is_cancelled_not_lost() {
    use tokio::io::AsyncWriteExt as _;
    let root = Scratch::new("sl-gone");
    let plugins = [testplug_dir(root.path(), "tp", "normal")];
    let config = TestConfig::new(root.path(), &plugins)
        .http("stateless_json = true")
        .extra("[limits]\nmax_calls_per_plugin = 1\n")
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    let authority = d.base().trim_start_matches("http://").to_owned();
    let body = plain(json!(1), "kandev_tp_slow", json!({"ms": 60_000}));
    let mut s = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in [AUTH, CT, ACCEPT, V2025] {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes()).await.unwrap();
    let data = root.path().join("state/data/tp");
    eventually(WAIT, "the plugin got the call", async || {
        (!events(&data, "invoked slow").is_empty()).then_some(())
    })
    .await;
    // The client goes away mid-call.
    drop(s);
    eventually(WAIT, "the plugin saw the cancellation", async || {
        (!events(&data, "cancelled slow").is_empty()).then_some(())
    })
    .await;
    eventually(WAIT, "the call counted as cancelled", async || {
        d.metric("toolhost_tool_calls_total{tool=\"kandev_tp_slow\",outcome=\"cancelled\"}")
            .await
            .filter(|n| *n == 1.0)
    })
    .await;
    // The one slot is free again, and the daemon serves on.
    let (status, answer) = http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[AUTH, CT, ACCEPT, V2025],
        &plain(json!(2), "kandev_tp_echo", json!({"msg": "after", "n": 1})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("after"), "{answer}");
    assert!(!answer.contains("\"isError\":true"), "{answer}");
}
