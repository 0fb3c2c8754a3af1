//! Tool calls run as tasks (the MCP 2026-07-28 Tasks extension,
//! `io.modelcontextprotocol/tasks`), and the extension's three requests.
//!
//! Task creation is the server's choice, per request: a 2026-07-28 client
//! declares the extension in its request's capabilities, and toolhost
//! makes a task of a call when the tool allows one (`task = "optional"` or
//! `"required"` in its manifest). The call then goes through the whole
//! pipeline as any call does (validation, authorization, the backend's
//! `Authorize`, its place among the plugin's calls) and only when the
//! pipeline admits it, just before dispatch, is the task created and
//! `CreateTaskResult` returned ([`start`]). A call refused before that is
//! answered as a direct call would be: no task exists for it.
//!
//! From then on the call runs detached from the request that started it,
//! driven by [`follow`]: progress becomes the task's status message, a
//! plugin's question puts it in `input_required` until `tasks/update`
//! answers it, and its end is recorded as `completed` (the result mapped
//! as a direct call's), `failed` (toolhost's coded error, such as a
//! crashed plugin's), or `cancelled`. It is one attempt: nothing here
//! retries it.
//!
//! What this module must not do: decide anything about the call (the
//! pipeline does), or show one owner's task to another: every lookup
//! names the owner, and another owner's task is answered exactly as an
//! unknown one.

use crate::calls::{Running, Stop, TaskPlan, Wants};
use crate::hub::Hub;
use crate::tasks::{Asking, NoQuestion, POLL_INTERVAL, TaskState, TaskView};
use crate::tokens::Owner;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, CreateTaskResult, DetailedTask, ElicitRequest,
    ElicitResult, GetTaskResult, InputRequest, Task, TaskPayload, TaskStatus,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_pipeline::{Binding, ErrorCode, Unanswered};

/// How a `tools/call` runs.
pub(crate) enum Mode {
    /// As a call answered on its request.
    Direct,
    /// As a task that may run this long.
    Task(Duration),
}

/// Chooses how a call runs: a task when the client declared the
/// extension (`declared`) and the tool allows one. A tool that requires a
/// task, called by a client that cannot take one, is refused with the
/// extension's missing-capability error. An unknown name is left to the
/// pipeline, which answers it as always.
pub(crate) fn mode(
    hub: &Hub,
    binding: &Binding,
    name: &str,
    declared: bool,
) -> Result<Mode, McpError> {
    let catalog = hub.pipeline.store().current();
    let Some(entry) = catalog.resolve(&binding.surface, name) else {
        return Ok(Mode::Direct);
    };
    let d = &entry.descriptor;
    if declared && d.task.allows_task() {
        let cap = hub.tasks.limits().max_lifetime;
        let declared = d.task_timeout_ms.unwrap_or(d.timeout_ms);
        let lifetime = Duration::from_millis(u64::from(declared)).min(cap);
        return Ok(Mode::Task(lifetime));
    }
    if !d.task.allows_direct() {
        return Err(McpError::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ));
    }
    Ok(Mode::Direct)
}

/// A call to run as a task.
pub(crate) struct NewTask<'a> {
    pub(crate) binding: Binding,
    pub(crate) name: &'a str,
    pub(crate) arguments: Option<Value>,
    pub(crate) wants: Wants,
    /// From [`Mode::Task`].
    pub(crate) lifetime: Duration,
}

/// Runs a call as a task: through the pipeline until it is admitted, then
/// detached. Returns `CreateTaskResult` once the task exists, or the
/// direct answer of a call that ended before admission.
pub(crate) async fn start(
    hub: &Arc<Hub>,
    owner: Owner,
    call: NewTask<'_>,
    stop: &Stop<'_>,
) -> Result<CallToolResponse, McpError> {
    let NewTask {
        binding,
        name,
        arguments,
        wants,
        lifetime,
    } = call;
    let place = hub
        .tasks
        .reserve(owner, Instant::now())
        .map_err(|refused| McpError::invalid_request(refused.to_string(), None))?;
    let plan = TaskPlan {
        place,
        tool: name.to_owned(),
        lifetime,
        cap: hub.tasks.limits().max_lifetime,
    };
    // Revoking the binding that made the task cancels it.
    let revoked = binding.revocation();
    let mut running = hub.start_call(binding, name, arguments, wants, Some(plan));
    let Some(mut admitted) = running.admitted.take() else {
        return Err(McpError::internal_error(
            "the task could not be prepared",
            None,
        ));
    };
    // From here the call runs on its own task: the request only waits to
    // learn whether it was admitted.
    running.detach();
    let id = tokio::select! {
        biased;
        id = &mut admitted => id.ok(),
        () = stop.cancelled() => {
            running.cancel.cancel();
            None
        }
    };
    let Some(id) = id else {
        let r = (&mut running.call).await;
        // Admitted in a race with the client's cancel: the task exists, so
        // its end is recorded, and it never stays `working` with nothing
        // behind it. (Once the call has ended, its admission is settled.)
        if let Ok(id) = admitted.try_recv() {
            hub.tasks.update(&id, ended(r), Instant::now());
            return Err(McpError::invalid_request("the request was cancelled", None));
        }
        // Ended before admission (refused, or cancelled while waiting for
        // its plugin): answered as the direct call it then was.
        return match r {
            Err(unknown) => Err(McpError::invalid_params(unknown.to_string(), None)),
            Ok(r) => crate::content::result_of(r, true),
        };
    };
    let view = hub.tasks.get(&owner, &id, Instant::now());
    tokio::spawn(follow(Arc::clone(&hub.tasks), id.clone(), running, revoked));
    let task = view.map_or_else(
        || {
            let now = rmcp::task_manager::current_timestamp();
            Task::new(id, TaskStatus::Working, now.clone(), now)
        },
        |v| base(&v),
    );
    Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
}

