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

fn error_code(r: &CallToolResult) -> Option<String> {
    r.structured_content
        .as_ref()?
        .pointer("/error/code")?
        .as_str()
        .map(str::to_owned)
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
    let r = stale
        .call_tool(CallToolRequestParams::new("kandev_victim_count"))
        .await;
    assert!(
        r.err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .contains("Unknown tool"),
        "fails closed"
    );
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
