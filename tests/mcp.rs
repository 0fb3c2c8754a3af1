//! `toolhost serve` end to end: the real binary, real plugin processes, and
//! rmcp's client over stdio and streamable HTTP, in both protocol eras.
//!
//! Each behaviour of docs/CONTRACT.md §3 to §5 is checked the way an agent meets
//! it. Plugins count their invocations in `events.log`, so "the handler was
//! not invoked" is a fact read from the plugin, not an assumption.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ProtocolVersion,
    ServerNotification, SubscriptionFilter, Tool,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _, PeerRequestOptions};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolhost_e2e::{
    Agent, AgentClient, Daemon, Scratch, TOKEN, TestConfig, agent, bin, events, eventually,
    http_request, process_alive, testplug_dir, workspace_root,
};

const WAIT: Duration = Duration::from_secs(20);
const SECRET: &str = "S3CRET-v4lue-e2e";

type Client = AgentClient;

fn config(root: &Path, plugins: &[PathBuf], extra: &str) -> String {
    TestConfig::new(root, plugins)
        .ids("task-http", "session-http")
        .stdio("task-stdio", "session-stdio")
        .supervisor("health_interval_ms = 200\nhealth_timeout_ms = 500\nbackoff_first_ms = 50\nstop_grace_ms = 2000")
        .extra(extra)
        .build()
}

async fn http_client_2026(url: &str) -> Client {
    toolhost_registry::use_ring_for_tls();
    let t = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(TOKEN.to_owned()),
    );
    let mode = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    match Agent::default().serve_with_lifecycle(t, mode).await {
        Ok(c) => c,
        Err(e) => panic!("cannot connect (2026-07-28): {e}"),
    }
}

/// A stdio session with a daemon that also serves HTTP (for its metrics).
/// Returns the client and the daemon's base URL.
async fn stdio_client(config_file: &Path) -> (Client, String) {
    let mut cmd = tokio::process::Command::new(bin("toolhost"));
    cmd.args(["serve", "--stdio", "--http", "127.0.0.1:0", "--config"])
        .arg(config_file);
    let spawned = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::piped())
        .spawn();
    let (transport, stderr) = spawned.expect("cannot start toolhost --stdio");
    let (tx, rx) = tokio::sync::oneshot::channel();
    if let Some(stderr) = stderr {
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt as _;
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("toolhost: serving MCP on ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(url.trim_end_matches("/mcp").to_owned());
                }
            }
        });
    }
    let client = Agent::default().serve(transport).await.expect("stdio");
    let base = tokio::time::timeout(WAIT, rx)
        .await
        .ok()
        .and_then(Result::ok)
        .expect("no HTTP line");
    (client, base)
}

/// Waits until `/metrics` at `base` shows every plugin ready.
async fn wait_ready(base: &str, plugins: &[&str]) {
    eventually(WAIT, "plugins ready", async || {
        let (_, body) = http_request(
            base,
            "GET",
            "/metrics",
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            "",
        )
        .await;
        plugins
            .iter()
            .all(|p| {
                body.contains(&format!(
                    "toolhost_plugin_state{{plugin=\"{p}\",state=\"ready\"}} 1"
                ))
            })
            .then_some(())
    })
    .await;
}

async fn call(c: &Client, name: &str, args: Option<Value>) -> CallToolResult {
    let mut p = CallToolRequestParams::new(name.to_owned());
    if let Some(Value::Object(a)) = args {
        p = p.with_arguments(a);
    }
    match c.call_tool(p).await {
        Ok(r) => r,
        Err(e) => panic!("{name}: {e}"),
    }
}

/// toolhost's error code: `_meta.error.code`, which every failure has.
fn error_code(r: &CallToolResult) -> Option<String> {
    match toolhost_e2e::outcome_code(r).as_str() {
        "ok" => None,
        code => Some(code.to_owned()),
    }
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

fn tool<'a>(tools: &'a [Tool], name: &str) -> &'a Tool {
    tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

