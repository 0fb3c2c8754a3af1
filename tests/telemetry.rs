//! One trace from agent to plugin, end to end: the real daemon exporting
//! to a real OTLP/gRPC receiver (the `opentelemetry-proto` `TraceService`,
//! `toolhost_bench::otlp`), plugins on each SDK (Rust, Python, TypeScript)
//! exporting to the same receiver, and rmcp's client in both eras and over
//! stdio sending `traceparent` in `params._meta`.
//!
//! What the trace holds is read from what the receiver was sent: span
//! names, kinds, parents and attributes; and every exported byte is
//! searched for the argument, the result and the secrets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use toolhost_bench::otlp::{Mode, Receiver, Span};
use toolhost_e2e::asker::{Asker, ERAS, Era, call, connect, params};
use toolhost_e2e::sdk::sdk_plugin;
use toolhost_e2e::{Daemon, Scratch, TOKEN, TestConfig, bin, eventually, testplug_dir};

const WAIT: Duration = Duration::from_secs(30);
/// What no exported byte may hold: an argument, a result, a header secret.
const ARG_CANARY: &str = "canary-argument-4f1d";
const HEADER_CANARY: &str = "canary-header-secret-9b2e";

/// The configuration: every plugin exports to `endpoint`, and so does the
/// daemon, with a header whose value is a secret read from a file.
fn config(root: &Path, endpoint: &str, queue: usize) -> String {
    config_sampled(root, endpoint, queue, 1.0)
}

/// [`config`] with new traces sampled at `ratio`.
fn config_sampled(root: &Path, endpoint: &str, queue: usize, ratio: f64) -> String {
    let secret = root.join("otlp-key");
    std::fs::write(&secret, format!("{HEADER_CANARY}\n")).unwrap();
    let plugins = [
        testplug_dir(root, "rs", "normal"),
        sdk_plugin(root, "py", "python", 2),
        sdk_plugin(root, "ts", "typescript", 1),
    ];
    TestConfig::new(root, &plugins)
        .extra(&format!(
            "[telemetry]\nendpoint = \"{endpoint}\"\nsampling_ratio = {ratio:?}\nflush_interval_ms = 100\nexport_timeout_ms = 500\nmax_queue = {queue}\n\
             [telemetry.resource]\n\"deployment.environment.name\" = \"e2e\"\n\
             [telemetry.headers]\nx-api-key_file = {:?}\n\
             [plugin.rs]\ntelemetry = true\n[plugin.py]\ntelemetry = true\n[plugin.ts]\ntelemetry = true\n",
            secret.display().to_string()
        ))
        .build()
}

async fn ready(d: &Daemon) {
    for p in ["rs", "py", "ts"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{p}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
}

/// A fresh agent span: (trace id, span id, traceparent).
fn agent_span() -> (String, String, String) {
    let hex = |n: usize| -> String {
        (0..n)
            .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
            .collect()
    };
    let (t, s) = (hex(32), hex(16));
    let tp = format!("00-{t}-{s}-01");
    (t, s, tp)
}

/// `params` with the agent's trace context in `_meta`.
fn traced(name: &str, args: Value, traceparent: &str) -> CallToolRequestParams {
    let mut p = params(name, args);
    let mut meta = RequestMetaObject::default();
    meta.insert("traceparent".into(), json!(traceparent));
    meta.insert("tracestate".into(), json!("agent=1"));
    p.meta = Some(meta);
    p
}

/// The spans of `trace`, once `want` of them (and the plugin's) arrived.
async fn trace_of(r: &Receiver, trace: &str, plugin: &str) -> Vec<Span> {
    eventually(WAIT, "the whole trace is exported", async || {
        let spans: Vec<Span> = r
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == trace)
            .collect();
        let has = |pred: &dyn Fn(&Span) -> bool| spans.iter().any(pred);
        (has(&|s| s.kind == 2 && s.name.starts_with("tools/call"))
            && has(&|s| s.name == "toolhost.dispatch")
            && has(&|s| s.kind == 3)
            && has(&|s| s.service == plugin))
        .then_some(spans)
    })
    .await
}

fn one<'a>(spans: &'a [Span], pred: impl Fn(&Span) -> bool, what: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| pred(s)).collect();
    assert_eq!(found.len(), 1, "exactly one {what} in {spans:#?}");
    found[0]
}

