//! Hostile input over HTTP and MCP, enforced limits, and the secrets check:
//! a unique secret in every argument position of every failure mode appears
//! in no response, no log line (at trace level) and no metric.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use toolhost_e2e::{
    AUDIT_LOG_FILTER, AgentClient, Daemon, Scratch, TOKEN, TestConfig, agent, call_tool, events,
    eventually, http_request, outcome_code, process_alive, testplug_dir,
};

const WAIT: Duration = Duration::from_secs(20);

fn config(root: &Path, plugin: &Path, extra_http: &str, extra: &str) -> String {
    TestConfig::new(root, &[plugin.to_path_buf()])
        .http(extra_http)
        .extra(extra)
        .build()
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

/// A daemon serving `testplug` as `tp` (`extra_http` under `[http]`,
/// `extra` after the rest), its plugin ready.
async fn tp_daemon(root: &Path, extra_http: &str, extra: &str) -> Daemon {
    tp_daemon_with(root, extra_http, extra, |_| {}).await
}

/// As [`tp_daemon`], with the daemon's command adjusted by `setup`.
async fn tp_daemon_with(
    root: &Path,
    extra_http: &str,
    extra: &str,
    setup: impl FnOnce(&mut std::process::Command),
) -> Daemon {
    let tp = testplug_dir(root, "tp", "normal");
    let d = Daemon::start_with(
        root,
        &config(root, &tp, extra_http, extra),
        &[],
        AUDIT_LOG_FILTER,
        setup,
    );
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    d
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}"#;

#[tokio::test]
async fn hostile_http_gets_clear_errors_and_the_daemon_keeps_serving() {
    let root = Scratch::new("hostile");
    let d = tp_daemon(
        root.path(),
        "max_sessions = 3\nsession_idle_timeout_ms = 3000",
        "[limits]\nmax_calls_per_plugin = 2\nmax_request_bytes = 1500000\n",
    )
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
    toolhost_registry::use_ring_for_tls();
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
            toolhost_registry::use_ring_for_tls();
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
    // Every span toolhost and the plugin export goes to a real receiver,
    // whose bytes are searched too.
    let receiver = toolhost_bench::otlp::Receiver::start(toolhost_bench::otlp::Mode::Collect)
        .await
        .unwrap();
    let telemetry = format!(
        "[telemetry]\nendpoint = \"{}\"\nflush_interval_ms = 100\n[plugin.tp]\ntelemetry = true\n",
        receiver.endpoint()
    );
    let d = Daemon::start_logging(
        root.path(),
        &config(root.path(), &tp, "", &telemetry),
        &[],
        "trace",
    );
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
    // Realistic credential formats (fake, but shaped like the real ones), in
    // every position a key or a value can take: none is ever shown.
    let corpus = [
        "ghp_R2d2C3poBb8Ewok9Yoda7Leia4Han5Solo6Lu",
        "github_pat_11ABCDEFG0abcdefghijKLMNOPQRSTuvwxyz0123456789",
        "sk-proj-Q4x9Lm2Vb7Nc1Zx8Kj5Hg3Fd6Sa0Pq",
        "sk_live_51HxYzAbCdEfGhIjKlMnOpQr",
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "AKIAZ7Q4W2E9R3T6Y1U8",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.Xq3",
        "glpat-Zq8Wx7Ec6Rv5Tb4Yn3Um",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        "q8Zr2LmX0vNw5Tb7Hc3Kd9Fy1Gs6Jp4A",
    ];
    for cred in corpus {
        let cred = cred.to_owned();
        for args in [
            json!({ "msg": "m", "n": 1, (cred.clone()): 1 }),
            json!({ "msg": "m", "n": 1, "settings": { (cred.clone()): 5 } }),
            json!({ "msg": format!("{cred} {cred}"), "n": 1 }),
            json!({ "msg": "m", "n": 1, "limit": cred }),
            json!({ "msg": "m", "n": [cred] }),
        ] {
            let r = call(&c, "kandev_tp_echo", args).await;
            assert_eq!(code(&r), "invalid_arguments", "{r:?}");
            record!(cred.clone(), &r);
        }
        // Report mode lists dropped names: never this one.
        let r = call(
            &c,
            "kandev_tp_echo_report",
            json!({ "q": "x", (cred.clone()): 1 }),
        )
        .await;
        let meta = r
            .as_ref()
            .ok()
            .and_then(|r| r.meta.clone())
            .map(|m| Value::Object(m.0).to_string())
            .unwrap_or_default();
        assert!(!meta.contains(&cred), "{meta}");
        record!(cred.clone(), &r);
    }
    // Keys of an open map are data, however harmless they look.
    let key = "harmlessLookingKey42";
    let r = call(
        &c,
        "kandev_tp_echo",
        json!({ "msg": "m", "n": 1, "settings": { key: 5 } }),
    )
    .await;
    assert_eq!(code(&r), "invalid_arguments");
    let shown_key = serde_json::to_string(&r.as_ref().ok()).unwrap_or_default();
    assert!(!shown_key.contains(key), "{shown_key}");
    assert!(shown_key.contains("/settings/*"), "{shown_key}");

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
    let handle = handle.expect("the step before failed");
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
    let exported = eventually(
        WAIT,
        "every call's spans, the plugin's among them",
        async || {
            let spans = receiver.spans();
            let calls = spans
                .iter()
                .filter(|s| {
                    s.kind == 2 && s.service == "toolhost" && s.name.starts_with("tools/call")
                })
                .count();
            (calls >= 14 && spans.iter().any(|s| s.service == "tp"))
                .then(|| String::from_utf8_lossy(&receiver.raw()).into_owned())
        },
    )
    .await;
    assert!(
        !exported.contains("SECRET"),
        "an exported span holds part of a secret"
    );
    for s in &secrets {
        assert!(!exported.contains(s.as_str()), "an exported span holds {s}");
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

// ---------------------------------------------------------------------------
// Hostile peers: each attack, on real processes, and the limit that stops it.
// The figures printed here (`--nocapture`) are the ones in RELIABILITY.md.
// ---------------------------------------------------------------------------

/// One raw HTTP/1.1 exchange on `/mcp`: (status, head, body).
async fn exchange(
    base: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    toolhost_e2e::http_exchange(base, method, "/mcp", headers, body).await
}

fn session_id(head: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("mcp-session-id")
            .then(|| v.trim().to_owned())
    })
}

fn mcp_headers<'a>(auth: &'a str, session: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![
        ("Authorization", auth),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    if let Some(s) = session {
        h.push(("Mcp-Session-Id", s));
    }
    h
}

/// Opens a session with raw HTTP (initialize, then initialized); its id.
async fn raw_session(base: &str, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let (status, head, body) = exchange(base, "POST", &mcp_headers(&auth, None), INIT).await;
    let Some(id) = session_id(&head) else {
        panic!("no session id: {status} {head} {body}");
    };
    let (s, _, _) = exchange(
        base,
        "POST",
        &mcp_headers(&auth, Some(&id)),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(s, 202, "initialized accepted");
    id
}

const SECOND_TOKEN: &str = "second-token-abcdefghijkl";

fn two_tokens() -> String {
    format!(
        "\n[[http.tokens]]\ntoken = \"{SECOND_TOKEN}\"\nsurface = \"chat\"\ntask_id = \"t2\"\nsession_id = \"s2\"\n"
    )
}

#[allow(unsafe_code)]
fn with_fd_limit(cmd: &mut std::process::Command, limit: u64) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: setrlimit is one system call, async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setrlimit(
                rustix::process::Resource::Nofile,
                rustix::process::Rlimit {
                    current: Some(limit),
                    maximum: Some(limit),
                },
            )
            .map_err(std::io::Error::from)
        });
    }
}

