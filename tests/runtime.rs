//! The plugin runtime with real plugin processes: start-up, the handshake's
//! failure modes, supervision (crash, crash loop, hang), and calls that meet
//! deaths and deadlines. Nothing here sleeps to wait: every wait polls a
//! condition with a deadline or awaits a state change.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::path::Path;
use std::time::Duration;
use tokio::sync::watch;
use toolhost_e2e::{Scratch, events, eventually, process_alive, testplug_dir, workspace_root};
use toolhost_manifest::Manifest;
use toolhost_proto::plugin::{AgentToolContext, AgentToolRequest};
use toolhost_runtime::{
    InvokeError, Phase, PluginClient, PluginHandle, PluginSpec, PluginState, SupervisorConfig,
    supervise,
};

const WAIT: Duration = Duration::from_secs(20);

fn fast() -> SupervisorConfig {
    SupervisorConfig {
        health_interval: Duration::from_millis(100),
        health_timeout: Duration::from_millis(200),
        backoff_first: Duration::from_millis(50),
        stop_grace: Duration::from_secs(2),
        ..SupervisorConfig::default()
    }
}

fn spec(dir: &Path, data: &Path) -> PluginSpec {
    match Manifest::load(dir) {
        Ok(m) => toolhost_lifecycle::plugin_spec(&m, data),
        Err(p) => panic!("{p:#?}"),
    }
}

async fn wait_phase(h: &PluginHandle, want: Phase) -> PluginState {
    let mut rx: watch::Receiver<PluginState> = h.subscribe();
    match tokio::time::timeout(WAIT, rx.wait_for(|s| s.phase == want)).await {
        Ok(Ok(s)) => s.clone(),
        _ => panic!(
            "plugin {} never became {want:?}; state: {:?}",
            h.id(),
            h.state()
        ),
    }
}

/// A `testplug` named `name` under `root`, supervised and ready: its
/// handle, the ready state and a client.
async fn ready_testplug(root: &Path, name: &str) -> (PluginHandle, PluginState, PluginClient) {
    let h = supervise(spec(&testplug_dir(root, name, "normal"), root), fast());
    let s = wait_phase(&h, Phase::Ready).await;
    let client = s.client.clone().expect("no client");
    (h, s, client)
}

fn request(tool: &str, args: serde_json::Value, id: &str) -> AgentToolRequest {
    AgentToolRequest {
        invocation_id: id.to_owned(),
        name: tool.to_owned(),
        arguments: args.as_object().map(toolhost_proto::json::struct_from_json),
        context: Some(AgentToolContext {
            task_id: "task-1".into(),
            session_id: "session-1".into(),
            workspace_id: String::new(),
            surface: "chat".into(),
            credentials: Vec::new(),
        }),
    }
}

fn kill(pid: u32, signal: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, signal);
    }
}

#[tokio::test]
async fn each_example_plugin_starts_and_answers() {
    let data = Scratch::new("examples");
    for (dir, tool, args) in [
        ("plugins-example/notes", "ping", serde_json::json!({})),
        (
            "plugins-example/textkit",
            "word_count",
            serde_json::json!({ "text": "two words" }),
        ),
        (
            "plugins-example/jsonkit",
            "stats",
            serde_json::json!({ "json": "[1, {\"a\": 2}]" }),
        ),
    ] {
        let h = supervise(spec(&workspace_root().join(dir), data.path()), fast());
        let s = wait_phase(&h, Phase::Ready).await;
        let client = s
            .client
            .unwrap_or_else(|| panic!("{dir}: ready without a client"));
        let r = client
            .invoke(request(tool, args, "inv-1"), Duration::from_secs(5))
            .await;
        let r = r.unwrap_or_else(|e| panic!("{dir}: {e}"));
        assert!(!r.is_error, "{dir}: {}", r.text);
        assert!(
            r.text == "pong" || r.text.starts_with("2 words") || r.text.contains("\"arrays\":1"),
            "{dir}: {}",
            r.text
        );
        h.stop().await;
        let pid = s.pid.unwrap_or(0);
        assert!(!process_alive(pid), "{dir}: process {pid} outlived stop");
    }
}