/// Follows a task's call to its end, recording what it sends; cancels it
/// when its binding is revoked.
async fn follow(
    tasks: Arc<crate::tasks::Tasks>,
    id: String,
    mut running: Running,
    revoked: tokio_util::sync::CancellationToken,
) {
    let shared = Arc::clone(&running.events.shared);
    let mut asked: u32 = 0;
    loop {
        tokio::select! {
            biased;
            r = &mut running.call => {
                tasks.update(&id, ended(r), Instant::now());
                return;
            }
            () = revoked.cancelled(), if !running.cancel.is_cancelled() => {
                tracing::info!(task = %id, "task cancelled: the binding that made it was revoked");
                tasks.cancel(None, &id, Instant::now());
                running.cancel.cancel();
            }
            () = shared.arrived.notified() => {
                let (progress, question) = {
                    let mut p = shared.lock();
                    // Log messages have no stream to go to.
                    p.logs.clear();
                    let progress = std::mem::take(&mut p.progress_new)
                        .then(|| p.progress.clone())
                        .flatten();
                    (progress, p.question.take())
                };
                if let Some(p) = progress {
                    tasks.update(&id, TaskState::Working(Some(status_message(&p))), Instant::now());
                }
                if let Some((q, reply)) = question {
                    asked += 1;
                    let key = format!("question-{asked}");
                    let prepared = crate::calls::elicit_params(&q).zip(
                        toolhost_pipeline::check_question(q.message.clone(), q.requested_schema.clone()).ok(),
                    );
                    let Some((params, question)) = prepared else {
                        let _ = reply.send(Err(Unanswered::Failed(
                            "the question could not be encoded".into(),
                        )));
                        continue;
                    };
                    let request = InputRequest::Elicitation(ElicitRequest::new(params));
                    let requests = json!({ key.clone(): request });
                    if let Err(asking) = tasks.ask(&id, requests, Asking { key, question: Box::new(question), reply }) {
                        let _ = asking.reply.send(Err(Unanswered::Failed("the task has ended".into())));
                    }
                }
            }
        }
    }
}

/// A progress update as a status message.
fn status_message(p: &toolhost_pipeline::Progress) -> String {
    let amount = match p.total {
        Some(total) => format!("{}/{}", p.progress, total),
        None => format!("{}", p.progress),
    };
    match &p.message {
        Some(m) => format!("{m} ({amount})"),
        None => format!("progress {amount}"),
    }
}

/// How a task's call ended, as its final state: the result a direct call
/// would get (`completed`, including a tool's own `isError`), toolhost's
/// coded error (`failed`: the plugin crashed, timed out, answered too
/// much), or `cancelled`.
fn ended(r: Result<toolhost_pipeline::CallResult, toolhost_pipeline::UnknownTool>) -> TaskState {
    let r = match r {
        Ok(r) => r,
        Err(unknown) => {
            return TaskState::Failed(error_value(&McpError::invalid_params(
                unknown.to_string(),
                None,
            )));
        }
    };
    if r.code == Some(ErrorCode::Cancelled) {
        return TaskState::Cancelled;
    }
    let coded = r.code.map(|_| {
        r.meta
            .as_ref()
            .and_then(|m| m.get("error"))
            .cloned()
            .unwrap_or(Value::Null)
    });
    match crate::content::result_of(r, true) {
        Err(e) => TaskState::Failed(error_value(&e)),
        Ok(CallToolResponse::Complete(result)) => match coded {
            None => match serde_json::to_value(result) {
                Ok(v) => TaskState::Completed(v),
                Err(_) => TaskState::Failed(error_value(&McpError::internal_error(
                    "the result could not be encoded",
                    None,
                ))),
            },
            Some(error) => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the call failed")
                    .to_owned();
                TaskState::Failed(error_value(&McpError::internal_error(message, Some(error))))
            }
        },
        Ok(_) => TaskState::Failed(error_value(&McpError::internal_error(
            "the call did not complete",
            None,
        ))),
    }
}