/// Every per-call behaviour, against one client. `data` is the testplug's
/// data directory; the binding's ids are what the plugin must receive.
async fn conformance(c: &Client, data: &Path, task: &str, session: &str) {
    // A listing shows exactly the session's surface, schemas as declared.
    let tools = c.list_all_tools().await.expect("list");
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "kandev_notes_add_note",
            "kandev_notes_add_notes",
            "kandev_notes_delete_notes",
            "kandev_notes_export_notes",
            "kandev_notes_ping",
            "kandev_notes_search_notes",
            "kandev_notes_tidy_tags",
            "kandev_tp_bad_output",
            "kandev_tp_big",
            "kandev_tp_count",
            "kandev_tp_crash",
            "kandev_tp_echo",
            "kandev_tp_echo_report",
            "kandev_tp_env",
            "kandev_tp_flood",
            "kandev_tp_nap",
            "kandev_tp_slow",
        ],
        "chat sees neither notes' configure nor testplug's only_task"
    );
    let add_note = tool(&tools, "kandev_notes_add_note");
    let declared: Value = serde_json::from_str(
        &std::fs::read_to_string(
            workspace_root().join("plugins-example/notes/schemas/add_note.json"),
        )
        .unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(
        Value::Object((*add_note.input_schema).clone()),
        declared,
        "schema exactly as declared"
    );
    assert_eq!(add_note.title.as_deref(), Some("Add a note"));
    let hints = add_note.annotations.clone().unwrap_or_default();
    assert_eq!(
        (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint
        ),
        (Some(false), Some(false), Some(false), Some(false))
    );
    let echo = tool(&tools, "kandev_tp_echo");
    assert!(
        echo.input_schema.get("additionalProperties").is_none(),
        "no additionalProperties added"
    );
    assert!(
        echo.input_schema
            .get("properties")
            .and_then(|p| p.get("limit"))
            .is_none(),
        "aliases are not advertised"
    );
    assert!(
        tool(&tools, "kandev_tp_count")
            .annotations
            .as_ref()
            .is_some_and(|a| a.read_only_hint == Some(true))
    );

    let invoked = |tool: &str| events(data, &format!("invoked {tool} ")).len();

    // A valid call reaches the plugin with the binding's ids and comes back.
    let r = call(c, "kandev_tp_echo", Some(json!({ "msg": "hi", "n": 3 }))).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(&r), "echoed");
    let s = r.structured_content.clone().unwrap_or_default();
    assert_eq!(s["arguments"], json!({ "msg": "hi", "n": 3 }));
    assert_eq!(
        (
            s["context"]["task_id"].as_str(),
            s["context"]["session_id"].as_str()
        ),
        (Some(task), Some(session))
    );
    assert_eq!(s["context"]["surface"], "chat");
    let echoes = invoked("echo");

    // Missing required properties: every name, at the root, handler untouched.
    let r = call(c, "kandev_tp_echo", Some(json!({}))).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(error_code(&r).as_deref(), Some("invalid_arguments"));
    let v = &r.structured_content.clone().unwrap_or_default()["error"]["violations"][0];
    assert_eq!(
        (v["location"].as_str(), v["constraint"].as_str()),
        (Some(""), Some("required"))
    );
    assert_eq!(v["missing"], json!(["msg", "n"]));

    // Wrong type, enum, bound, unknown argument: refused, nothing echoed.
    for (what, args) in [
        ("type", json!({ "msg": "hi", "n": SECRET })),
        ("enum", json!({ "msg": "hi", "n": 1, "mode": SECRET })),
        (
            "bound",
            json!({ "msg": format!("{SECRET}{SECRET}"), "n": 1 }),
        ),
        ("maximum", json!({ "msg": "hi", "n": 987_654 })),
        ("unknown", json!({ "msg": "hi", "n": 1, "extra": SECRET })),
        (
            "open map value",
            json!({ "msg": "hi", "n": 1, "settings": { "k": [SECRET] } }),
        ),
    ] {
        let r = call(c, "kandev_tp_echo", Some(args)).await;
        assert_eq!(
            error_code(&r).as_deref(),
            Some("invalid_arguments"),
            "{what}: {r:?}"
        );
        let shown = serde_json::to_string(&r).unwrap_or_default();
        assert!(
            !shown.contains(SECRET) && !shown.contains("987654"),
            "{what}: a value leaked: {shown}"
        );
    }
    let r = call(
        c,
        "kandev_tp_echo",
        Some(json!({ "msg": "hi", "n": 1, "mgs": "x" })),
    )
    .await;
    assert!(text(&r).contains("did you mean `msg`"), "{}", text(&r));
    assert_eq!(
        invoked("echo"),
        echoes,
        "no refused call reached the plugin"
    );

    // Parameterless: omitted and {} run, any field fails.
    assert_eq!(call(c, "kandev_tp_count", None).await.is_error, Some(false));
    assert_eq!(
        call(c, "kandev_tp_count", Some(json!({}))).await.is_error,
        Some(false)
    );
    assert_eq!(
        error_code(&call(c, "kandev_tp_count", Some(json!({ "x": 1 }))).await).as_deref(),
        Some("invalid_arguments")
    );

    // Open maps stay open; aliases are renamed; alias plus canonical fails.
    let r = call(
        c,
        "kandev_tp_echo",
        Some(json!({ "msg": "m", "n": 1, "settings": { "any-key": "v", "x.y": "w" } })),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let r = call(
        c,
        "kandev_tp_echo",
        Some(json!({ "msg": "m", "n": 1, "limit": 7 })),
    )
    .await;
    assert_eq!(
        r.structured_content.unwrap_or_default()["arguments"],
        json!({ "msg": "m", "n": 1, "max_results": 7 })
    );
    let r = call(
        c,
        "kandev_tp_echo",
        Some(json!({ "msg": "m", "n": 1, "limit": 7, "max_results": 8 })),
    )
    .await;
    assert_eq!(error_code(&r).as_deref(), Some("invalid_arguments"));
    assert!(text(&r).contains("alias"), "{}", text(&r));

    // `report`: unknown keys dropped and listed in `_meta` and the text; the
    // call runs, and its structured content is exactly the plugin's, so it
    // still matches the tool's closed output schema.
    let r = call(
        c,
        "kandev_tp_echo_report",
        Some(json!({ "q": "x", "zeta": 1, "alpha": 2 })),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let meta = r
        .meta
        .clone()
        .map(|m| Value::Object(m.0))
        .unwrap_or_default();
    assert_eq!(meta["unknown_args"], json!(["alpha", "zeta"]), "{r:?}");
    assert!(text(&r).contains("ignored unknown arguments: alpha, zeta"));
    let s = r.structured_content.unwrap_or_default();
    assert!(s.get("unknown_args").is_none(), "{s}");
    assert_eq!(s["arguments"], json!({ "q": "x" }));

    // Another surface's tool does not exist for this session.
    let hidden = c
        .call_tool(CallToolRequestParams::new("kandev_tp_only_task"))
        .await;
    let e = hidden.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        e.contains("-32602") && e.contains("Unknown tool: kandev_tp_only_task"),
        "{e}"
    );

    // Output schema and size cap.
    assert_eq!(
        error_code(&call(c, "kandev_tp_bad_output", None).await).as_deref(),
        Some("plugin_error")
    );
    assert_eq!(
        error_code(&call(c, "kandev_tp_big", Some(json!({ "bytes": 2_000_000 }))).await).as_deref(),
        Some("result_too_large")
    );

    // A deadline is a timeout, and the plugin's handler is told.
    let naps = events(data, "cancelled nap").len();
    let r = call(c, "kandev_tp_nap", Some(json!({ "ms": 30_000 }))).await;
    assert_eq!(error_code(&r).as_deref(), Some("timeout"), "{r:?}");
    eventually(WAIT, "the nap handler to see its deadline", async || {
        (events(data, "cancelled nap").len() > naps).then_some(())
    })
    .await;

    // A client cancellation reaches the plugin.
    let (slows, cancels) = (invoked("slow"), events(data, "cancelled slow").len());
    let handle = c
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                "kandev_tp_slow",
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .expect("the step before failed");
    eventually(WAIT, "the slow call to reach the plugin", async || {
        (invoked("slow") > slows).then_some(())
    })
    .await;
    let _ = handle.cancel(Some("the user gave up".into())).await;
    eventually(WAIT, "the cancellation to reach the plugin", async || {
        (events(data, "cancelled slow").len() > cancels).then_some(())
    })
    .await;
}