/// A daemon with `testplug` `tp`, limited to 256 open files, ready.
async fn fd_limited_daemon(root: &Path, extra_http: &str, extra: &str) -> Daemon {
    tp_daemon_with(root, extra_http, extra, |cmd| with_fd_limit(cmd, 256)).await
}

/// SIGKILLs the daemon's plugin process; its pid.
fn kill_plugin(d: &Daemon) -> u32 {
    let Some(plugin) = d.children().first().copied() else {
        panic!("no plugin process");
    };
    let pid = rustix::process::Pid::from_raw(i32::try_from(plugin).unwrap_or(0));
    let _ =
        rustix::process::kill_process(pid.expect("a plugin pid"), rustix::process::Signal::KILL);
    plugin
}

/// Opens `n` idle connections to `d`, holding them. A connect the daemon
/// cannot accept (its backlog full) waits for SYN retries: given up on.
async fn hold_connections(d: &Daemon, n: usize) -> Vec<tokio::net::TcpStream> {
    let authority = d.base().trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..n {
        let connect = tokio::net::TcpStream::connect(&authority);
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
            held.push(s);
        }
    }
    held
}

#[tokio::test]
async fn an_idle_connection_flood_locks_no_one_out() {
    let root = Scratch::new("fd-flood");
    let d = fd_limited_daemon(
        root.path(),
        "header_timeout_ms = 60000",
        "[admin]\nmax_connections = 8\n",
    )
    .await;
    // More idle connections than the daemon has descriptors.
    let flood = hold_connections(&d, 400).await;
    let fds = toolhost_e2e::open_fds(d.pid());
    assert!(fds < 256, "the daemon stays under its limit ({fds} open)");
    // A fresh client still gets /healthz and a tool call.
    let started = std::time::Instant::now();
    let (s, body) = http_request(&d.base(), "GET", "/healthz", &[], "").await;
    println!(
        "fd flood: {} connections held, daemon at {fds} descriptors, /healthz in {:?}",
        flood.len(),
        started.elapsed()
    );
    assert_eq!((s, body.as_str()), (200, "ok\n"));
    let c = agent(&d.url, TOKEN).await;
    let r = call(&c, "kandev_tp_echo", json!({ "msg": "m", "n": 1 })).await;
    assert_eq!(code(&r), "ok", "{r:?}");
    // A plugin killed during the flood comes back: restarts keep their
    // reserve of descriptors.
    let Some(plugin) = d.children().first().copied() else {
        panic!("no plugin process");
    };
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(plugin).unwrap_or(0)).expect("pid"),
        rustix::process::Signal::KILL,
    );
    eventually(WAIT, "the plugin restarted during the flood", async || {
        d.children()
            .first()
            .is_some_and(|p| *p != plugin)
            .then_some(())
    })
    .await;
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    let r = call(&c, "kandev_tp_echo", json!({ "msg": "m", "n": 2 })).await;
    assert_eq!(code(&r), "ok", "{r:?}");
    drop(flood);
    let _ = c.cancel().await;
}