/// The shape of one traced call: agent -> SERVER -> steps -> CLIENT -> plugin.
fn assert_one_trace(spans: &[Span], agent_span: &str, tool: &str, plugin: &str, era: &str) {
    let server = one(
        spans,
        |s| s.kind == 2 && s.service == "toolhost",
        "SERVER span",
    );
    assert_eq!(server.name, format!("tools/call {tool}"), "{era}");
    assert_eq!(
        server.parent_span_id, agent_span,
        "{era}: a child of the agent's span"
    );
    let a = &server.attributes;
    assert_eq!(a["mcp.method.name"], "tools/call");
    assert_eq!(a["gen_ai.tool.name"], tool);
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert!(a.contains_key("jsonrpc.request.id"), "{a:?}");
    assert_eq!(a["toolhost.call.outcome"], "ok", "{era}");
    assert!(a.contains_key("mcp.protocol.version"), "{a:?}");
    for step in [
        "toolhost.validate",
        "toolhost.authorize",
        "toolhost.dispatch",
    ] {
        let s = one(spans, |s| s.name == step, step);
        assert_eq!(
            s.parent_span_id, server.span_id,
            "{step} under the SERVER span"
        );
        assert_eq!(s.kind, 1, "{step} is INTERNAL");
    }
    let dispatch = one(spans, |s| s.name == "toolhost.dispatch", "dispatch");
    let client = one(
        spans,
        |s| s.kind == 3 && s.service == "toolhost",
        "CLIENT span",
    );
    assert_eq!(client.parent_span_id, dispatch.span_id);
    assert_eq!(client.attributes["rpc.system"], "grpc");
    assert_eq!(client.attributes["rpc.grpc.status_code"], "0");
    assert_eq!(client.attributes["toolhost.plugin.id"], plugin);
    let theirs = one(spans, |s| s.service == plugin, "plugin span");
    assert_eq!(
        theirs.parent_span_id, client.span_id,
        "{plugin} ({era}): the plugin's span is a child of toolhost's CLIENT span"
    );
    assert!(theirs.name.starts_with("execute_tool "), "{}", theirs.name);
}

/// Writes a trace's spans as JSON, for `scripts/trace-picture`.
fn dump(spans: &[Span], path: &Path) {
    let list: Vec<Value> = spans
        .iter()
        .map(|s| {
            json!({
                "service": s.service, "name": s.name, "kind": s.kind,
                "span_id": s.span_id, "parent_span_id": s.parent_span_id,
                "start_ns": s.start_ns, "end_ns": s.end_ns,
                "error": s.attributes.get("error.type"),
            })
        })
        .collect();
    std::fs::write(path, serde_json::to_vec_pretty(&list).unwrap()).unwrap();
}

fn assert_no_secret(r: &Receiver) {
    let raw = r.raw();
    let text = String::from_utf8_lossy(&raw);
    for canary in [ARG_CANARY, HEADER_CANARY, TOKEN, "hello, canary"] {
        assert!(!text.contains(canary), "{canary} was exported");
    }
}