fn error_value(e: &McpError) -> Value {
    serde_json::to_value(e)
        .unwrap_or_else(|_| json!({ "code": -32603, "message": "internal error" }))
}

/// The one answer for a task id that is unknown, expired, or another
/// token's. The id itself is not repeated.
fn not_found() -> McpError {
    McpError::invalid_params(
        "no such task for this token (unknown, or its result has expired)",
        None,
    )
}

/// The extension's base task fields of a view.
fn base(v: &TaskView) -> Task {
    let mut task = Task::new(
        v.id.clone(),
        status(&v.state),
        v.created_at.clone(),
        v.updated_at.clone(),
    )
    .with_ttl_ms(millis(v.ttl))
    .with_poll_interval_ms(millis(POLL_INTERVAL));
    if let TaskState::Working(Some(m)) = &v.state {
        task = task.with_status_message(m.clone());
    }
    task
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn status(s: &TaskState) -> TaskStatus {
    match s {
        TaskState::Working(_) => TaskStatus::Working,
        TaskState::InputRequired(_) => TaskStatus::InputRequired,
        TaskState::Completed(_) => TaskStatus::Completed,
        TaskState::Failed(_) => TaskStatus::Failed,
        TaskState::Cancelled => TaskStatus::Cancelled,
    }
}

fn object(v: &Value) -> serde_json::Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// `tasks/get`.
pub(crate) fn get(hub: &Hub, owner: &Owner, id: &str) -> Result<GetTaskResult, McpError> {
    let v = hub
        .tasks
        .get(owner, id, Instant::now())
        .ok_or_else(not_found)?;
    let payload = match &v.state {
        TaskState::Working(_) => TaskPayload::Working,
        TaskState::InputRequired(requests) => TaskPayload::InputRequired {
            input_requests: serde_json::from_value(requests.clone()).unwrap_or_default(),
        },
        TaskState::Completed(result) => TaskPayload::Completed {
            result: object(result),
        },
        TaskState::Failed(error) => TaskPayload::Failed {
            error: object(error),
        },
        TaskState::Cancelled => TaskPayload::Cancelled,
    };
    Ok(GetTaskResult::new(DetailedTask::new(base(&v), payload)))
}

/// `tasks/update`: the answer to the task's outstanding question, checked
/// as a direct call's answer is (the requested schema, the root closed),
/// before it reaches the plugin. An answer that does not fit is refused
/// and the question stays outstanding, so the client may answer again.
/// Keys that name no outstanding question are ignored, as the extension
/// says.
pub(crate) fn update(
    hub: &Hub,
    owner: &Owner,
    id: &str,
    responses: &rmcp::model::InputResponses,
) -> Result<(), McpError> {
    let (asking, requests) = match hub.tasks.take_question(owner, id) {
        Ok(taken) => taken,
        Err(NoQuestion::UnknownTask) => return Err(not_found()),
        Err(NoQuestion::NotAsking) => return Ok(()),
    };
    let Some(response) = responses.get(&asking.key) else {
        hub.tasks.put_back(id, asking, requests);
        return Ok(());
    };
    let Ok(answer) = serde_json::from_value::<ElicitResult>(response.clone()) else {
        let key = asking.key.clone();
        hub.tasks.put_back(id, asking, requests);
        return Err(McpError::invalid_params(
            format!("the response under {key:?} must be an elicitation result {{action, content}}"),
            None,
        ));
    };
    match toolhost_pipeline::check_answer(&asking.question, crate::calls::answer_of(answer)) {
        Ok(answer) => {
            let _ = asking.reply.send(Ok(answer));
            Ok(())
        }
        Err(violations) => {
            // Names and rules, never the value the user typed.
            let why: Vec<&str> = violations.iter().map(|v| v.message.as_str()).collect();
            let message = format!(
                "the answer does not match the requested schema: {}; the question is still waiting for an answer",
                why.join("; ")
            );
            hub.tasks.put_back(id, asking, requests);
            Err(McpError::invalid_params(message, None))
        }
    }
}

/// `tasks/cancel`: cancels the owner's running task (its plugin call is
/// cancelled). An id the caller does not own is answered as `tasks/get`
/// answers it (`-32602`, the same words), so a cancel tells nobody whether
/// another's task exists; a task of the caller's that has already ended is
/// refused too, saying so, as the extension asks.
pub(crate) fn cancel(hub: &Hub, owner: &Owner, id: &str) -> Result<(), McpError> {
    match hub.tasks.cancel(Some(owner), id, Instant::now()) {
        crate::tasks::Cancelled::Now => Ok(()),
        crate::tasks::Cancelled::Unknown => Err(not_found()),
        crate::tasks::Cancelled::AlreadyEnded => Err(McpError::invalid_params(
            "the task has already ended; its result stays readable with tasks/get",
            None,
        )),
    }
}