#[tokio::test]
async fn a_slow_header_connection_is_closed_at_the_header_timeout() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let root = Scratch::new("slowloris");
    let tp = testplug_dir(root.path(), "tp", "normal");
    let d = Daemon::start(
        root.path(),
        &config(root.path(), &tp, "header_timeout_ms = 1000", ""),
        &[],
    );
    let authority = d.base().trim_start_matches("http://").to_owned();
    let Ok(mut s) = tokio::net::TcpStream::connect(&authority).await else {
        panic!("cannot connect");
    };
    let started = std::time::Instant::now();
    // One byte every 200 ms: the headers would take forever.
    let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    let mut closed_after = None;
    for (i, b) in request.iter().cycle().enumerate().take(200) {
        if s.write_all(&[*b]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await
        {
            closed_after = Some(started.elapsed());
            break;
        }
        assert!(i < 150, "still open after 30 s");
    }
    let Some(after) = closed_after else {
        panic!("the slow connection was never closed");
    };
    println!("slow headers: closed after {after:?} (header_timeout_ms = 1000)");
    assert!(after < Duration::from_secs(5), "closed after {after:?}");
    let (s, _) = http_request(&d.base(), "GET", "/healthz", &[], "").await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn an_unknown_key_burst_gets_bounded_answers_and_memory_comes_back() {
    let root = Scratch::new("amplify");
    // Generous connection timeouts: this test is about what a burst of
    // large bodies costs, and sixteen 700 KB requests from a debug client
    // on a starved machine can take longer than the 10 s a new connection
    // has to send its headers (with a CPU hog beside the suite one burst
    // request failed as a transport error, most likely so).
    let d = tp_daemon(
        root.path(),
        "header_timeout_ms = 120000\nbody_timeout_ms = 120000",
        "",
    )
    .await;
    let c = agent(&d.url, TOKEN).await;
    let r = call(&c, "kandev_tp_echo", json!({ "msg": "m", "n": 1 })).await;
    assert_eq!(code(&r), "ok");
    let baseline = toolhost_e2e::rss_kib(d.pid());
    let mut args = serde_json::Map::new();
    for i in 0..60_000 {
        args.insert(format!("k{i}"), json!(1));
    }
    args.insert("msg".into(), json!("m"));
    args.insert("n".into(), json!(1));
    let args = Value::Object(args);
    let mut peak = baseline;
    for _round in 0..2 {
        let calls: Vec<_> = (0..16)
            .map(|_| call(&c, "kandev_tp_echo", args.clone()))
            .collect();
        for r in futures::future::join_all(calls).await {
            assert_eq!(code(&r), "invalid_arguments");
            let Ok(r) = r else { continue };
            let text = serde_json::to_string(&r).unwrap_or_default();
            assert!(text.len() < 12 * 1024, "answer of {} bytes", text.len());
            let violations = r
                .structured_content
                .as_ref()
                .and_then(|s| s.pointer("/error/violations"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            assert!(violations <= 22, "{violations} violations listed");
            assert!(text.contains("more unexpected argument"), "{text:.300}");
        }
        peak = peak.max(toolhost_e2e::rss_kib(d.pid()));
    }
    let pid = d.pid();
    let after = eventually(WAIT, "memory back near its baseline", async || {
        let now = toolhost_e2e::rss_kib(pid);
        println!("rss now {now} KiB (baseline {baseline}, peak {peak})");
        (now < baseline + 16 * 1024).then_some(now)
    })
    .await;
    println!(
        "amplification burst: RSS {baseline} KiB before, {peak} KiB at peak, {after} KiB after"
    );
    let _ = c.cancel().await;
}

/// A 2026-07-28 client (no sessions; list changes through
/// `subscriptions/listen`) of the daemon at `url`.
async fn modern_client(url: &str) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    toolhost_registry::use_ring_for_tls();
    let t = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(TOKEN.to_owned()),
    );
    match ()
        .serve_with_lifecycle(
            t,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
    {
        Ok(c) => c,
        Err(e) => panic!("2026 client: {e}"),
    }
}

#[tokio::test]
async fn listen_streams_are_capped_and_expire() {
    use rmcp::model::SubscriptionFilter;
    let root = Scratch::new("listen");
    let d = tp_daemon(
        root.path(),
        "max_sessions = 2\nsession_idle_timeout_ms = 1500",
        "",
    )
    .await;
    let client = async || modern_client(&d.url).await;
    let filter = || SubscriptionFilter::builder().tools_list_changed().build();
    let (a, b, c) = (client().await, client().await, client().await);
    let Ok(mut sa) = a.listen(filter()).await else {
        panic!("first listen refused")
    };
    let Ok(_sb) = b.listen(filter()).await else {
        panic!("second listen refused")
    };
    d.wait_metric("toolhost_sessions", 2.0).await;
    let third = match c.listen(filter()).await {
        Err(e) => e.to_string(),
        Ok(mut s) => match tokio::time::timeout(Duration::from_secs(5), s.next()).await {
            Ok(Ok(None)) => "ended".to_owned(),
            Ok(Err(e)) => e.to_string(),
            other => panic!("a third listen stream was admitted: {other:?}"),
        },
    };
    println!("third listen stream: {third}");
    // Expiry: with no activity, a stream ends within the idle timeout.
    let started = std::time::Instant::now();
    let ended =
        tokio::time::timeout(WAIT, async { while let Ok(Some(_)) = sa.next().await {} }).await;
    assert!(ended.is_ok(), "the listen stream never expired");
    println!("listen stream expired after {:?}", started.elapsed());
    d.wait_metric("toolhost_sessions", 0.0).await;
}

#[tokio::test]
async fn concurrent_listen_streams_beyond_the_cap_are_refused() {
    use rmcp::model::SubscriptionFilter;
    let root = Scratch::new("listen-race");
    let d = tp_daemon(root.path(), "max_sessions = 3", "").await;
    let client = async || modern_client(&d.url).await;
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(client().await);
    }
    let filter = || SubscriptionFilter::builder().tools_list_changed().build();
    let opened = futures::future::join_all(clients.iter().map(|c| c.listen(filter()))).await;
    // A refused stream is refused before it is acknowledged: the client's
    // listen() fails, and no stream was ever open.
    let refused: Vec<String> = opened
        .iter()
        .filter_map(|s| s.as_ref().err().map(ToString::to_string))
        .collect();
    println!("refused listen streams: {refused:?}");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused.iter().all(|e| e.contains("too many sessions")),
        "{refused:?}"
    );
    // An acknowledged stream stays open.
    let mut open = Vec::new();
    for s in opened {
        let Ok(mut s) = s else { continue };
        if tokio::time::timeout(Duration::from_secs(2), s.next())
            .await
            .is_err()
        {
            open.push(s);
        }
    }
    println!(
        "{} of 5 concurrent listen streams stayed open under max_sessions = 3",
        open.len()
    );
    assert_eq!(open.len(), 3, "the listen cap did not hold");
    d.wait_metric("toolhost_sessions", 3.0).await;
    drop(open);
    d.wait_metric("toolhost_sessions", 0.0).await;
}