#[tokio::test]
async fn stdio_and_http_sessions_get_the_whole_pipeline() {
    let root = Scratch::new("conformance");
    let plugins = [
        testplug_dir(root.path(), "tp", "normal"),
        workspace_root().join("plugins-example/notes"),
    ];
    let d = Daemon::start(root.path(), &config(root.path(), &plugins, ""), &[]);
    let data = root.path().join("state/data/tp");
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    d.wait_metric(
        "toolhost_plugin_state{plugin=\"notes\",state=\"ready\"}",
        1.0,
    )
    .await;

    let http = agent(&d.url, TOKEN).await;
    conformance(&http, &data, "task-http", "session-http").await;
    let _ = http.cancel().await;

    let (stdio, base) = stdio_client(&root.path().join("toolhost.toml")).await;
    wait_ready(&base, &["tp", "notes"]).await;
    // The stdio daemon is a second toolhost with its own testplug process
    // (same data directory).
    conformance(&stdio, &data, "task-stdio", "session-stdio").await;
    let _ = stdio.cancel().await;
}

#[tokio::test]
async fn http_requires_a_known_token_and_a_local_host() {
    let root = Scratch::new("auth");
    let plugins = [testplug_dir(root.path(), "tp", "normal")];
    let d = Daemon::start(root.path(), &config(root.path(), &plugins, ""), &[]);
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let accept = ("Accept", "application/json, text/event-stream");
    let json = ("Content-Type", "application/json");
    let (no_token, _) = http_request(&d.base(), "POST", "/mcp", &[accept, json], body).await;
    assert_eq!(no_token, 401);
    let (wrong, _) = http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[accept, json, ("Authorization", "Bearer nope")],
        body,
    )
    .await;
    assert_eq!(wrong, 401);
    let auth = format!("Bearer {TOKEN}");
    let (ok, _) = http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[accept, json, ("Authorization", &auth)],
        body,
    )
    .await;
    assert_eq!(ok, 200);
    let (rebound, _) = http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[
            accept,
            json,
            ("Authorization", &auth),
            ("Host", "evil.example:80"),
        ],
        body,
    )
    .await;
    assert!(
        rebound == 403 || rebound == 400 || rebound == 421,
        "foreign Host got {rebound}"
    );
    let (foreign, _) = http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[
            accept,
            json,
            ("Authorization", &auth),
            ("Origin", "https://evil.example"),
        ],
        body,
    )
    .await;
    assert_eq!(foreign, 403, "foreign Origin");
    let (health, text) = http_request(&d.base(), "GET", "/healthz", &[], "").await;
    assert_eq!((health, text.trim()), (200, "ok"));
    assert_eq!(
        http_request(&d.base(), "GET", "/metrics", &[], "").await.0,
        401
    );
    // Every path but the open probes is behind the gate: without a token
    // nothing says which exist; with one, an unknown path is 404 and a
    // path beneath `/mcp` is `/mcp`'s.
    for path in ["/nothing-here", "/mcp/", "/mcp/sub", "/MCP"] {
        let (status, _) = http_request(&d.base(), "POST", path, &[accept, json], body).await;
        assert_eq!(status, 401, "{path} without a token");
    }
    let with_token = [accept, json, ("Authorization", auth.as_str())];
    assert_eq!(
        http_request(&d.base(), "POST", "/nothing-here", &with_token, body)
            .await
            .0,
        404
    );
    for path in ["/mcp/", "/mcp/sub"] {
        let (status, _) = http_request(&d.base(), "POST", path, &with_token, body).await;
        assert_eq!(status, 200, "{path} with a token");
    }
}

