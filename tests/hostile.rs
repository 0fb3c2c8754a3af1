//! Hostile input over HTTP and MCP, enforced limits, and the secrets check:
//! a unique secret in every argument position of every failure mode appears
//! in no response, no log line (at trace level) and no metric.

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use toolhost_e2e::{
    AgentClient, Daemon, Scratch, TOKEN, agent, call_tool, events, eventually, http_request,
    outcome_code, process_alive, testplug_dir,
};

const WAIT: Duration = Duration::from_secs(20);

fn config(root: &Path, plugin: &Path, extra_http: &str, extra: &str) -> String {
    format!(
        "plugins = [{:?}]\nstate_dir = {:?}\n\n[http]\n{extra_http}\n\n[[http.tokens]]\ntoken = \"{TOKEN}\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n\n[supervisor]\nbackoff_first_ms = 50\nstop_grace_ms = 2000\n{extra}\n",
        plugin.display().to_string(),
        root.join("state").display().to_string()
    )
}

async fn call(
    c: &AgentClient,
    name: &str,
    args: Value,
) -> Result<rmcp::model::CallToolResult, String> {
    call_tool(c, name, args).await.map_err(|e| e.to_string())
}

fn code(r: &Result<rmcp::model::CallToolResult, String>) -> String {
    match r {
        Ok(r) => outcome_code(r),
        Err(e) => format!("protocol: {e}"),
    }
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}"#;

#[tokio::test]
async fn hostile_http_gets_clear_errors_and_the_daemon_keeps_serving() {
    let root = Scratch::new("hostile");
    let tp = testplug_dir(root.path(), "tp", "normal");
    let d = Daemon::start(
        root.path(),
        &config(
            root.path(),
            &tp,
            "max_sessions = 3\nsession_idle_timeout_ms = 3000",
            "[limits]\nmax_calls_per_plugin = 2\nmax_request_bytes = 1500000\n",
        ),
        &[],
    );
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    let auth = format!("Bearer {TOKEN}");
    let h = |extra: &'static [(&'static str, &'static str)]| {
        let mut v: Vec<(&str, String)> = vec![
            ("Authorization", auth.clone()),
            ("Accept", "application/json, text/event-stream".into()),
        ];
        v.extend(extra.iter().map(|(k, val)| (*k, (*val).to_owned())));
        v
    };
    let send = async |headers: Vec<(&str, String)>, body: &str| {
        let hs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        http_request(&d.base(), "POST", "/mcp", &hs, body).await
    };
    // Malformed JSON-RPC, wrong content type, a huge body, a huge header.
    let (s, body) = send(h(&[("Content-Type", "application/json")]), "{not json").await;
    assert!((400..500).contains(&s), "malformed JSON: {s} {body}");
    let (s, _) = send(h(&[("Content-Type", "text/plain")]), INIT).await;
    assert!((400..500).contains(&s), "wrong content type: {s}");
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(2_000_000)
    );
    let (s, _) = send(h(&[("Content-Type", "application/json")]), &huge).await;
    assert_eq!(s, 413, "request over max_request_bytes");
    let big_header = "y".repeat(1_000_000);
    let hs = vec![
        ("Authorization", auth.clone()),
        ("Accept", "application/json, text/event-stream".to_owned()),
        ("Content-Type", "application/json".to_owned()),
        ("X-Big", big_header),
    ];
    let (s, _) = send(hs, INIT).await;
    assert!(s == 431 || s == 400 || s == 0, "oversized headers: {s}");
    let (s, _) = http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[("Content-Type", "application/json")],
        INIT,
    )
    .await;
    assert_eq!(s, 401, "no token");
    // Deep nesting, beyond what JSON parsers accept, and within it.
    let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
    let (s, _) = send(h(&[("Content-Type", "application/json")]), &deep).await;
    assert!((400..500).contains(&s), "deeply nested body: {s}");
    let c = agent(&d.url, TOKEN).await;
    let mut nested = json!("x");
    for _ in 0..100 {
        nested = json!({ "k": nested });
    }
    let r = call(
        &c,
        "kandev_tp_echo",
        json!({ "msg": "m", "n": 1, "settings": nested }),
    )
    .await;
    assert_eq!(code(&r), "invalid_arguments", "{r:?}");

    // Concurrent calls per plugin are capped: the rest fail fast.
    let slow = || {
        let c = &c;
        async move { call(c, "kandev_tp_slow", json!({ "ms": 800 })).await }
    };
    let results = futures_lite_join(vec![slow(), slow(), slow(), slow(), slow()]).await;
    let limited = results
        .iter()
        .filter(|r| {
            r.as_ref()
                .ok()
                .and_then(|r| r.structured_content.as_ref())
                .and_then(|s| s.pointer("/error/message"))
                .and_then(Value::as_str)
                .is_some_and(|m| m.contains("calls in flight"))
        })
        .count();
    assert_eq!(limited, 3, "{results:?}");
    assert_eq!(
        events(&root.path().join("state/data/tp"), "invoked slow").len(),
        2
    );

    // Sessions are capped (3, with `c` open), counted from `initialize`:
    // one that never sends `notifications/initialized` holds a slot too.
    // Abandoned ones are closed when idle.
    let abandoned = vec![agent(&d.url, TOKEN).await];
    let (status, _) = http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[
            ("Authorization", &format!("Bearer {TOKEN}")),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"half-open","version":"1"}}}"#,
    )
    .await;
    assert_eq!(status, 200, "a session that only initializes is admitted");
    let refused = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(d.url.clone()).auth_header(TOKEN.to_owned()),
    );
    let r = ().serve(refused).await;
    assert!(
        r.err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .contains("too many sessions"),
        "the limit holds"
    );
    std::mem::forget(abandoned); // never closed: only the idle timeout ends them
    let started = std::time::Instant::now();
    eventually(
        WAIT,
        "abandoned sessions closed by the idle timeout",
        async || {
            let t = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(d.url.clone())
                    .auth_header(TOKEN.to_owned()),
            );
            ().serve(t).await.ok()
        },
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "a slot opened only when the idle sessions were closed"
    );
    let _ = c.cancel().await;
    assert!(process_alive(d.pid()), "the daemon is still up");
}