#[tokio::test]
async fn a_session_belongs_to_its_token_and_quotas_count_per_token() {
    let root = Scratch::new("hijack");
    let tp = testplug_dir(root.path(), "tp", "normal");
    let d = Daemon::start(
        root.path(),
        &format!(
            "{}{}",
            config(root.path(), &tp, "max_sessions_per_token = 2", ""),
            two_tokens()
        ),
        &[],
    );
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    let id = raw_session(&d.base(), TOKEN).await;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let other = format!("Bearer {SECOND_TOKEN}");
    let own = format!("Bearer {TOKEN}");
    let (s, _, body) = exchange(&d.base(), "POST", &mcp_headers(&other, Some(&id)), list).await;
    assert_eq!(s, 404, "another token's request on the session: {body}");
    let (s, _, _) = exchange(&d.base(), "DELETE", &mcp_headers(&other, Some(&id)), "").await;
    assert_eq!(s, 404, "another token cannot delete it");
    let (s, _, unknown) = exchange(
        &d.base(),
        "POST",
        &mcp_headers(&other, Some("no-such-session")),
        list,
    )
    .await;
    assert_eq!(s, 404);
    assert_eq!(body, unknown, "a foreign session looks unknown");
    let (s, _, body) = exchange(&d.base(), "POST", &mcp_headers(&own, Some(&id)), list).await;
    assert_eq!(s, 200, "the owner still uses it: {body}");
    assert!(body.contains("kandev_tp_echo"));
    // Quota: a second session for this token, then no third; the other
    // token is unaffected.
    let second = raw_session(&d.base(), TOKEN).await;
    let (_, head, body) = exchange(&d.base(), "POST", &mcp_headers(&own, None), INIT).await;
    assert!(
        body.contains("too many sessions for this token"),
        "{head}\n{body}"
    );
    let _theirs = raw_session(&d.base(), SECOND_TOKEN).await;
    // The owner ends a session: 204, as clients expect of a session's end
    // (rmcp says 202); it is gone, and its place under the quota is free.
    let (s, _, _) = exchange(&d.base(), "DELETE", &mcp_headers(&own, Some(&second)), "").await;
    assert_eq!(s, 204, "the owner ends its session");
    let (s, _, _) = exchange(&d.base(), "POST", &mcp_headers(&own, Some(&second)), list).await;
    assert_eq!(s, 404, "an ended session is unknown");
    let _third = raw_session(&d.base(), TOKEN).await;
    // Ids and client strings stay out of the log at info.
    let logs = d.logs();
    assert!(!logs.contains(&id), "a session id was logged");
    assert!(!logs.contains("\"h\""), "clientInfo was logged");
}