#[tokio::test]
async fn a_killed_plugin_is_restarted_and_the_new_process_answers() {
    let root = Scratch::new("kill9");
    let h = supervise(
        spec(&testplug_dir(root.path(), "tp", "normal"), root.path()),
        fast(),
    );
    let first = wait_phase(&h, Phase::Ready).await;
    let old = first.pid.unwrap_or(0);
    kill(old, rustix::process::Signal::KILL);
    let again = eventually(WAIT, "a new ready process", async || {
        let s = h.state();
        (s.phase == Phase::Ready && s.pid != Some(old)).then_some(s)
    })
    .await;
    assert_eq!(again.restarts, 1);
    assert!(
        again
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("tp") && e.contains("exited")),
        "{:?}",
        again.last_error
    );
    let client = again.client.expect("no client");
    let r = client
        .invoke(
            request("count", serde_json::json!({}), "after"),
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(
        r.map(|r| r.text).ok().as_deref(),
        Some("1"),
        "the new process counts from one"
    );
    assert!(!process_alive(old));
    h.stop().await;
}

#[tokio::test]
async fn a_crash_loop_ends_failed_until_restarted() {
    let root = Scratch::new("loop");
    let cfg = SupervisorConfig {
        max_restarts: 3,
        backoff_first: Duration::from_millis(10),
        ..fast()
    };
    let h = supervise(
        spec(
            &testplug_dir(root.path(), "looper", "exit-early"),
            root.path(),
        ),
        cfg,
    );
    let s = wait_phase(&h, Phase::Failed).await;
    let why = s.last_error.unwrap_or_default();
    assert!(
        why.contains("looper") && why.contains("exited before its handshake line"),
        "{why}"
    );
    assert!(why.contains("gave up after 3 restarts"), "{why}");
    assert_eq!(
        events(&root.path().join("looper"), "started").len(),
        4,
        "first start plus three restarts"
    );
    // An operator restart tries again (and, here, fails again).
    h.restart();
    wait_phase(&h, Phase::Starting).await;
    h.stop().await;
}

#[tokio::test]
async fn a_hung_plugin_fails_its_health_probes_and_is_restarted() {
    let root = Scratch::new("hang");
    let h = supervise(
        spec(&testplug_dir(root.path(), "hanger", "normal"), root.path()),
        fast(),
    );
    let first = wait_phase(&h, Phase::Ready).await;
    let old = first.pid.unwrap_or(0);
    kill(old, rustix::process::Signal::STOP);
    let again = eventually(WAIT, "a restart after failed probes", async || {
        let s = h.state();
        (s.phase == Phase::Ready && s.pid != Some(old)).then_some(s)
    })
    .await;
    let why = again.last_error.unwrap_or_default();
    assert!(why.contains("failed 3 health probes in a row"), "{why}");
    assert!(
        !process_alive(old),
        "the hung process was killed and reaped"
    );
    h.stop().await;
}

#[tokio::test]
async fn each_bad_handshake_fails_with_a_clear_error() {
    let root = Scratch::new("handshake");
    let cases = [
        ("malformed", "malformed handshake line"),
        (
            "version",
            "plugin protocol version \"7\" is not one toolhost speaks",
        ),
        (
            "answers-2",
            "answers plugin protocol 2, but its manifest declares protocol 1",
        ),
        ("tcp", "only Unix sockets are allowed"),
        ("exit-early", "exited before its handshake line"),
        ("silent", "printed no handshake line within"),
        ("never-healthy", "did not report healthy"),
    ];
    for (mode, want) in cases {
        let id = format!("bad-{mode}");
        let mut s = spec(&testplug_dir(root.path(), &id, mode), root.path());
        s.startup_timeout = Duration::from_millis(700);
        let h = supervise(
            s,
            SupervisorConfig {
                max_restarts: 0,
                ..fast()
            },
        );
        let state = wait_phase(&h, Phase::Failed).await;
        let why = state.last_error.unwrap_or_default();
        assert!(
            why.contains(&format!("plugin {id} failed to start")),
            "{mode}: {why}"
        );
        assert!(why.contains(want), "{mode}: expected {want:?} in {why}");
        h.stop().await;
    }
}

