//! Tool calls hosted as MCP tasks (the 2026-07-28 Tasks extension), end to
//! end: the real daemon, `testplug` speaking plugin protocol 2, and rmcp's
//! client in the 2026-07-28 era declaring `io.modelcontextprotocol/tasks`.
//!
//! What the plugin really did is read from its `events.log`; what the
//! agent got, from the client's own calls (`tasks/get`, `tasks/update`,
//! `tasks/cancel`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use rmcp::model::{
    CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult, TaskPayload, TaskStatus,
    UpdateTaskParams,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_e2e::asker::{Asker, Client, Era, connect, connect_as, params, texts};
use toolhost_e2e::{Daemon, Scratch, TestConfig, bin, cli_at, events, eventually};

const WAIT: Duration = Duration::from_secs(30);
/// A second token, bound on the same surface: another caller.
const OTHER: &str = "other-token-0123456789";

/// A protocol-2 `testplug` whose tools say whether they may run as tasks.
fn taskplug_dir(root: &Path, id: &str) -> PathBuf {
    let dir = root.join(id);
    // (name, input schema, timeout_ms, task, extra lines)
    let tools = [
        (
            "nap",
            r#"{ type = "object", properties = { ms = { type = "integer", minimum = 0 } } }"#,
            500,
            "optional",
            "task_timeout_ms = 5000",
        ),
        (
            "steps",
            r#"{ type = "object", properties = { steps = { type = "integer", minimum = 0 }, pause_ms = { type = "integer", minimum = 0 } } }"#,
            30_000,
            "optional",
            "",
        ),
        ("confirm", r#"{ type = "object" }"#, 30_000, "optional", ""),
        (
            "two_questions",
            r#"{ type = "object" }"#,
            10_000,
            "optional",
            "",
        ),
        (
            "slow",
            r#"{ type = "object", properties = { ms = { type = "integer", minimum = 0 } } }"#,
            60_000,
            "required",
            "",
        ),
        ("crash", r#"{ type = "object" }"#, 10_000, "optional", ""),
        (
            "echo",
            r#"{ type = "object", properties = { msg = { type = "string" } } }"#,
            10_000,
            "never",
            "",
        ),
    ];
    let mut toml = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Task test plugin\"\n\n[runtime]\ncommand = \"{}\"\nargs = [\"--mode\", \"normal\"]\nstartup_timeout_ms = 5000\nprotocol = 2\n",
        bin("testplug").display()
    );
    for (name, schema, timeout, task, extra) in tools {
        toml.push_str(&format!(
            "\n[[tools]]\nname = \"{name}\"\ndescription = \"testplug {name}\"\nsurfaces = [\"chat\"]\ntimeout_ms = {timeout}\ninput_schema = {schema}\nannotations = {{ read_only = true }}\ntask = \"{task}\"\n{extra}\n"
        ));
    }
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.toml"), toml).unwrap();
    dir
}

/// A daemon serving `kp` with `[tasks]` set to `tasks`, and [`OTHER`] bound
/// beside the default token; `extra` goes after everything (sections).
async fn daemon(root: &Path, tasks: &str, extra: &str) -> Daemon {
    let kp = taskplug_dir(root, "kp");
    let config = TestConfig::new(root, &[kp])
        .ids("task-tasks", "session-tasks")
        .extra(&format!(
            "\n[[http.tokens]]\ntoken = \"{OTHER}\"\nsurface = \"chat\"\ntask_id = \"t2\"\nsession_id = \"s2\"\n\n[tasks]\n{tasks}\n{extra}"
        ))
        .build();
    let d = Daemon::start(root, &config, &[]);
    d.wait_metric("toolhost_plugin_state{plugin=\"kp\",state=\"ready\"}", 1.0)
        .await;
    d
}

fn data(root: &Path) -> PathBuf {
    root.join("state/data/kp")
}

async fn tasks_client(d: &Daemon) -> Client {
    connect(&d.url, Asker::new(true).with_tasks(), Era::Modern).await
}

/// Calls `name` and expects a task: its id.
async fn start_task(c: &Client, name: &str, args: Value) -> String {
    match c.peer().call_tool_once(params(name, args)).await {
        Ok(CallToolResponse::Task(t)) => {
            assert_eq!(t.task.status, TaskStatus::Working);
            assert!(t.task.poll_interval_ms.is_some() && t.task.ttl_ms.is_some());
            t.task.task_id
        }
        other => panic!("{name}: expected a task, got {other:?}"),
    }
}

async fn get(c: &Client, id: &str) -> Result<GetTaskResult, rmcp::ServiceError> {
    c.peer().get_task(GetTaskParams::new(id)).await
}

/// Polls until the task is in `status`; returns what `tasks/get` said then.
async fn until(c: &Client, id: &str, status: TaskStatus) -> GetTaskResult {
    eventually(WAIT, &format!("task {id} to be {status:?}"), async || {
        get(c, id).await.ok().filter(|t| t.task.status() == status)
    })
    .await
}

fn result_of(t: &GetTaskResult) -> rmcp::model::CallToolResult {
    match &t.task.payload {
        TaskPayload::Completed { result } => {
            serde_json::from_value(Value::Object(result.clone())).unwrap()
        }
        other => panic!("not completed: {other:?}"),
    }
}

/// The JSON-RPC error of a failed request, as (code, message).
fn rpc_error(e: &rmcp::ServiceError) -> (i32, String) {
    match e {
        rmcp::ServiceError::McpError(e) => (e.code.0, e.message.to_string()),
        other => panic!("not a JSON-RPC error: {other}"),
    }
}

fn admin(root: &Path) -> PathBuf {
    root.join("state/admin.sock")
}

#[tokio::test]
async fn a_ten_second_tool_runs_as_a_task_polled_to_its_result() {
    let root = Scratch::new("tasks-long");
    let d = daemon(root.path(), "", "").await;
    let c = tasks_client(&d).await;
    let info = c.peer().peer_info().unwrap();
    assert!(
        info.capabilities.supports_tasks(),
        "server/discover advertises the extension"
    );

    let id = start_task(
        &c,
        "kandev_kp_steps",
        json!({"steps": 10, "pause_ms": 1000}),
    )
    .await;
    assert_eq!(id.len(), 32, "128 random bits, in hex");
    // Progress shows in the status message while it works.
    let working = eventually(WAIT, "a progress message", async || {
        get(&c, &id)
            .await
            .ok()
            .and_then(|t| t.task.task.status_message)
            .filter(|m| m.contains("step"))
    })
    .await;
    assert!(working.contains("of 10"), "{working}");
    let (ok, listed) = cli_at(&admin(root.path()), &["tasks"]);
    assert!(
        ok && listed.contains(&id) && listed.contains("working"),
        "{listed}"
    );
    let (_, status) = cli_at(&admin(root.path()), &["status"]);
    assert!(status.contains("tasks     1 working"), "{status}");

    let done = until(&c, &id, TaskStatus::Completed).await;
    let r = result_of(&done);
    assert_eq!(r.is_error, Some(false));
    assert_eq!(texts(&r), ["10 steps done"]);
    // Mapped exactly as a direct call's result in the same era.
    let plain = connect(&d.url, Asker::new(false), Era::Modern).await;
    let direct = plain
        .call_tool(params("kandev_kp_steps", json!({"steps": 10})))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&direct).unwrap(),
        serde_json::to_value(&r).unwrap()
    );
    // The 2025 era is not offered tasks, and calls even a task-capable
    // tool directly, as before.
    let old = connect(&d.url, Asker::new(false), Era::Sessions).await;
    assert!(
        !old.peer()
            .peer_info()
            .unwrap()
            .capabilities
            .supports_tasks()
    );
    let r = old
        .call_tool(params("kandev_kp_slow", json!({"ms": 1})))
        .await
        .unwrap();
    assert_eq!(texts(&r), ["slept 1 ms"]);
    d.wait_metric("toolhost_tasks{state=\"completed\"}", 1.0)
        .await;
    // One audit event for the task, at its end, with its duration.
    let tag = format!("mcp_task=\"{id}\"");
    let audited: Vec<String> = eventually(WAIT, "the task's audit event", async || {
        let lines: Vec<String> = d
            .logs()
            .lines()
            .filter(|l| l.contains(&tag))
            .map(str::to_owned)
            .collect();
        (!lines.is_empty()).then_some(lines)
    })
    .await;
    assert_eq!(audited.len(), 1, "{audited:?}");
    assert!(audited[0].contains("outcome=\"ok\""), "{}", audited[0]);
    let ms: u64 = audited[0]
        .split("duration_ms=")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(ms >= 9_000, "{ms}");

    // A 2026-07-28 client that does not declare the extension calls an
    // optional tool directly, and cannot call one that requires a task.
    let r = plain
        .call_tool(params("kandev_kp_steps", json!({"steps": 1})))
        .await
        .unwrap();
    assert_eq!(texts(&r), ["1 steps done"]);
    let e = plain
        .call_tool(params("kandev_kp_slow", json!({"ms": 1})))
        .await
        .unwrap_err();
    assert_eq!(rpc_error(&e).0, -32021, "{e}");
    assert_eq!(events(&data(root.path()), "invoked slow").len(), 1);
}