#[tokio::test]
async fn list_changed_does_not_keep_an_abandoned_session_alive() {
    let root = Scratch::new("idle-notify");
    let d = tp_daemon(root.path(), "session_idle_timeout_ms = 1500", "").await;
    let abandoned = agent(&d.url, TOKEN).await;
    d.wait_metric("toolhost_mcp_listeners", 1.0).await;
    let sock = root.path().join("state/admin.sock");
    let sock = sock.display().to_string();
    let started = std::time::Instant::now();
    // The catalog keeps changing; the session never sends a request.
    eventually(WAIT, "the abandoned session closed", async || {
        for op in ["disable", "enable"] {
            let _ = std::process::Command::new(toolhost_e2e::bin("toolhost"))
                .args(["plugins", op, "tp", "--admin", &sock])
                .output();
        }
        (d.metric("toolhost_sessions").await == Some(0.0)).then_some(())
    })
    .await;
    println!(
        "abandoned session closed after {:?} of list changes",
        started.elapsed()
    );
    assert!(
        abandoned
            .service()
            .list_changed
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0,
        "it was notified meanwhile"
    );
}

#[tokio::test]
async fn a_dropped_connection_cancels_its_call_and_frees_the_slot() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let root = Scratch::new("disconnect");
    let d = tp_daemon(root.path(), "", "[limits]\nmax_calls_per_plugin = 1\n").await;
    let id = raw_session(&d.base(), TOKEN).await;
    let auth = format!("Bearer {TOKEN}");
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"kandev_tp_slow","arguments":{"ms":60000}}}"#;
    let authority = d.base().trim_start_matches("http://").to_owned();
    let Ok(mut s) = tokio::net::TcpStream::connect(&authority).await else {
        panic!("cannot connect");
    };
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in mcp_headers(&auth, Some(&id)) {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let _ = s.write_all(req.as_bytes()).await;
    let data = root.path().join("state/data/tp");
    eventually(WAIT, "the plugin got the call", async || {
        (!events(&data, "invoked slow").is_empty()).then_some(())
    })
    .await;
    let mut buf = [0u8; 256];
    let _ = tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await;
    drop(s);
    eventually(WAIT, "the plugin saw the cancellation", async || {
        (!events(&data, "cancelled slow").is_empty()).then_some(())
    })
    .await;
    // The one slot is free again.
    let c = agent(&d.url, TOKEN).await;
    let r = call(&c, "kandev_tp_echo", json!({ "msg": "m", "n": 1 })).await;
    assert_eq!(code(&r), "ok", "{r:?}");
    let _ = c.cancel().await;
}

#[tokio::test]
async fn the_in_flight_cap_is_exact_and_big_answers_are_result_too_large() {
    let root = Scratch::new("exact-cap");
    let d = tp_daemon(root.path(), "", "[limits]\nmax_calls_per_plugin = 3\n").await;
    let c = agent(&d.url, TOKEN).await;
    let calls: Vec<_> = (0..40)
        .map(|_| call(&c, "kandev_tp_slow", json!({ "ms": 1500 })))
        .collect();
    let results = futures::future::join_all(calls).await;
    let ok = results.iter().filter(|r| code(r) == "ok").count();
    assert_eq!(ok, 3, "exactly the cap ran");
    assert_eq!(
        events(&root.path().join("state/data/tp"), "invoked slow").len(),
        3
    );
    // Over the gRPC message limit: the plugin ran, and the answer says so.
    let r = call(&c, "kandev_tp_big", json!({ "bytes": 5 * 1024 * 1024 })).await;
    assert_eq!(code(&r), "result_too_large", "{r:?}");
    let text = serde_json::to_string(&r.as_ref().ok()).unwrap_or_default();
    assert!(text.contains("may have done its work"), "{text}");
    assert!(!text.contains("refused"), "{text}");
    let _ = c.cancel().await;
}