#[tokio::test]
async fn a_call_with_a_traceparent_is_one_trace_from_agent_to_each_sdk_in_both_eras() {
    let receiver = Receiver::start(Mode::Collect).await.unwrap();
    let root = Scratch::new("telemetry");
    let d = Daemon::start_logging(
        root.path(),
        &config(root.path(), &receiver.endpoint(), 2048),
        &[],
        "toolhost::audit=info",
    );
    ready(&d).await;
    for era in ERAS {
        let c = connect(&d.url, Asker::new(false), era).await;
        let era_name = format!("{era:?}");
        for (plugin, tool, args) in [
            ("rs", "kandev_rs_echo", json!({"msg": ARG_CANARY, "n": 1})),
            ("py", "kandev_py_hello", json!({"name": ARG_CANARY})),
            ("ts", "kandev_ts_hello", json!({"name": ARG_CANARY})),
        ] {
            let (trace, span, tp) = agent_span();
            let r = call(&c, traced(tool, args, &tp)).await;
            assert_ne!(r.is_error, Some(true), "{plugin} {era_name}: {r:?}");
            let spans = trace_of(&receiver, &trace, plugin).await;
            assert_one_trace(&spans, &span, tool, plugin, &era_name);
            if plugin == "py"
                && era == Era::Sessions
                && let Some(path) = std::env::var_os("TOOLHOST_TRACE_DUMP")
            {
                // scripts/trace-picture draws README's picture from this.
                dump(&spans, Path::new(&path));
            }
            if era == Era::Sessions {
                let server = one(&spans, |s| s.kind == 2 && s.service == "toolhost", "SERVER");
                assert!(
                    server.attributes.contains_key("mcp.session.id"),
                    "{:?}",
                    server.attributes
                );
                assert_eq!(server.attributes["network.transport"], "tcp");
            }
        }
        // A tool error: error.type per the conventions, on both sides.
        for plugin in ["py", "ts"] {
            let (trace, _, tp) = agent_span();
            let r = call(&c, traced(&format!("kandev_{plugin}_fail"), json!({}), &tp)).await;
            assert_eq!(r.is_error, Some(true));
            let spans = trace_of(&receiver, &trace, plugin).await;
            let server = one(&spans, |s| s.kind == 2 && s.service == "toolhost", "SERVER");
            assert_eq!(
                server.attributes["error.type"], "tool_error",
                "{plugin} {era_name}"
            );
            assert_eq!(server.status, 2);
            let theirs = one(&spans, |s| s.service == plugin, "plugin span");
            assert_eq!(theirs.attributes["error.type"], "tool_error", "{plugin}");
        }
        // Refused before the plugin: the failing step says why.
        let (trace, _, tp) = agent_span();
        let r = call(
            &c,
            traced("kandev_rs_echo", json!({"msg": ARG_CANARY}), &tp),
        )
        .await;
        assert_eq!(r.is_error, Some(true));
        let spans = eventually(WAIT, "the refused call's spans", async || {
            let s: Vec<Span> = receiver
                .spans()
                .into_iter()
                .filter(|s| s.trace_id == trace)
                .collect();
            s.iter().any(|s| s.name == "toolhost.validate").then_some(s)
        })
        .await;
        let validate = one(&spans, |s| s.name == "toolhost.validate", "validate");
        assert_eq!(validate.attributes["error.type"], "invalid_arguments");
        assert!(
            !spans.iter().any(|s| s.kind == 3),
            "nothing reached a plugin"
        );
        let _ = c.cancel().await;
    }
    // The audit line names the trace.
    let (trace, _, tp) = agent_span();
    let c = connect(&d.url, Asker::new(false), Era::Sessions).await;
    call(&c, traced("kandev_py_hello", json!({}), &tp)).await;
    eventually(WAIT, "the audit line carries the trace id", async || {
        d.logs()
            .lines()
            .any(|l| l.contains("tool call") && l.contains("trace_id") && l.contains(&trace))
            .then_some(())
    })
    .await;
    // The conventions' duration histogram, beside toolhost's own.
    for labels in ["", ",error_type=\"tool_error\""] {
        let name = format!(
            "mcp_server_operation_duration_seconds_count{{mcp_method_name=\"tools/call\"{labels}}}"
        );
        eventually(WAIT, &name, async || {
            d.metric(&name)
                .await
                .is_some_and(|n| n >= 1.0)
                .then_some(())
        })
        .await;
    }
    assert_no_secret(&receiver);
    let service = receiver
        .spans()
        .into_iter()
        .find(|s| s.service == "toolhost")
        .unwrap();
    assert!(!service.attributes.is_empty());
}

#[tokio::test]
async fn a_stdio_call_is_traced_with_the_pipe_transport() {
    let receiver = Receiver::start(Mode::Collect).await.unwrap();
    let root = Scratch::new("telemetry-stdio");
    let file = root.path().join("toolhost.toml");
    let text = config(root.path(), &receiver.endpoint(), 2048)
        + "\n[stdio]\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n";
    std::fs::write(&file, text).unwrap();
    let mut cmd = tokio::process::Command::new(bin("toolhost"));
    cmd.args(["serve", "--stdio", "--config"]).arg(&file);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let c = Asker::new(false).serve(transport).await.unwrap();
    let (trace, span, tp) = agent_span();
    // The plugin may still be starting: the call waits for it.
    let r = call(
        &c,
        traced("kandev_py_hello", json!({"name": ARG_CANARY}), &tp),
    )
    .await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let spans = trace_of(&receiver, &trace, "py").await;
    let server = one(&spans, |s| s.kind == 2 && s.service == "toolhost", "SERVER");
    assert_eq!(server.parent_span_id, span);
    assert_eq!(server.attributes["network.transport"], "pipe");
    assert_no_secret(&receiver);
    let _ = c.cancel().await;
}

#[tokio::test]
async fn a_collector_that_is_down_or_hangs_costs_no_call_and_bounded_memory() {
    // Down: a port nothing listens on.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let hanging = Receiver::start(Mode::Hang).await.unwrap();
    let started = std::time::Instant::now();
    for endpoint in [down, hanging.endpoint()] {
        let root = Scratch::new("telemetry-dead");
        let d = Daemon::start(root.path(), &config(root.path(), &endpoint, 64), &[]);
        ready(&d).await;
        let c = connect(&d.url, Asker::new(false), Era::Sessions).await;
        let mut rss = Vec::new();
        for round in 0..3 {
            for _ in 0..150 {
                let (_, _, tp) = agent_span();
                let r = call(
                    &c,
                    traced("kandev_rs_echo", json!({"msg": "m", "n": 1}), &tp),
                )
                .await;
                assert_ne!(r.is_error, Some(true), "{endpoint} round {round}: {r:?}");
            }
            rss.push(toolhost_bench::procs::rss_kib(d.pid()));
        }
        // Spans past the queue of 64 are dropped, not kept: memory after
        // 450 calls is what it was after 150, give or take allocator noise.
        assert!(
            rss[2] < rss[0] + 16 * 1024,
            "{endpoint}: RSS grew from {} KiB to {} KiB",
            rss[0],
            rss[2]
        );
        let _ = c.cancel().await;
    }
    // One export at a time, each abandoned after its 500 ms: a hanging
    // collector gets no pile of requests.
    let bound = started.elapsed().as_millis() / 500 + 2;
    assert!(
        (hanging.requests() as u128) <= bound,
        "{} exports in {:?}",
        hanging.requests(),
        started.elapsed()
    );
}