#[tokio::test]
async fn a_task_may_run_past_the_tools_timeout_up_to_the_operators_cap() {
    let root = Scratch::new("tasks-lifetime");
    let d = daemon(root.path(), "max_lifetime_ms = 3000", "").await;
    // Directly, `nap` has 500 ms.
    let plain = connect(&d.url, Asker::new(false), Era::Modern).await;
    let r = plain
        .call_tool(params("kandev_kp_nap", json!({"ms": 1500})))
        .await
        .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&r), "timeout");
    // As a task it has its task_timeout_ms (5 s), within the cap (3 s).
    let c = tasks_client(&d).await;
    let id = start_task(&c, "kandev_kp_nap", json!({"ms": 1500})).await;
    let t = get(&c, &id).await.unwrap();
    assert_eq!(
        t.task.task.ttl_ms,
        Some(3000 + 600_000),
        "lifetime plus retention"
    );
    let done = until(&c, &id, TaskStatus::Completed).await;
    assert_eq!(texts(&result_of(&done)), ["slept 1500 ms"]);
    // Past the cap, it fails as a timed-out call does.
    let id = start_task(&c, "kandev_kp_nap", json!({"ms": 4500})).await;
    let failed = until(&c, &id, TaskStatus::Failed).await;
    let TaskPayload::Failed { error } = &failed.task.payload else {
        panic!("{failed:?}")
    };
    assert_eq!(error["data"]["code"], "timeout", "{error:?}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("did not answer within 30"),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_question_is_answered_with_tasks_update_and_a_wrong_answer_refused() {
    let root = Scratch::new("tasks-ask");
    let d = daemon(root.path(), "", "").await;
    let c = tasks_client(&d).await;
    let id = start_task(&c, "kandev_kp_confirm", json!({})).await;
    let asking = until(&c, &id, TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = &asking.task.payload else {
        panic!("{asking:?}")
    };
    let (key, request) = input_requests.iter().next().unwrap();
    let request = serde_json::to_value(request).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Delete the notes?");

    // `confirm` must be a boolean: refused, and the question still waits.
    let wrong = json!({ key.clone(): {"action": "accept", "content": {"confirm": "SECRET-yes"}} });
    let e = c
        .peer()
        .update_task(UpdateTaskParams::new(
            id.clone(),
            serde_json::from_value(wrong).unwrap(),
        ))
        .await
        .unwrap_err();
    let (code, message) = rpc_error(&e);
    assert_eq!(code, -32602);
    assert!(message.contains("requested schema"), "{message}");
    assert!(
        !message.contains("SECRET"),
        "the value is not echoed: {message}"
    );
    assert_eq!(
        get(&c, &id).await.unwrap().task.status(),
        TaskStatus::InputRequired
    );
    assert!(
        events(&data(root.path()), "answered").is_empty(),
        "the plugin never saw the wrong answer"
    );

    let right = json!({ key.clone(): {"action": "accept", "content": {"confirm": true}} });
    c.peer()
        .update_task(UpdateTaskParams::new(
            id.clone(),
            serde_json::from_value(right).unwrap(),
        ))
        .await
        .unwrap();
    let done = until(&c, &id, TaskStatus::Completed).await;
    assert_eq!(texts(&result_of(&done)), [r#"accepted {"confirm":true}"#]);
    // A late answer to a finished task changes nothing.
    let late = json!({ key.clone(): {"action": "decline"} });
    let _ = c
        .peer()
        .update_task(UpdateTaskParams::new(
            id.clone(),
            serde_json::from_value(late).unwrap(),
        ))
        .await;
    assert_eq!(
        get(&c, &id).await.unwrap().task.status(),
        TaskStatus::Completed
    );
    assert_eq!(events(&data(root.path()), "answered").len(), 1);
}

/// A plugin that asks a second question while its first is open ends its
/// task as it ends a direct call, and the client is never asked twice.
#[tokio::test]
async fn a_second_question_in_a_task_ends_it_and_is_never_asked() {
    let root = Scratch::new("tasks-two-questions");
    let d = daemon(root.path(), "", "").await;
    let c = tasks_client(&d).await;
    for run in 0..10 {
        let id = start_task(&c, "kandev_kp_two_questions", json!({})).await;
        let ended = eventually(WAIT, "the task to end", async || {
            let t = get(&c, &id).await.ok()?;
            if let TaskPayload::InputRequired { input_requests } = &t.task.payload {
                assert_eq!(input_requests.len(), 1, "run {run}: {t:?}");
            }
            matches!(t.task.status(), TaskStatus::Completed | TaskStatus::Failed).then_some(t)
        })
        .await;
        // As the crash above: a failed task, with the direct call's error.
        let TaskPayload::Failed { error } = &ended.task.payload else {
            panic!("run {run}: {ended:?}")
        };
        assert_eq!(
            error["data"]["code"], "plugin_error",
            "run {run}: {error:?}"
        );
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("second question"),
            "run {run}: {error:?}"
        );
    }
}

#[tokio::test]
async fn cancel_reaches_the_plugin_from_the_owner_and_from_the_operator() {
    let root = Scratch::new("tasks-cancel");
    let d = daemon(root.path(), "", "").await;
    let c = tasks_client(&d).await;
    let data = data(root.path());
    let id = start_task(&c, "kandev_kp_slow", json!({"ms": 60_000})).await;
    eventually(WAIT, "the plugin to run it", async || {
        (!events(&data, "invoked slow").is_empty()).then_some(())
    })
    .await;
    c.peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let t = get(&c, &id).await.unwrap();
    assert_eq!(t.task.status(), TaskStatus::Cancelled);
    eventually(WAIT, "the plugin to see the cancel", async || {
        (events(&data, "cancelled slow").len() == 1).then_some(())
    })
    .await;

    // The operator cancels any task.
    let id2 = start_task(&c, "kandev_kp_slow", json!({"ms": 60_000})).await;
    eventually(WAIT, "the plugin to run it", async || {
        (events(&data, "invoked slow").len() == 2).then_some(())
    })
    .await;
    let (ok, out) = cli_at(&admin(root.path()), &["tasks", "cancel", &id2]);
    assert!(ok, "{out}");
    assert_eq!(
        get(&c, &id2).await.unwrap().task.status(),
        TaskStatus::Cancelled
    );
    eventually(
        WAIT,
        "the plugin to see the operator's cancel",
        async || (events(&data, "cancelled slow").len() == 2).then_some(()),
    )
    .await;
    let (ok, out) = cli_at(&admin(root.path()), &["tasks", "cancel", &id2]);
    assert!(!ok && out.contains("no task"), "{out}");
    d.wait_metric("toolhost_tasks{state=\"cancelled\"}", 2.0)
        .await;
    // Both calls ended (and gave back their places among the plugin's
    // calls) as cancelled.
    d.wait_metric(
        "toolhost_tool_calls_total{tool=\"kandev_kp_slow\",outcome=\"cancelled\"}",
        2.0,
    )
    .await;
}

#[tokio::test]
async fn a_task_outlives_its_client_and_is_read_after_reconnecting() {
    let root = Scratch::new("tasks-reconnect");
    let d = daemon(root.path(), "", "").await;
    let c = tasks_client(&d).await;
    let id = start_task(&c, "kandev_kp_steps", json!({"steps": 3, "pause_ms": 700})).await;
    c.cancel().await.unwrap();
    let again = tasks_client(&d).await;
    let done = until(&again, &id, TaskStatus::Completed).await;
    assert_eq!(texts(&result_of(&done)), ["3 steps done"]);
    assert_eq!(events(&data(root.path()), "invoked steps").len(), 1);
}

#[tokio::test]
async fn another_token_gets_the_unknown_task_answer_and_ids_cannot_be_guessed() {
    let root = Scratch::new("tasks-owner");
    let d = daemon(root.path(), "", "").await;
    let mine = tasks_client(&d).await;
    let theirs = connect_as(&d.url, OTHER, Asker::new(true).with_tasks(), Era::Modern).await;
    let id = start_task(&mine, "kandev_kp_slow", json!({"ms": 60_000})).await;

    let unknown = rpc_error(&get(&theirs, &"0".repeat(32)).await.unwrap_err());
    assert_eq!(unknown.0, -32602);
    assert_eq!(rpc_error(&get(&theirs, &id).await.unwrap_err()), unknown);
    let answer = json!({"question-1": {"action": "decline"}});
    let e = theirs
        .peer()
        .update_task(UpdateTaskParams::new(
            id.clone(),
            serde_json::from_value(answer).unwrap(),
        ))
        .await
        .unwrap_err();
    assert_eq!(rpc_error(&e), unknown);
    // A cancel of another's task is answered as an unknown id, and
    // changes nothing.
    let e = theirs
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap_err();
    assert_eq!(rpc_error(&e), unknown);
    let e = theirs
        .peer()
        .cancel_task(CancelTaskParams::new("0".repeat(32)))
        .await
        .unwrap_err();
    assert_eq!(rpc_error(&e), unknown);
    assert_eq!(
        get(&mine, &id).await.unwrap().task.status(),
        TaskStatus::Working
    );

    // A caller guessing ids: near misses of a real id, and random ones.
    let mut guesses: Vec<String> = (0..16)
        .map(|i| {
            let mut g = id.clone().into_bytes();
            g[i] = if g[i] == b'0' { b'1' } else { b'0' };
            String::from_utf8(g).unwrap()
        })
        .collect();
    guesses.extend((0..200u64).map(|n| format!("{:032x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15))));
    guesses.extend([
        String::new(),
        "../".into(),
        id.to_uppercase(),
        format!("{id} "),
    ]);
    for g in &guesses {
        assert_eq!(
            rpc_error(&get(&theirs, g).await.unwrap_err()),
            unknown,
            "{g}"
        );
        assert_eq!(rpc_error(&get(&mine, g).await.unwrap_err()), unknown, "{g}");
    }
    mine.peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
}

#[tokio::test]
async fn one_task_past_the_cap_is_refused_before_anything_runs() {
    let root = Scratch::new("tasks-caps");
    let d = daemon(root.path(), "max_per_token = 2\nmax_total = 3", "").await;
    let c = tasks_client(&d).await;
    let data = data(root.path());
    let first = start_task(&c, "kandev_kp_slow", json!({"ms": 60_000})).await;
    let _second = start_task(&c, "kandev_kp_slow", json!({"ms": 60_000})).await;
    let e = c
        .peer()
        .call_tool_once(params("kandev_kp_slow", json!({"ms": 60_000})))
        .await
        .unwrap_err();
    let (code, message) = rpc_error(&e);
    assert_eq!(code, -32600);
    assert!(
        message.contains("too many tasks for this token"),
        "{message}"
    );
    // Another token has its own share, up to the daemon's total.
    let other = connect_as(&d.url, OTHER, Asker::new(true).with_tasks(), Era::Modern).await;
    let _third = start_task(&other, "kandev_kp_slow", json!({"ms": 60_000})).await;
    let e = other
        .peer()
        .call_tool_once(params("kandev_kp_slow", json!({"ms": 60_000})))
        .await
        .unwrap_err();
    assert!(
        rpc_error(&e).1.contains("too many tasks on this daemon"),
        "{e}"
    );
    eventually(WAIT, "three dispatches", async || {
        (events(&data, "invoked slow").len() == 3).then_some(())
    })
    .await;
    // A cancelled task keeps its place while its result is kept.
    c.peer()
        .cancel_task(CancelTaskParams::new(first))
        .await
        .unwrap();
    let e = c
        .peer()
        .call_tool_once(params("kandev_kp_slow", json!({"ms": 60_000})))
        .await
        .unwrap_err();
    let (_, message) = rpc_error(&e);
    assert!(message.contains("too many tasks"), "{message}");
    // It says what frees a place, and when.
    assert!(
        message.contains("a place frees when a kept result expires, the next in"),
        "{message}"
    );
    assert_eq!(events(&data, "invoked slow").len(), 3);
}

/// A task's status message follows its plugin's progress even when the
/// client sent no progress token (the extension gives it no reason to).
#[tokio::test]
async fn a_tasks_status_follows_progress_without_a_progress_token() {
    let root = Scratch::new("tasks-progress");
    let d = daemon(root.path(), "", "").await;
    let c = tasks_client(&d).await;
    // params() sends no progress token.
    let id = start_task(&c, "kandev_kp_steps", json!({"steps": 4, "pause_ms": 400})).await;
    let seen = eventually(
        WAIT,
        "a status message from the plugin's progress",
        async || {
            get(&c, &id)
                .await
                .ok()
                .and_then(|t| t.task.task.status_message.clone())
                .filter(|m| m.contains('/'))
        },
    )
    .await;
    assert!(seen.contains("/4"), "{seen}");
    until(&c, &id, TaskStatus::Completed).await;
}

#[tokio::test]
async fn a_crash_fails_the_task_with_the_direct_calls_error_and_no_retry() {
    let root = Scratch::new("tasks-crash");
    let d = daemon(root.path(), "", "").await;
    let c = tasks_client(&d).await;
    let id = start_task(&c, "kandev_kp_crash", json!({})).await;
    let failed = until(&c, &id, TaskStatus::Failed).await;
    let TaskPayload::Failed { error } = &failed.task.payload else {
        panic!("{failed:?}")
    };
    assert_eq!(error["code"], -32603, "{error:?}");
    assert_eq!(error["data"]["code"], "plugin_unavailable", "{error:?}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("may or may not have taken effect"),
        "{error:?}"
    );
    d.wait_metric("toolhost_plugin_state{plugin=\"kp\",state=\"ready\"}", 1.0)
        .await;
    assert_eq!(
        get(&c, &id).await.unwrap().task.status(),
        TaskStatus::Failed
    );
    assert_eq!(
        events(&data(root.path()), "invoked crash").len(),
        1,
        "attempted exactly once"
    );
}

#[tokio::test]
async fn a_tool_that_does_not_allow_tasks_never_becomes_one() {
    let root = Scratch::new("tasks-never");
    let d = daemon(root.path(), "", "").await;
    let c = tasks_client(&d).await;
    // The client declares the extension; the tool says never: a direct
    // call, answered on its request.
    match c
        .peer()
        .call_tool_once(params("kandev_kp_echo", json!({"msg": "hi"})))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(r) => assert_eq!(r.is_error, Some(false)),
        other => panic!("expected a direct result, got {other:?}"),
    }
    d.wait_metric("toolhost_tasks{state=\"working\"}", 0.0)
        .await;
    d.wait_metric("toolhost_tasks{state=\"completed\"}", 0.0)
        .await;
    // A call refused by the pipeline is answered directly too: no task is
    // made for arguments that fail the schema.
    match c
        .peer()
        .call_tool_once(params("kandev_kp_steps", json!({"steps": "SECRET-many"})))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(r) => {
            assert_eq!(toolhost_e2e::outcome_code(&r), "invalid_arguments");
            assert!(!format!("{r:?}").contains("SECRET"));
        }
        other => panic!("expected a direct refusal, got {other:?}"),
    }
    let (_, listed) = cli_at(&admin(root.path()), &["tasks"]);
    assert!(listed.contains("no tasks"), "{listed}");
}

#[tokio::test]
async fn a_pushed_catalog_that_loosens_task_support_is_withheld() {
    use toolhost_proto::admin as pb;
    let root = Scratch::new("tasks-push");
    let d = daemon(root.path(), "", "[backend]\nmanaged = true\n").await;
    let m = toolhost_manifest::Manifest::load(&root.path().join("kp")).unwrap();
    let mut s = toolhost_catalog::Snapshot::from_manifests("kandev", "g1", 1, [&m]);
    s.epoch = 1;
    for t in &mut s.tools {
        if t.local_name == "echo" {
            t.task = toolhost_catalog::TaskSupport::Optional;
        }
        if t.local_name == "nap" {
            // Longer than the installed 5 s: a loosening too.
            t.task_timeout_ms = Some(10_000);
        }
        if t.local_name == "steps" {
            // Narrowing is allowed.
            t.task = toolhost_catalog::TaskSupport::Never;
        }
    }
    let sock = admin(root.path());
    let mut a = eventually(WAIT, "the admin socket", async || {
        toolhost_admin::connect_unix(&sock).await.ok()
    })
    .await;
    let pushed = a
        .push_catalog(pb::PushCatalogRequest {
            snapshot: Some(toolhost_managed::snapshot_to_proto(&s)),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        pb::PushOutcome::try_from(pushed.outcome).unwrap(),
        pb::PushOutcome::Accepted,
        "{pushed:?}"
    );
    let st = a
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    let withheld: Vec<_> = st.withheld.iter().map(|w| w.tool.as_str()).collect();
    assert_eq!(
        withheld,
        ["kandev_kp_echo", "kandev_kp_nap"],
        "{:?}",
        st.withheld
    );
    assert!(
        st.withheld[0]
            .reason
            .contains("task = \"optional\" allows more"),
        "{:?}",
        st.withheld
    );
    assert!(
        st.withheld[1].reason.contains("task timeout of 10000 ms"),
        "{:?}",
        st.withheld
    );
    let c = tasks_client(&d).await;
    match c
        .peer()
        .call_tool_once(params("kandev_kp_echo", json!({})))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(r) => {
            assert_eq!(toolhost_e2e::outcome_code(&r), "tool_unavailable");
        }
        other => panic!("a withheld tool is never a task: {other:?}"),
    }
    // The narrowed tool now runs directly, even for a client that could
    // take a task.
    match c
        .peer()
        .call_tool_once(params("kandev_kp_steps", json!({"steps": 1})))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(r) => assert_eq!(texts(&r), ["1 steps done"]),
        other => panic!("narrowed to never, yet {other:?}"),
    }
}

#[tokio::test]
async fn an_upgrade_lets_a_running_task_finish_on_the_old_process() {
    use toolhost_proto::admin as pb;
    let root = Scratch::new("tasks-upgrade");
    let config = TestConfig::new(root.path(), &[]).build();
    let d = Daemon::start(root.path(), &config, &[]);
    let sock = admin(root.path());
    let mut a = eventually(WAIT, "the admin socket", async || {
        toolhost_admin::connect_unix(&sock).await.ok()
    })
    .await;
    let v1 = taskplug_dir(&root.path().join("src1"), "kp");
    let v2 = taskplug_dir(&root.path().join("src2"), "kp");
    let manifest = v2.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("version = \"1.0.0\"", "version = \"2.0.0\""),
    )
    .unwrap();
    a.install_plugin(pb::InstallPluginRequest {
        values: Default::default(),
        path: v1.display().to_string(),
        ..Default::default()
    })
    .await
    .unwrap();
    d.wait_metric("toolhost_plugin_state{plugin=\"kp\",state=\"ready\"}", 1.0)
        .await;
    let c = tasks_client(&d).await;
    let data = data(root.path());
    let id = start_task(&c, "kandev_kp_slow", json!({"ms": 3000})).await;
    eventually(WAIT, "the plugin to run it", async || {
        (events(&data, "invoked slow").len() == 1).then_some(())
    })
    .await;
    let upgrade = tokio::spawn(async move {
        a.upgrade_plugin(pb::UpgradePluginRequest {
            dry_run: false,
            values: Default::default(),
            path: v2.display().to_string(),
            ..Default::default()
        })
        .await
    });
    let done = until(&c, &id, TaskStatus::Completed).await;
    assert_eq!(texts(&result_of(&done)), ["slept 3000 ms"]);
    assert!(upgrade.await.unwrap().is_ok());
    assert_eq!(events(&data, "invoked slow").len(), 1, "one attempt");
    // The new version serves the next task.
    let id = start_task(&c, "kandev_kp_slow", json!({"ms": 1})).await;
    until(&c, &id, TaskStatus::Completed).await;
}

#[tokio::test]
async fn toolhost_call_runs_a_task_answers_its_question_and_follows_one_made_elsewhere() {
    let root = Scratch::new("tasks-cli");
    let d = daemon(root.path(), "", "").await;
    let url = d.url.clone();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            toolhost_e2e::cli(&args)
        })
    };
    let base = |tool: &str| {
        ["call", tool, "--url", &url, "--token", toolhost_e2e::TOKEN]
            .map(str::to_owned)
            .to_vec()
    };
    let mut args = base("kandev_kp_confirm");
    args.extend(["--task", "--answer", r#"{"confirm": true}"#].map(str::to_owned));
    let (ok, out) = run(args).await.unwrap();
    assert!(ok, "{out}");
    assert!(
        out.contains("created") && out.contains("input_required"),
        "{out}"
    );
    assert!(out.contains(r#"accepted {"confirm":true}"#), "{out}");

    // A task made by another client, followed by id to its result.
    let c = tasks_client(&d).await;
    let id = start_task(&c, "kandev_kp_steps", json!({"steps": 3, "pause_ms": 300})).await;
    let mut args = base("kandev_kp_steps");
    args.extend(["--task-id".to_owned(), id]);
    let (ok, out) = run(args).await.unwrap();
    assert!(ok && out.contains("3 steps done"), "{out}");
    assert!(out.contains("of 3"), "the progress shows: {out}");

    // A tool that does not allow tasks runs directly, and says so.
    let mut args = base("kandev_kp_echo");
    args.extend([r#"{"msg": "hi"}"#, "--task"].map(str::to_owned));
    let (ok, out) = run(args).await.unwrap();
    assert!(ok && out.contains("ran directly"), "{out}");
}

#[tokio::test]
async fn a_task_over_stdio_belongs_to_the_process_and_runs_to_its_result() {
    use rmcp::service::ClientServiceExt as _;
    let root = Scratch::new("tasks-stdio");
    let kp = taskplug_dir(root.path(), "kp");
    let config = TestConfig::new(root.path(), &[kp])
        .stdio("task-stdio", "session-stdio")
        .build();
    let file = root.path().join("toolhost.toml");
    std::fs::write(&file, config).unwrap();
    let mut cmd = tokio::process::Command::new(bin("toolhost"));
    cmd.args(["serve", "--stdio", "--config"]).arg(&file);
    let (transport, _stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let c = Asker::new(true)
        .with_tasks()
        .serve_with_lifecycle(
            transport,
            rmcp::service::ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    assert!(c.peer().peer_info().unwrap().capabilities.supports_tasks());
    let id = start_task(&c, "kandev_kp_steps", json!({"steps": 2, "pause_ms": 200})).await;
    let done = until(&c, &id, TaskStatus::Completed).await;
    assert_eq!(texts(&result_of(&done)), ["2 steps done"]);
    let id = start_task(&c, "kandev_kp_slow", json!({"ms": 60_000})).await;
    c.peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    assert_eq!(
        get(&c, &id).await.unwrap().task.status(),
        TaskStatus::Cancelled
    );
    c.cancel().await.unwrap();
}

/// A task belongs to the binding that made it: revoking the binding
/// cancels its tasks (the plugin sees the cancel), and the same token
/// bound again, to another session, does not read the old binding's tasks.
#[tokio::test]
async fn revoking_a_binding_cancels_its_tasks_and_a_new_binding_of_the_token_cannot_read_them() {
    use toolhost_admin::admin as pb;
    let root = Scratch::new("tasks-revoke");
    let d = daemon(root.path(), "", "").await;
    let mut a = toolhost_admin::connect_unix(&admin(root.path()))
        .await
        .unwrap();
    let token = "bound-at-run-time-0123456789";
    let bind = |session: &str| pb::BindSessionRequest {
        token: token.to_owned(),
        binding: Some(pb::SessionBinding {
            surface: "chat".into(),
            task_id: "t".into(),
            session_id: session.into(),
            workspace_id: String::new(),
        }),
    };
    a.bind_session(bind("first")).await.unwrap();
    let first = connect_as(&d.url, token, Asker::new(true).with_tasks(), Era::Modern).await;
    let data = data(root.path());
    let id = start_task(&first, "kandev_kp_slow", json!({"ms": 60_000})).await;
    eventually(WAIT, "the plugin to run it", async || {
        (!events(&data, "invoked slow").is_empty()).then_some(())
    })
    .await;
    a.revoke_session(pb::RevokeSessionRequest {
        token: token.to_owned(),
    })
    .await
    .unwrap();
    eventually(WAIT, "the plugin to see the cancel", async || {
        (events(&data, "cancelled slow").len() == 1).then_some(())
    })
    .await;
    let listed = a
        .list_tasks(pb::ListTasksRequest {})
        .await
        .unwrap()
        .into_inner()
        .tasks;
    let entry = listed.iter().find(|t| t.id == id).expect("listed");
    assert_eq!(entry.state, "cancelled", "{listed:?}");
    // Bound again, to another session: the old task is unknown to it.
    a.bind_session(bind("second")).await.unwrap();
    let second = connect_as(&d.url, token, Asker::new(true).with_tasks(), Era::Modern).await;
    let unknown = rpc_error(&get(&second, &"0".repeat(32)).await.unwrap_err());
    assert_eq!(rpc_error(&get(&second, &id).await.unwrap_err()), unknown);
}