#[allow(unsafe_code)]
fn with_umask_zero(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: umask is one system call, async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::symlink_metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A `.tar.gz` of `dir` made by the system's tar with `extra` options.
fn tarball(dir: &Path, out: &Path, extra: &[&str]) {
    let status = std::process::Command::new("tar")
        .args(extra)
        .arg("-czf")
        .arg(out)
        .arg("-C")
        .arg(dir.parent().unwrap_or(dir))
        .arg(dir.file_name().unwrap_or_default())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "tar failed");
}

fn install(sock: &Path, archive: &Path) -> (bool, String) {
    let out = std::process::Command::new(toolhost_e2e::bin("toolhost"))
        .args(["plugins", "install"])
        .arg(archive)
        .arg("--admin")
        .arg(sock)
        .output()
        .expect("the step before failed");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn leftovers(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join("state/plugins"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn files_are_private_and_archives_are_normalized_capped_and_relative() {
    use std::os::unix::fs::PermissionsExt as _;
    let root = Scratch::new("files");
    let _daemon = tp_daemon_with(
        root.path(),
        "",
        "[limits]\nmax_archive_bytes = 1048576\nmax_archive_entries = 50\n",
        with_umask_zero,
    )
    .await;
    let state = root.path().join("state");
    let sock = state.join("admin.sock");
    eventually(WAIT, "the admin socket", async || {
        sock.exists().then_some(())
    })
    .await;
    assert_eq!(mode(&sock), 0o600, "admin socket");
    assert_eq!(mode(&state), 0o700, "state_dir");
    assert_eq!(mode(&state.join("data")), 0o700, "data root");
    assert_eq!(mode(&state.join("data/tp")), 0o700, "a plugin's data");

    // A world-writable, setuid plugin is installed with sane modes.
    let kit = testplug_dir(&root.path().join("src"), "kit", "normal");
    let _ = std::fs::write(kit.join("notes.txt"), "hello");
    for (p, m) in [
        (kit.clone(), 0o777),
        (kit.join("plugin.toml"), 0o666),
        (kit.join("notes.txt"), 0o4777),
    ] {
        let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m));
    }
    let archive = root.path().join("kit.tar.gz");
    tarball(&kit, &archive, &[]);
    let (ok, out) = install(&sock, &archive);
    assert!(ok, "{out}");
    let placed = state.join("plugins/kit@1.0.0");
    assert_eq!(mode(&placed), 0o755);
    assert_eq!(mode(&placed.join("plugin.toml")), 0o644);
    assert_eq!(
        mode(&placed.join("notes.txt")),
        0o755,
        "no setuid, no group/other write"
    );
    assert_eq!(mode(&state.join("plugins.json")), 0o600, "state file");

    // A bomb: 20 MiB of zeros (a few KiB packed) against a 1 MiB cap.
    let bomb = root.path().join("bomb-src/bomb");
    let _ = std::fs::create_dir_all(&bomb);
    let _ = std::fs::write(bomb.join("plugin.toml"), "id = \"bomb\"\n");
    let _ = std::fs::write(bomb.join("zeros"), vec![0u8; 20 << 20]);
    let packed = root.path().join("bomb.tar.gz");
    tarball(&bomb, &packed, &[]);
    let (ok, out) = install(&sock, &packed);
    assert!(!ok && out.contains("more than 1048576 bytes"), "{out}");
    // Too many entries.
    let many = root.path().join("many-src/many");
    let _ = std::fs::create_dir_all(&many);
    for i in 0..60 {
        let _ = std::fs::write(many.join(format!("f{i}")), "x");
    }
    let packed = root.path().join("many.tar.gz");
    tarball(&many, &packed, &[]);
    let (ok, out) = install(&sock, &packed);
    assert!(!ok && out.contains("more than 50 entries"), "{out}");
    // Absolute paths are refused, not quietly made relative.
    let packed = root.path().join("abs.tar.gz");
    let status = std::process::Command::new("tar")
        .args(["-P", "-czf"])
        .arg(&packed)
        .arg(&kit)
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    let (ok, out) = install(&sock, &packed);
    assert!(!ok && out.contains("absolute path"), "{out}");
    assert_eq!(leftovers(root.path()), ["kit@1.0.0"], "nothing left behind");
}

#[tokio::test]
async fn a_handshake_naming_a_foreign_socket_is_refused() {
    let root = Scratch::new("foreign");
    // A socket that is not the plugin's: toolhost must never connect to it.
    let decoy_dir = root.path().join("decoy");
    let _ = std::fs::create_dir_all(&decoy_dir);
    let decoy = decoy_dir.join("other.sock");
    let Ok(listener) = tokio::net::UnixListener::bind(&decoy) else {
        panic!("cannot bind the decoy");
    };
    let tp = testplug_dir(root.path(), "tp", "foreign");
    let manifest = tp.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_default()
        .replacen(
            "startup_timeout_ms = 5000\n",
            &format!(
                "startup_timeout_ms = 5000\nenv = {{ TESTPLUG_SOCKET = {:?} }}\n",
                decoy.display().to_string()
            ),
            1,
        );
    let _ = std::fs::write(&manifest, text);
    let d = Daemon::start(root.path(), &config(root.path(), &tp, "", ""), &[]);
    eventually(WAIT, "the foreign handshake refused", async || {
        d.logs()
            .contains("outside the directory toolhost gave it")
            .then_some(())
    })
    .await;
    let accepted = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    assert!(accepted.is_err(), "toolhost connected to a foreign socket");
}

#[allow(unsafe_code)]
fn with_inherited_fd(cmd: &mut std::process::Command, fd: i32) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: fcntl is one system call, async-signal-safe. It clears
    // close-on-exec so the daemon inherits the descriptor, as a careless
    // parent would leave it.
    unsafe {
        cmd.pre_exec(move || {
            let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(std::io::Error::from)
        });
    }
}