/// A plugin that gives up: its tools are withdrawn, clients of both eras
/// (and stdio) are told, their next listing is the new one, and a call to a
/// withdrawn tool fails closed even from a client that never re-listed.
#[tokio::test]
async fn list_changed_reaches_both_eras_and_withdrawn_tools_fail_closed() {
    let root = Scratch::new("changed");
    let plugins = [
        testplug_dir(root.path(), "tp", "normal"),
        testplug_dir(root.path(), "victim", "normal"),
    ];
    let d = Daemon::start(
        root.path(),
        &config(root.path(), &plugins, "max_restarts = 0\n"),
        &[],
    );
    d.wait_metric(
        "toolhost_plugin_state{plugin=\"victim\",state=\"ready\"}",
        1.0,
    )
    .await;

    let legacy = agent(&d.url, TOKEN).await;
    let modern = http_client_2026(&d.url).await;
    let mut sub = modern
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("listen");
    let before = legacy.list_all_tools().await.unwrap_or_default();
    assert!(before.iter().any(|t| t.name == "kandev_victim_echo"));
    d.wait_metric("toolhost_mcp_listeners", 2.0).await;

    // The victim dies, and with max_restarts = 0 it is given up on.
    let pid = events(&root.path().join("state/data/victim"), "started ")
        .first()
        .and_then(|l| l.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok()))
        .expect("no victim pid");
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }

    let watcher = legacy.service().clone();
    eventually(WAIT, "the legacy session to be told", async || {
        (watcher.list_changed.load(Ordering::SeqCst) >= 1).then_some(())
    })
    .await;
    let n = tokio::time::timeout(WAIT, sub.next()).await;
    assert!(
        matches!(
            n,
            Ok(Ok(Some(ServerNotification::ToolListChangedNotification(_))))
        ),
        "2026 client: {n:?}"
    );

    for c in [&legacy, &modern] {
        let after = c.list_all_tools().await.unwrap_or_default();
        assert!(
            !after.iter().any(|t| t.name.starts_with("kandev_victim_")),
            "withdrawn tools still listed"
        );
        assert!(after.iter().any(|t| t.name == "kandev_tp_echo"));
    }
    // A client that listed before the change and calls the withdrawn tool.
    let stale = agent(&d.url, TOKEN).await;
    // It fails closed, and says why: the plugin failed.
    let r = stale
        .call_tool(CallToolRequestParams::new("kandev_victim_count"))
        .await
        .expect("a tool result");
    assert_eq!(error_code(&r).as_deref(), Some("tool_unavailable"), "{r:?}");
    assert!(text(&r).contains("has failed"), "{}", text(&r));
    let _ = sub.cancel().await;
    for c in [legacy, modern, stale] {
        let _ = c.cancel().await;
    }
}

#[tokio::test]
async fn stdio_sessions_are_told_of_changes_too() {
    let root = Scratch::new("stdio-changed");
    let plugins = [
        testplug_dir(root.path(), "tp", "normal"),
        testplug_dir(root.path(), "victim", "normal"),
    ];
    let file = root.path().join("toolhost.toml");
    std::fs::write(&file, config(root.path(), &plugins, "max_restarts = 0\n"))
        .expect("the step before failed");
    let (c, base) = stdio_client(&file).await;
    let metrics = |name: &'static str| {
        let base = base.clone();
        async move {
            let (_, body) = http_request(
                &base,
                "GET",
                "/metrics",
                &[("Authorization", &format!("Bearer {TOKEN}"))],
                "",
            )
            .await;
            body.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit_once(' '))
                .and_then(|(_, v)| v.parse::<f64>().ok())
        }
    };
    eventually(
        WAIT,
        "victim ready and the stdio session registered",
        async || {
            (metrics("toolhost_plugin_state{plugin=\"victim\",state=\"ready\"}").await == Some(1.0)
                && metrics("toolhost_mcp_listeners").await == Some(1.0))
            .then_some(())
        },
    )
    .await;
    let pid = eventually(WAIT, "the victim's pid", async || {
        events(&root.path().join("state/data/victim"), "started ")
            .first()
            .and_then(|l| l.split(' ').nth(1).and_then(|p| p.parse::<i32>().ok()))
    })
    .await;
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
    let watcher = c.service().clone();
    eventually(WAIT, "the stdio session to be told", async || {
        (watcher.list_changed.load(Ordering::SeqCst) >= 1).then_some(())
    })
    .await;
    let after = c.list_all_tools().await.unwrap_or_default();
    assert!(!after.iter().any(|t| t.name.starts_with("kandev_victim_")));
    let _ = c.cancel().await;
}

#[tokio::test]
async fn a_call_to_a_restarting_plugin_is_plugin_unavailable_and_not_retried() {
    let root = Scratch::new("restarting");
    let plugins = [testplug_dir(root.path(), "flaky", "once")];
    let d = Daemon::start(root.path(), &config(root.path(), &plugins, ""), &[]);
    d.wait_metric(
        "toolhost_plugin_state{plugin=\"flaky\",state=\"ready\"}",
        1.0,
    )
    .await;
    let c = agent(&d.url, TOKEN).await;
    let data = root.path().join("state/data/flaky");
    // `crash` exits the process mid-call: the call may or may not have run.
    let r = call(&c, "kandev_flaky_crash", None).await;
    assert_eq!(
        error_code(&r).as_deref(),
        Some("plugin_unavailable"),
        "{r:?}"
    );
    assert!(text(&r).contains("may or may not have taken effect"));
    // The crash can be answered before the daemon has reaped the process;
    // a call sent in that window is lost with the process. Wait until the
    // supervisor has seen the exit.
    eventually(WAIT, "flaky restarted after its crash", async || {
        let restarts = d
            .metric("toolhost_plugin_restarts_total{plugin=\"flaky\"}")
            .await?;
        (restarts >= 1.0).then_some(())
    })
    .await;
    // The restarted process hangs before its handshake: the plugin stays
    // restarting/starting, its tools stay listed; a call waits for it within
    // its own deadline (`nap`: 500 ms), then fails without being dispatched.
    let r = call(&c, "kandev_flaky_nap", None).await;
    assert_eq!(
        error_code(&r).as_deref(),
        Some("plugin_unavailable"),
        "{r:?}"
    );
    assert!(text(&r).contains("did not become ready"), "{}", text(&r));
    let tools = c.list_all_tools().await.unwrap_or_default();
    assert!(
        tools.iter().any(|t| t.name == "kandev_flaky_count"),
        "a restarting plugin keeps its tools listed"
    );
    assert_eq!(
        events(&data, "invoked crash").len(),
        1,
        "attempted exactly once"
    );
    assert_eq!(events(&data, "invoked nap").len(), 0, "never dispatched");
    let _ = c.cancel().await;
}