#[tokio::test]
async fn sampling_keeps_the_agents_decision_and_the_ratio_decides_new_traces() {
    let receiver = Receiver::start(Mode::Collect).await.unwrap();
    let root = Scratch::new("telemetry-sampling");
    let d = Daemon::start(
        root.path(),
        &config_sampled(root.path(), &receiver.endpoint(), 2048, 0.0),
        &[],
    );
    ready(&d).await;
    let c = connect(&d.url, Asker::new(false), Era::Sessions).await;
    // The agent sampled its trace: kept, at a ratio of 0, and the plugin
    // (told through the flags it is sent) records its span too.
    let (sampled, _, tp) = agent_span();
    call(&c, traced("kandev_py_hello", json!({}), &tp)).await;
    trace_of(&receiver, &sampled, "py").await;
    // The agent did not sample (flags 00): nothing, from toolhost or the
    // plugin. Nor from a call with no trace context, at a ratio of 0.
    let (unsampled, span, _) = agent_span();
    let tp = format!("00-{unsampled}-{span}-00");
    call(&c, traced("kandev_py_hello", json!({}), &tp)).await;
    call(&c, params("kandev_py_hello", json!({}))).await;
    // A sampled call after them: once its spans are in, whatever the two
    // before would have exported is in too.
    let (last, _, tp) = agent_span();
    call(&c, traced("kandev_py_hello", json!({}), &tp)).await;
    trace_of(&receiver, &last, "py").await;
    let traces: std::collections::BTreeSet<String> =
        receiver.spans().into_iter().map(|s| s.trace_id).collect();
    assert_eq!(
        traces,
        [sampled, last].into_iter().collect(),
        "only the agent's sampled traces were exported"
    );
    let _ = c.cancel().await;
}

/// What an agent puts in `_meta` is its text: a trace context that is
/// malformed, of the wrong type or oversized is refused quietly, the call
/// runs, and nothing of it is carried on or exported.
#[tokio::test]
async fn a_hostile_trace_context_is_ignored_and_never_carried_on() {
    let receiver = Receiver::start(Mode::Collect).await.unwrap();
    let root = Scratch::new("telemetry-hostile");
    let d = Daemon::start(
        root.path(),
        &config(root.path(), &receiver.endpoint(), 2048),
        &[],
    );
    ready(&d).await;
    let c = connect(&d.url, Asker::new(false), Era::Sessions).await;
    let canary = "canary-tracestate-7c3a";
    let garbage = [
        json!(format!("00-{canary}-zz-01")),
        json!("00-00000000000000000000000000000000-0000000000000000-01"),
        json!(42),
        json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        json!("x".repeat(100_000)),
    ];
    for bad in garbage {
        let mut p = params("kandev_rs_echo", json!({"msg": "m", "n": 1}));
        let mut meta = RequestMetaObject::default();
        meta.insert("traceparent".into(), bad.clone());
        meta.insert("tracestate".into(), json!(format!("k={canary}")));
        p.meta = Some(meta);
        let r = call(&c, p).await;
        assert_ne!(r.is_error, Some(true), "{bad}: {r:?}");
    }
    // A well-formed parent with a tracestate past 512 bytes: the parent is
    // kept, the tracestate dropped (not sent to the plugin, not exported).
    let (trace, span, tp) = agent_span();
    let mut p = params("kandev_rs_echo", json!({"msg": "m", "n": 1}));
    let mut meta = RequestMetaObject::default();
    meta.insert("traceparent".into(), json!(tp));
    meta.insert(
        "tracestate".into(),
        json!(format!("k={canary}{}", "v".repeat(600))),
    );
    p.meta = Some(meta);
    call(&c, p).await;
    let spans = trace_of(&receiver, &trace, "rs").await;
    let server = one(&spans, |s| s.kind == 2 && s.service == "toolhost", "SERVER");
    assert_eq!(server.parent_span_id, span);
    assert!(spans.iter().all(|s| s.trace_state.is_empty()), "{spans:#?}");
    // The garbage calls each started a trace of their own.
    let roots = receiver
        .spans()
        .into_iter()
        .filter(|s| s.kind == 2 && s.name.starts_with("tools/call") && s.parent_span_id.is_empty())
        .count();
    assert_eq!(roots, 5, "one new root per refused context");
    assert!(!String::from_utf8_lossy(&receiver.raw()).contains(canary));
    let _ = c.cancel().await;
}