#[tokio::test]
async fn a_plugin_sees_no_daemon_secret_and_no_inherited_descriptor() {
    use std::os::fd::AsRawFd as _;
    let root = Scratch::new("clean-env");
    let marker = root.path().join("inherited-marker");
    let Ok(file) = std::fs::File::create(&marker) else {
        panic!("marker");
    };
    let fd = file.as_raw_fd();
    let d = tp_daemon_with(
        root.path(),
        "",
        "[plugin.tp]\npass_env = [\"TOOLHOST_TEST_PASSED\"]\n",
        |cmd| {
            cmd.env("AWS_SECRET_ACCESS_KEY", "daemon-secret-do-not-leak")
                .env("TOOLHOST_TEST_PASSED", "passed-on-purpose");
            with_inherited_fd(cmd, fd);
        },
    )
    .await;
    let c = agent(&d.url, TOKEN).await;
    let r = call(&c, "kandev_tp_env", json!({})).await;
    let Ok(r) = r else { panic!("{r:?}") };
    let s = r.structured_content.clone().unwrap_or_default();
    let text = s.to_string();
    assert!(!text.contains("daemon-secret-do-not-leak"), "{text}");
    assert!(s.pointer("/vars/AWS_SECRET_ACCESS_KEY").is_none());
    assert!(s.pointer("/vars/RUST_LOG").is_none(), "{text}");
    assert_eq!(
        s.pointer("/vars/TOOLHOST_TEST_PASSED")
            .and_then(Value::as_str),
        Some("passed-on-purpose")
    );
    assert!(s.pointer("/vars/PATH").is_some());
    // Its own temporary folder, inside its data and so its quota.
    let data = s
        .pointer("/vars/KANDEV_PLUGIN_DATA_DIR")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert_eq!(
        s.pointer("/vars/TMPDIR").and_then(Value::as_str),
        Some(format!("{data}/.tmp").as_str()),
        "{text}"
    );
    let marker = marker.display().to_string();
    assert!(
        !text.contains(&marker),
        "the plugin inherited the daemon's descriptor: {text}"
    );
    // The daemon itself did inherit it (so the check above means something).
    let daemon_fds: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|t| t.display().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(daemon_fds.contains(&marker), "{daemon_fds:?}");
    // Its socket directory goes when it does, however it ends.
    let sockets = s
        .pointer("/vars/KANDEV_PLUGIN_SOCKET_DIR")
        .and_then(Value::as_str)
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    assert!(sockets.is_dir());
    let _ = call(&c, "kandev_tp_crash", json!({})).await;
    eventually(
        WAIT,
        "the crashed plugin's socket directory removed",
        async || (!sockets.exists()).then_some(()),
    )
    .await;
    let _ = c.cancel().await;
    drop(file);
}

/// The connections the plugin accepted and holds, as its `env` tool
/// reports them.
async fn accepted_by_plugin(c: &AgentClient) -> Option<u64> {
    let r = call(c, "kandev_tp_env", json!({})).await;
    let Ok(r) = r else { panic!("{r:?}") };
    r.structured_content
        .as_ref()
        .and_then(|s| s.get("accepted"))
        .and_then(Value::as_u64)
}