#[tokio::test]
async fn a_call_in_flight_fails_at_once_when_the_plugin_dies_and_ran_once() {
    let root = Scratch::new("inflight");
    let (h, s, client) = ready_testplug(root.path(), "dier").await;
    // The plugin exits in the middle of the call; the deadline is far away.
    let started = std::time::Instant::now();
    let r = client
        .invoke(
            request("crash", serde_json::json!({}), "inv-crash"),
            Duration::from_secs(60),
        )
        .await;
    assert!(matches!(&r, Err(InvokeError::Unavailable { .. })), "{r:?}");
    assert!(
        r.err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .contains("may or may not have taken effect")
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "failed at once, not at the deadline"
    );
    assert_eq!(
        events(&root.path().join("dier"), "invoked crash").len(),
        1,
        "exactly one invocation"
    );

    // A call waiting in the plugin when its process is killed.
    let crashed = s.pid;
    let s = eventually(WAIT, "the restarted process", async || {
        let now = h.state();
        (now.phase == Phase::Ready && now.pid != crashed).then_some(now)
    })
    .await;
    let client = s.client.expect("no client");
    let pid = s.pid.unwrap_or(0);
    let call = tokio::spawn(async move {
        client
            .invoke(
                request("slow", serde_json::json!({}), "inv-slow"),
                Duration::from_secs(60),
            )
            .await
    });
    eventually(WAIT, "the slow call to arrive", async || {
        (!events(&root.path().join("dier"), "invoked slow").is_empty()).then_some(())
    })
    .await;
    kill(pid, rustix::process::Signal::KILL);
    let r = tokio::time::timeout(Duration::from_secs(10), call).await;
    assert!(
        matches!(r, Ok(Ok(Err(InvokeError::Unavailable { .. })))),
        "{r:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_deadline_is_a_timeout_and_the_handler_sees_the_cancellation() {
    let root = Scratch::new("deadline");
    let (h, _, client) = ready_testplug(root.path(), "sleepy").await;
    let r = client
        .invoke(
            request("slow", serde_json::json!({ "ms": 60_000 }), "inv-deadline"),
            Duration::from_millis(300),
        )
        .await;
    assert_eq!(r, Err(InvokeError::Timeout(Duration::from_millis(300))));
    eventually(WAIT, "the handler to see the cancellation", async || {
        (events(&root.path().join("sleepy"), "cancelled slow inv-deadline").len() == 1)
            .then_some(())
    })
    .await;
    // Dropping a call cancels it too.
    let c2 = h.client().expect("no client");
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        c2.invoke(
            request("slow", serde_json::json!({}), "inv-drop"),
            Duration::from_secs(60),
        ),
    )
    .await;
    assert!(dropped.is_err());
    eventually(WAIT, "the dropped call to be cancelled", async || {
        (events(&root.path().join("sleepy"), "cancelled slow inv-drop").len() == 1).then_some(())
    })
    .await;
    h.stop().await;
}

/// Stopping a plugin (what disable and remove do) fails its calls in flight
/// at once, and the plugin's handlers are told, rather than the stop
/// waiting for them to finish.
#[tokio::test]
async fn stopping_a_plugin_cancels_its_calls_in_flight() {
    let root = Scratch::new("stop-inflight");
    let (h, _, client) = ready_testplug(root.path(), "busy").await;
    let call = tokio::spawn(async move {
        client
            .invoke(
                request("slow", serde_json::json!({ "ms": 60_000 }), "inv-stop"),
                Duration::from_secs(120),
            )
            .await
    });
    eventually(WAIT, "the slow call to arrive", async || {
        (!events(&root.path().join("busy"), "invoked slow inv-stop").is_empty()).then_some(())
    })
    .await;
    h.stop().await;
    let r = tokio::time::timeout(WAIT, call).await;
    assert!(
        matches!(&r, Ok(Ok(Err(InvokeError::Unavailable { .. })))),
        "the call failed as unavailable: {r:?}"
    );
    assert_eq!(
        events(&root.path().join("busy"), "cancelled slow inv-stop").len(),
        1,
        "the handler saw the cancellation before the process stopped"
    );
    assert_eq!(h.state().phase, Phase::Stopped);
}

#[test]
fn plugins_run_by_hand_say_so_and_fail() {
    for exe in [
        toolhost_e2e::bin("notes-plugin"),
        toolhost_e2e::bin("testplug"),
    ] {
        let out = std::process::Command::new(&exe)
            .env_remove("KANDEV_PLUGIN")
            .output();
        let out = out.expect("the step before failed");
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("this is a toolhost plugin, start it with toolhost")
        );
    }
    for launcher in [
        "plugins-example/textkit/bin/textkit-plugin",
        "plugins-example/jsonkit/bin/jsonkit-plugin",
    ] {
        let out = std::process::Command::new(workspace_root().join(launcher))
            .env_remove("KANDEV_PLUGIN")
            .output()
            .expect("the step before failed");
        assert!(!out.status.success(), "{launcher}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("this is a toolhost plugin"),
            "{launcher}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