#[tokio::test]
async fn no_plugin_outlives_toolhost() {
    let root = Scratch::new("outlive");
    for signal in [rustix::process::Signal::TERM, rustix::process::Signal::KILL] {
        let plugins = [
            testplug_dir(root.path(), "tp", "normal"),
            workspace_root().join("plugins-example/notes"),
        ];
        let mut d = Daemon::start(root.path(), &config(root.path(), &plugins, ""), &[]);
        d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
            .await;
        d.wait_metric(
            "toolhost_plugin_state{plugin=\"notes\",state=\"ready\"}",
            1.0,
        )
        .await;
        let kids = d.children();
        assert_eq!(kids.len(), 2, "{signal:?}: two plugin processes: {kids:?}");
        let status = d.signal_and_wait(signal);
        if signal == rustix::process::Signal::TERM {
            assert!(status.success(), "graceful shutdown exits 0: {status:?}");
        }
        eventually(
            WAIT,
            &format!("{signal:?}: every plugin gone"),
            async || kids.iter().all(|k| !process_alive(*k)).then_some(()),
        )
        .await;
    }
}

#[tokio::test]
async fn an_id_based_local_ref_works_and_alias_errors_use_the_callers_name() {
    let root = Scratch::new("idref");
    let dir = root.path().join("idref");
    let _ = std::fs::create_dir_all(&dir);
    // A schema whose `$ref` goes through the root's own `$id` (the
    // JSON-Schema-Test-Suite's `urn:uuid` case): local, never fetched.
    let manifest = format!(
        r#"id = "idref"
version = "1.0.0"
name = "Id refs"

[runtime]
command = "{}"

[[tools]]
name = "echo"
description = "Echoes."
surfaces = ["chat"]
input_schema_file = "echo.json"
annotations = {{ read_only = true }}
aliases = {{ count = "n" }}
"#,
        bin("testplug").display()
    );
    let schema = json!({
        "$id": "urn:uuid:5b1f3a2e-7c4d-4e8f-9a0b-1c2d3e4f5a6b",
        "type": "object",
        "required": ["msg", "n"],
        "properties": {
            "msg": { "type": "string" },
            "n": { "$ref": "urn:uuid:5b1f3a2e-7c4d-4e8f-9a0b-1c2d3e4f5a6b#/$defs/small" }
        },
        "$defs": { "small": { "type": "integer", "minimum": 0, "maximum": 10 } }
    });
    std::fs::write(dir.join("plugin.toml"), manifest).expect("the step before failed");
    std::fs::write(dir.join("echo.json"), schema.to_string()).expect("the step before failed");
    let d = Daemon::start(root.path(), &config(root.path(), &[dir], ""), &[]);
    wait_ready(&d.base(), &["idref"]).await;
    let c = agent(&d.url, TOKEN).await;
    let r = call(&c, "kandev_idref_echo", Some(json!({ "msg": "m", "n": 3 }))).await;
    assert_eq!(error_code(&r), None, "{r:?}");
    let r = call(
        &c,
        "kandev_idref_echo",
        Some(json!({ "msg": "m", "n": 50 })),
    )
    .await;
    assert_eq!(error_code(&r).as_deref(), Some("invalid_arguments"));
    assert!(text(&r).contains("at most 10"), "{}", text(&r));
    // An alias: a violation is reported at the name the caller used, and
    // both names given is one error naming both, with no spurious hint.
    let r = call(
        &c,
        "kandev_idref_echo",
        Some(json!({ "msg": "m", "count": 50 })),
    )
    .await;
    let t = text(&r);
    assert!(t.contains("`/count`") && !t.contains("`/n`"), "{t}");
    let r = call(
        &c,
        "kandev_idref_echo",
        Some(json!({ "msg": "m", "count": 1, "n": 2 })),
    )
    .await;
    let t = text(&r);
    assert!(t.contains("`count` and `n` name the same argument"), "{t}");
    assert!(
        !t.contains("did you mean") && !t.contains("unexpected"),
        "{t}"
    );
    let _ = c.cancel().await;
}

#[tokio::test]
async fn a_call_to_a_plugin_still_starting_waits_for_it() {
    let root = Scratch::new("starting");
    let plugins = [testplug_dir(root.path(), "late", "slow-start")];
    let d = Daemon::start(root.path(), &config(root.path(), &plugins, ""), &[]);
    let c = agent(&d.url, TOKEN).await;
    // Listed at once, not ready yet: the call waits instead of telling the
    // model to retry.
    assert!(
        c.list_all_tools()
            .await
            .unwrap_or_default()
            .iter()
            .any(|t| t.name == "kandev_late_echo")
    );
    let r = call(&c, "kandev_late_echo", Some(json!({ "msg": "m", "n": 1 }))).await;
    assert_eq!(error_code(&r), None, "{r:?}");
    let _ = c.cancel().await;
}

#[tokio::test]
async fn a_stdio_server_does_not_take_the_configured_http_port() {
    let root = Scratch::new("stdio-port");
    let plugins = [testplug_dir(root.path(), "tp", "normal")];
    // The configured port is taken (as by a daemon started from the same
    // file): a stdio server an MCP client starts must still come up.
    let Ok(taken) = std::net::TcpListener::bind("127.0.0.1:0") else {
        panic!("cannot bind");
    };
    let port = taken.local_addr().map(|a| a.port()).unwrap_or(0);
    let file = root.path().join("toolhost.toml");
    std::fs::write(
        &file,
        config(
            root.path(),
            &plugins,
            &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"),
        ),
    )
    .expect("the step before failed");
    let mut cmd = tokio::process::Command::new(bin("toolhost"));
    cmd.args(["serve", "--stdio", "--config"]).arg(&file);
    let transport = TokioChildProcess::new(cmd).expect("the step before failed");
    let c = Agent::default().serve(transport).await.expect("stdio");
    // Its first call waits for the plugin instead of failing.
    let r = call(&c, "kandev_tp_echo", Some(json!({ "msg": "m", "n": 1 }))).await;
    assert_eq!(error_code(&r), None, "{r:?}");
    let _ = c.cancel().await;
    drop(taken);
}