#[tokio::test]
async fn a_protocol_1_plugin_costs_the_daemon_one_connection_for_calls_and_health_checks() {
    let root = Scratch::new("one-connection");
    // Probes every 50 ms, so many run while the calls below are made.
    let d = tp_daemon(
        root.path(),
        "",
        "health_interval_ms = 50\nhealth_timeout_ms = 5000\n",
    )
    .await;
    let c = agent(&d.url, TOKEN).await;
    // The connection the start checked health on closes once the plugin
    // serves (the plugin sees that a moment later): then one connection,
    // which its calls and probes share.
    eventually(WAIT, "the plugin holds one connection", async || {
        (accepted_by_plugin(&c).await == Some(1)).then_some(())
    })
    .await;
    // Calls for at least ten probe intervals: no probe opens another.
    let since = std::time::Instant::now();
    let mut calls = 0;
    while calls < 20 || since.elapsed() < Duration::from_millis(500) {
        assert_eq!(
            accepted_by_plugin(&c).await,
            Some(1),
            "a second connection was opened"
        );
        calls += 1;
    }
    let _ = c.cancel().await;
}

#[tokio::test]
async fn plugin_floods_and_control_characters_never_reach_the_log_raw() {
    let root = Scratch::new("log-hygiene");
    let tp = testplug_dir(root.path(), "tp", "normal");
    let d = Daemon::start_logging(
        root.path(),
        &config(root.path(), &tp, "", ""),
        &[],
        "info,toolhost_runtime=debug",
    );
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    let c = agent(&d.url, TOKEN).await;
    let forged = "x\n2026-01-01T00:00:00Z  INFO toolhost::audit: forged\u{1b}[31m";
    let r = call(&c, forged, json!({})).await;
    assert!(code(&r).starts_with("protocol"), "{r:?}");
    let r = call(&c, "kandev_tp_flood", json!({ "lines": 5000 })).await;
    assert_eq!(code(&r), "ok", "{r:?}\n{}", d.logs());
    let logs = eventually(WAIT, "the suppression summary", async || {
        let l = d.logs();
        l.contains("lines suppressed").then_some(l)
    })
    .await;
    assert!(!logs.contains('\u{1b}'), "a raw ESC reached the log");
    assert!(
        !logs.lines().any(|l| l.starts_with("2026-01-01T00:00:00Z")),
        "a forged line reached the log"
    );
    let forwarded = logs.matches("flood ").count();
    println!("stderr flood: 10000 lines printed, {forwarded} forwarded");
    assert!(forwarded < 1000, "{forwarded} plugin lines forwarded");
    let _ = c.cancel().await;
}

#[tokio::test]
async fn a_restart_short_of_descriptors_waits_for_them_and_is_not_a_failure() {
    let root = Scratch::new("emfile");
    // No reserve, so connections can take every descriptor; one restart
    // allowed, so a counted failure would show at once. The retries back
    // off to at most a second: with the default 30 s, a loaded machine
    // that took a few seconds to see the refusal and free the descriptors
    // left the next try further away than the wait below.
    let d = fd_limited_daemon(
        root.path(),
        "max_connections = 1000\nheader_timeout_ms = 600000",
        "max_restarts = 1\nbackoff_max_ms = 1000\n[limits]\nreserved_fds = 0\n[admin]\nmax_connections = 1\n",
    )
    .await;
    let flood = hold_connections(&d, 400).await;
    eventually(WAIT, "the daemon out of descriptors", async || {
        (toolhost_e2e::open_fds(d.pid()) >= 250).then_some(())
    })
    .await;
    kill_plugin(&d);
    eventually(
        WAIT,
        "a start refused for lack of descriptors",
        async || d.logs().contains("for lack of resources").then_some(()),
    )
    .await;
    drop(flood);
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    assert!(!d.logs().contains("gave up"), "{}", d.logs());
    let c = agent(&d.url, TOKEN).await;
    let r = call(&c, "kandev_tp_echo", json!({ "msg": "m", "n": 1 })).await;
    assert_eq!(code(&r), "ok", "{r:?}");
    let _ = c.cancel().await;
}

#[tokio::test]
async fn non_object_arguments_are_invalid_arguments_with_an_audit_event() {
    let root = Scratch::new("non-object");
    let d = tp_daemon(root.path(), "", "").await;
    let id = raw_session(&d.base(), TOKEN).await;
    let auth = format!("Bearer {TOKEN}");
    for (i, args) in [r#""a string""#, "[1, 2]", "5", "true"].iter().enumerate() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"kandev_tp_count","arguments":{args}}}}}"#,
            i + 10
        );
        let (s, _, answer) =
            exchange(&d.base(), "POST", &mcp_headers(&auth, Some(&id)), &body).await;
        assert_eq!(s, 200, "{answer}");
        assert!(
            answer.contains("\"isError\":true") && answer.contains("invalid_arguments"),
            "{args}: {answer}"
        );
        assert!(answer.contains("must be a JSON object"), "{answer}");
    }
    let logs = eventually(WAIT, "four audit events", async || {
        let l = d.logs();
        (l.matches("outcome=\"invalid_arguments\"").count() >= 4).then_some(l)
    })
    .await;
    assert!(logs.contains("tool=kandev_tp_count"), "{logs}");
}