async fn futures_lite_join<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    futures::future::join_all(futs).await
}

#[tokio::test]
async fn no_secret_reaches_a_response_a_log_line_or_a_metric() {
    let root = Scratch::new("secrets");
    let tp = testplug_dir(root.path(), "tp", "once");
    let d = Daemon::start_logging(root.path(), &config(root.path(), &tp, "", ""), &[], "trace");
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    let c = agent(&d.url, TOKEN).await;
    let mut n = 0;
    let mut secret = || {
        n += 1;
        format!("Zq{n}-SECRET-9x7w")
    };
    let mut shown = Vec::new();
    let mut secrets = Vec::new();
    macro_rules! record {
        ($s:expr, $r:expr) => {{
            shown.push(match $r {
                Ok(r) => serde_json::to_string(r).unwrap_or_default(),
                Err(e) => e.clone(),
            });
            secrets.push($s);
        }};
    }
    // invalid_arguments, in every position.
    for make in [
        |s: &str| json!({ "msg": 5, "n": s }),
        |s: &str| json!({ "msg": format!("{s}{s}"), "n": 1 }),
        |s: &str| json!({ "msg": "m", "n": 1, "mode": s }),
        |s: &str| json!({ "msg": "m", "n": 1, "extra": s }),
        // A key is data too; one that is not identifier-shaped is never named.
        |s: &str| json!({ "msg": "m", "n": 1, (format!("{s} key")): 1 }),
        |s: &str| json!({ "msg": "m", "n": 1, "settings": { "k": [s] } }),
        |s: &str| json!({ "msg": "m", "n": 1, "limit": s }),
        |s: &str| json!({ "msg": "m", "n": 1, "limit": 2, "max_results": s }),
        |s: &str| json!({ "n": [s] }),
    ] {
        let s = secret();
        let r = call(&c, "kandev_tp_echo", make(&s)).await;
        assert!(code(&r) == "invalid_arguments", "{r:?}");
        record!(s, &r);
    }
    // Unknown tool (of another surface), result checks, timeout.
    let s = secret();
    let r = call(&c, "kandev_tp_only_task", json!({ "note": s })).await;
    record!(s, &r);
    let s = secret();
    let r = call(&c, "kandev_tp_bad_output", json!({ "note": s })).await;
    assert_eq!(code(&r), "plugin_error");
    record!(s, &r);
    let s = secret();
    let r = call(
        &c,
        "kandev_tp_big",
        json!({ "bytes": 2_000_000, "note": s }),
    )
    .await;
    assert_eq!(code(&r), "result_too_large");
    record!(s, &r);
    let s = secret();
    let r = call(&c, "kandev_tp_nap", json!({ "ms": 30_000, "note": s })).await;
    assert_eq!(code(&r), "timeout");
    record!(s, &r);
    // Cancelled.
    let s = secret();
    let p = CallToolRequestParams::new("kandev_tp_slow").with_arguments(
        json!({ "note": s })
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let handle = c
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(p)),
            PeerRequestOptions::no_options(),
        )
        .await;
    let handle = handle.unwrap_or_else(|e| panic!("{e}"));
    eventually(WAIT, "slow reached", async || {
        (!events(&root.path().join("state/data/tp"), "invoked slow").is_empty()).then_some(())
    })
    .await;
    let _ = handle.cancel(Some("stop".into())).await;
    secrets.push(s);
    // plugin_unavailable: the plugin dies mid-call, then stays restarting.
    let s = secret();
    let r = call(&c, "kandev_tp_crash", json!({ "note": s })).await;
    assert_eq!(code(&r), "plugin_unavailable");
    record!(s, &r);
    let s = secret();
    let r = call(&c, "kandev_tp_count", json!({ "note": s })).await;
    record!(s, &r);
    let s = secret();
    let r = call(&c, "kandev_tp_echo", json!({ "msg": s, "n": 1 })).await;
    assert_eq!(code(&r), "plugin_unavailable");
    record!(s, &r);

    let (_, metrics) = http_request(
        &d.base(),
        "GET",
        "/metrics",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        "",
    )
    .await;
    let _ = c.cancel().await;
    let logs = eventually(WAIT, "the audit lines", async || {
        let l = d.logs();
        (l.matches("tool call").count() >= 14).then_some(l)
    })
    .await;
    for s in &secrets {
        for (i, text) in shown.iter().enumerate() {
            assert!(!text.contains(s.as_str()), "response {i} shows {s}: {text}");
        }
        let line = logs.lines().find(|l| l.contains(s.as_str()));
        assert!(
            line.is_none(),
            "a log line shows {s}: {}",
            line.unwrap_or_default()
                .chars()
                .take(400)
                .collect::<String>()
        );
        assert!(!metrics.contains(s.as_str()), "metrics show {s}");
        assert!(
            !logs.contains("SECRET"),
            "a log line shows part of a secret"
        );
    }
    assert!(
        logs.contains("DEBUG"),
        "the daemon logged at its most verbose levels"
    );
}