// ---------------------------------------------------------------------
// What agents see: errors every client accepts, instructions written from
// the schemas, pages, and the find tool.

/// What the TypeScript SDK's client does with every result of a tool that
/// declares an output schema, error or not: `structuredContent`, when
/// present, must validate against it, or the result is thrown away.
fn accepted_like_the_typescript_client(tool: &Tool, r: &CallToolResult) -> Result<(), String> {
    let (Some(schema), Some(structured)) = (&tool.output_schema, &r.structured_content) else {
        return Ok(());
    };
    let validator = jsonschema::validator_for(&Value::Object(schema.as_ref().clone()))
        .map_err(|e| e.to_string())?;
    let errors: Vec<String> = validator
        .iter_errors(structured)
        .map(|e| e.to_string())
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

#[tokio::test]
async fn an_error_of_a_tool_with_an_output_schema_is_accepted_by_a_validating_client() {
    let root = Scratch::new("errors-fit");
    let plugins = [
        testplug_dir(root.path(), "tp", "normal"),
        workspace_root().join("plugins-example/notes"),
    ];
    let d = Daemon::start(root.path(), &config(root.path(), &plugins, ""), &[]);
    for p in ["tp", "notes"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{p}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    for era in ["2025", "2026"] {
        let c = if era == "2025" {
            agent(&d.url, TOKEN).await
        } else {
            http_client_2026(&d.url).await
        };
        let tools = c.list_all_tools().await.expect("tools");
        for (name, args, code) in [
            // Argument errors, on a closed output schema and on the
            // notes example the Inspector could not show.
            (
                "kandev_tp_echo_report",
                json!({"q": 5}),
                "invalid_arguments",
            ),
            (
                "kandev_notes_add_note",
                json!({"txet": "hello"}),
                "invalid_arguments",
            ),
            // The plugin's answer breaks the output schema.
            ("kandev_tp_bad_output", json!({}), "plugin_error"),
        ] {
            let tool = tool(&tools, name);
            assert!(
                tool.output_schema.is_some(),
                "{name} declares an output schema"
            );
            let r = call(&c, name, Some(args)).await;
            assert_eq!(r.is_error, Some(true), "{era} {name}: {r:?}");
            accepted_like_the_typescript_client(tool, &r)
                .unwrap_or_else(|e| panic!("{era} {name}: a validating client rejects it: {e}"));
            assert_eq!(error_code(&r).as_deref(), Some(code), "{era} {name}: {r:?}");
            let meta_error = r.meta.as_ref().and_then(|m| m.0.get("error")).cloned();
            assert_eq!(
                meta_error.as_ref().and_then(|e| e["code"].as_str()),
                Some(code),
                "{era} {name}: the error is in _meta.error"
            );
            assert!(
                text(&r).starts_with(&format!("Error ({code}): ")),
                "{era} {name}: {}",
                text(&r)
            );
        }
        // A tool without an output schema keeps the error in
        // structuredContent too, for clients that read it there.
        let r = call(&c, "kandev_tp_echo", Some(json!({"msg": 5, "n": 1}))).await;
        assert_eq!(
            r.structured_content
                .as_ref()
                .and_then(|s| s.pointer("/error/code"))
                .and_then(Value::as_str),
            Some("invalid_arguments"),
            "{r:?}"
        );
        let _ = c.cancel().await;
    }
}

/// A testplug manifest with one tool whose input nests required shapes
/// (the tool is declared, never called).
fn walkthrough_plugin(root: &Path) -> PathBuf {
    let dir = root.join("walk");
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = format!(
        r#"id = "walk"
version = "1.0.0"
name = "Walkthroughs"

[runtime]
command = "{}"
startup_timeout_ms = 5000

[[tools]]
name = "show_walkthrough"
description = "Shows a walkthrough of the code to the user."
instructions = "Steps are shown in the order given."
surfaces = ["kanban-task", "chat"]
input_schema = {{ type = "object", required = ["title", "steps"], properties = {{ title = {{ type = "string" }}, steps = {{ type = "array", items = {{ type = "object", required = ["file", "line", "text"], properties = {{ file = {{ type = "string" }}, line = {{ type = "integer" }}, text = {{ type = "string" }} }} }} }} }} }}

[[tools]]
name = "ping"
description = "Answers pong."
surfaces = ["kanban-task", "chat"]
input_schema = {{ type = "object", properties = {{ note = {{ type = "string" }} }} }}
"#,
        bin("testplug").display()
    );
    std::fs::write(dir.join("plugin.toml"), manifest).unwrap();
    dir
}

#[tokio::test]
async fn instructions_spell_out_nested_shapes_in_both_eras_within_budget() {
    let root = Scratch::new("instructions");
    let plugins = [walkthrough_plugin(root.path())];
    let cfg = format!(
        "{}\n[mcp]\ninstructions_bytes = 1024\n",
        config(root.path(), &plugins, "")
    );
    let d = Daemon::start(root.path(), &cfg, &[]);
    d.wait_metric(
        "toolhost_plugin_state{plugin=\"walk\",state=\"ready\"}",
        1.0,
    )
    .await;
    let want = "- `kandev_walk_show_walkthrough`: `steps` is an ordered list; each item needs `file`, `line`, `text`. Steps are shown in the order given.";
    for era in ["2025", "2026"] {
        let c = if era == "2025" {
            agent(&d.url, TOKEN).await
        } else {
            http_client_2026(&d.url).await
        };
        let instructions = c
            .peer_info()
            .and_then(|i| i.instructions.clone())
            .unwrap_or_default();
        println!("{era}:\n{instructions}");
        assert!(instructions.contains(want), "{era}: {instructions}");
        assert!(
            !instructions.contains("kandev_walk_ping"),
            "a flat tool has no line"
        );
        assert!(instructions.len() <= 1024, "{era}: over budget");
        for hidden in ["unknown", "alias", "report"] {
            assert!(!instructions.contains(hidden), "{era}: advertises {hidden}");
        }
        // Declared, but testplug has no handler of that name: said in words.
        let args = json!({"title": "t", "steps": [{"file": "a.rs", "line": 1, "text": "x"}]});
        let r = call(&c, "kandev_walk_show_walkthrough", Some(args)).await;
        assert_eq!(error_code(&r).as_deref(), Some("plugin_error"), "{r:?}");
        assert!(
            text(&r).contains("does not implement show_walkthrough"),
            "{era}: {}",
            text(&r)
        );
        let _ = c.cancel().await;
    }
}

#[tokio::test]
async fn tools_list_pages_in_both_eras_and_a_bad_cursor_says_what_to_do() {
    let root = Scratch::new("pages");
    let plugins = [testplug_dir(root.path(), "tp", "normal")];
    let cfg = format!(
        "{}\n[mcp]\ntools_page_size = 4\n",
        config(root.path(), &plugins, "")
    );
    let d = Daemon::start(root.path(), &cfg, &[]);
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    for era in ["2025", "2026"] {
        let c = if era == "2025" {
            agent(&d.url, TOKEN).await
        } else {
            http_client_2026(&d.url).await
        };
        let first = c.list_tools(None).await.expect("the first page");
        assert_eq!(first.tools.len(), 4, "{era}");
        assert!(first.next_cursor.is_some(), "{era}");
        let all = c.list_all_tools().await.expect("every page");
        let mut names: Vec<String> = all.iter().map(|t| t.name.to_string()).collect();
        let listed = names.len();
        names.dedup();
        assert_eq!(names.len(), listed, "{era}: a tool listed twice");
        assert!(names.is_sorted(), "{era}: pages out of order");
        assert!(listed > 8, "{era}: {listed} tools, so several pages");
        let bad = c
            .list_tools(Some(
                rmcp::model::PaginatedRequestParams::default()
                    .with_cursor(Some("not-a-cursor".into())),
            ))
            .await
            .expect_err("a bad cursor is refused");
        assert!(
            bad.to_string()
                .contains("no cursor to start from the first page"),
            "{era}: {bad}"
        );
        let _ = c.cancel().await;
    }
}

/// An in-process toolhost over a catalog of `n` generated tools plus a few
/// distinctive ones, and an rmcp client talking MCP to it over a pipe.
mod big {
    use super::*;
    use std::sync::Arc;
    use toolhost_catalog::{Descriptor, Outcome, Snapshot, Store};
    use toolhost_listing::AgentView;
    use toolhost_mcp::{Handler, Hub, Identity};
    use toolhost_pipeline::Binding;

    pub const SPECIAL: [(&str, &str, &str, &str); 5] = [
        (
            "jira",
            "create_issue",
            "Create issue",
            "Creates a Jira issue in a project, with a summary and a description.",
        ),
        (
            "git",
            "commit_changes",
            "Commit",
            "Records the staged changes in the repository with a message.",
        ),
        (
            "calendar",
            "schedule_meeting",
            "Schedule meeting",
            "Books a meeting in the team calendar.",
        ),
        (
            "notes",
            "search_notes",
            "Search notes",
            "Finds notes of the task by words.",
        ),
        (
            "weather",
            "get_forecast",
            "Forecast",
            "Gets the weather forecast for a city.",
        ),
    ];

    fn descriptor(plugin: &str, local: &str, title: &str, description: &str) -> Descriptor {
        Descriptor {
            exposed_name: toolhost_manifest::naming::exposed("kandev", plugin, local),
            plugin_id: plugin.to_owned(),
            plugin_version: "1.0.0".to_owned(),
            local_name: local.to_owned(),
            title: Some(title.to_owned()),
            description: description.to_owned(),
            instructions: None,
            surfaces: vec!["chat".to_owned()],
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}})
                .into(),
            output_schema: None,
            annotations: {
                let read_only = local.starts_with("get") || local.starts_with("search");
                toolhost_manifest::Annotations {
                    read_only,
                    destructive: !read_only,
                    ..toolhost_manifest::Annotations::default()
                }
            },
            timeout_ms: 30_000,
            aliases: std::collections::BTreeMap::new(),
            unknown_arguments: toolhost_validate::UnknownArguments::Reject,
            reset_timeout_on_progress: false,
            task: toolhost_manifest::TaskSupport::Never,
            task_timeout_ms: None,
            call_policy: Default::default(),
            fingerprint: toolhost_catalog::Fingerprint::UNSEALED,
        }
    }

    pub fn snapshot(n: usize, revision: u64, skip: usize, extra: &[&str]) -> Snapshot {
        let mut tools: Vec<Descriptor> = (skip..n)
            .map(|i| {
                descriptor(
                    &format!("p{:03}", i / 32),
                    &format!("tool_{i}"),
                    &format!("Tool {i}"),
                    &format!("Does thing number {i} for the task."),
                )
            })
            .collect();
        tools.extend(SPECIAL.iter().map(|(p, l, t, d)| descriptor(p, l, t, d)));
        tools.extend(
            extra
                .iter()
                .map(|p| descriptor(p, "added", "Added", "Added later.")),
        );
        Snapshot {
            epoch: 1,
            generation: "g".into(),
            revision,
            tools,
        }
        .sealed()
    }

    pub async fn start(n: usize, view: AgentView) -> (Arc<Store>, Client) {
        let store = Arc::new(Store::new("kandev"));
        let r = store.offer(snapshot(n, 1, 0, &[]));
        assert_eq!(r.outcome, Outcome::Accepted, "{:?}", r.reasons);
        let hub = Hub::without_plugins(Arc::clone(&store));
        hub.set_agent_view(view);
        let (server_io, client_io) = tokio::io::duplex(1 << 22);
        let handler = Handler::new(
            hub,
            Identity::Fixed(std::sync::Arc::new(Binding::new("chat", "t", "s", None))),
        );
        tokio::spawn(async move {
            if let Ok(running) = handler.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let client = Agent::default().serve(client_io).await.expect("a client");
        (store, client)
    }
}

#[tokio::test]
async fn ten_thousand_tools_page_to_the_end_without_repeats_or_gaps_across_a_change() {
    let view = toolhost_listing::AgentView {
        tools_page_size: 500,
        ..toolhost_listing::AgentView::default()
    };
    let (store, c) = big::start(10_000, view).await;
    // Straight through: every tool once, in order.
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let p = c
            .list_tools(Some(
                rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.clone()),
            ))
            .await
            .expect("a page");
        assert!(p.tools.len() <= 500);
        pages += 1;
        seen.extend(p.tools.iter().map(|t| t.name.to_string()));
        cursor = p.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(seen.len(), 10_005, "{pages} pages");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "repeats or disorder");

    // A change after 5 pages: the first 300 generated tools leave, one tool
    // is added before the cursor's place and one after it.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..5 {
        let p = c
            .list_tools(Some(
                rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.clone()),
            ))
            .await
            .expect("a page");
        seen.extend(p.tools.iter().map(|t| t.name.to_string()));
        cursor = p.next_cursor;
    }
    let at = seen.last().cloned().expect("5 pages");
    let r = store.offer(big::snapshot(10_000, 2, 300, &["aaa", "zzz"]));
    assert_eq!(r.outcome, toolhost_catalog::Outcome::Accepted);
    while let Some(cur) = cursor.take() {
        let p = c
            .list_tools(Some(
                rmcp::model::PaginatedRequestParams::default().with_cursor(Some(cur)),
            ))
            .await
            .expect("a page after the change");
        seen.extend(p.tools.iter().map(|t| t.name.to_string()));
        cursor = p.next_cursor;
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "repeats or disorder");
    let now: Vec<String> = c
        .list_all_tools()
        .await
        .expect("the new catalog")
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    // Every tool of the new catalog after the cursor's place was seen, and
    // so was the one added there; the one added before it was not (a
    // list_changed notification tells the client to list again).
    for name in now.iter().filter(|n| n.as_str() > at.as_str()) {
        assert!(seen.binary_search(name).is_ok(), "{name} was skipped");
    }
    assert!(seen.iter().any(|n| n == "kandev_zzz_added"));
    assert!(!seen.iter().any(|n| n == "kandev_aaa_added"));
    let _ = c.cancel().await;
}

#[tokio::test]
async fn the_find_tool_over_ten_thousand_tools_answers_the_expected_one_first() {
    let view = toolhost_listing::AgentView {
        find_tools: Some("kandev".into()),
        ..toolhost_listing::AgentView::default()
    };
    let (_store, c) = big::start(10_000, view).await;
    let find = "kandev_toolhost_find_tools";
    let first = c.list_tools(None).await.expect("the first page");
    let listed = c.list_all_tools().await.expect("all");
    assert!(
        listed.iter().any(|t| t.name == find),
        "the find tool is listed"
    );
    assert_eq!(first.tools.len(), 1000, "the default page");
    for (query, expected) in [
        ("create a jira issue", "kandev_jira_create_issue"),
        ("commit my changes", "kandev_git_commit_changes"),
        ("book a meeting", "kandev_calendar_schedule_meeting"),
        ("search notes", "kandev_notes_search_notes"),
        ("weather forecast for Paris", "kandev_weather_get_forecast"),
    ] {
        let r = call(&c, find, Some(json!({ "query": query }))).await;
        assert_eq!(r.is_error, Some(false), "{query}: {r:?}");
        let s = r.structured_content.clone().expect("structured");
        assert_eq!(s["tools"][0]["name"], expected, "{query}: {s}");
        assert!(s["tools"][0]["inputSchema"].is_object(), "with its schema");
        assert!(!text(&r).contains(query), "the query is not echoed");
    }
    // Filters, and the bound on what one answer holds.
    let r = call(&c, find, Some(json!({"query": "thing", "limit": 50}))).await;
    assert_eq!(
        error_code(&r).as_deref(),
        Some("invalid_arguments"),
        "limit is at most 20"
    );
    let r = call(&c, find, Some(json!({"query": "thing", "limit": 20}))).await;
    let s = r.structured_content.clone().expect("structured");
    assert_eq!(s["tools"].as_array().map(Vec::len), Some(20));
    assert_eq!(s["matches"], 10_000);
    let r = call(
        &c,
        find,
        Some(json!({"query": "issue notes forecast", "read_only": true})),
    )
    .await;
    let s = r.structured_content.clone().expect("structured");
    let names: Vec<&str> = s["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["kandev_notes_search_notes", "kandev_weather_get_forecast"]
    );
    let r = call(&c, find, Some(json!({"query": "issue", "plugin": "git"}))).await;
    assert_eq!(
        r.structured_content.clone().expect("structured")["matches"],
        0
    );
    let r = call(&c, find, Some(json!({"query": "x", "qurey": "typo"}))).await;
    assert_eq!(
        error_code(&r).as_deref(),
        Some("invalid_arguments"),
        "{r:?}"
    );
    let _ = c.cancel().await;
}
