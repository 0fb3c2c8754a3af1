//! A hosted call's outcome as MCP answers it, and the Tasks extension's
//! three requests (`io.modelcontextprotocol/tasks`, 2026-07-28).
//!
//! The call host (`toolhost_calls`) decides how a call runs and keeps the
//! tasks' books with their states typed; this module only writes them in
//! the protocol's words: a result, an input-required result for a parked
//! question, `CreateTaskResult` for a call that became a task, the
//! extension's errors, and what `tasks/get` shows of each state.
//!
//! What this module must not do: show one owner's task to another. Every
//! lookup names the owner, and another owner's task is answered exactly
//! as an unknown one.

use crate::deliver::{QUESTION_KEY, answer_of, elicit_params};
use crate::hub::Hub;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, CreateTaskResult, DetailedTask, ElicitRequest,
    ElicitResult, GetTaskResult, InputRequest, InputRequiredResult, Task, TaskPayload, TaskStatus,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use toolhost_calls::{
    Cancelled, Failure, Hosted, NotAnswered, Owner, POLL_INTERVAL, TaskState, TaskView,
};

/// The answer to the request that hosted a call. `modern`: a 2026-07-28
/// client.
pub(crate) fn response(hosted: Hosted, modern: bool) -> Result<CallToolResponse, McpError> {
    match hosted {
        Hosted::Done(Err(unknown)) => Err(McpError::invalid_params(unknown.to_string(), None)),
        Hosted::Done(Ok(r)) => crate::content::result_of(r, modern),
        Hosted::Parked { handle, question } => {
            let params = elicit_params(&question).ok_or_else(|| {
                McpError::internal_error("the question could not be encoded", None)
            })?;
            let mut requests = std::collections::BTreeMap::new();
            requests.insert(
                QUESTION_KEY.to_owned(),
                InputRequest::Elicitation(ElicitRequest::new(params)),
            );
            Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                Some(requests),
                Some(handle),
            )))
        }
        Hosted::Task(view) => Ok(CallToolResponse::Task(CreateTaskResult::new(base(&view)))),
        Hosted::NeedsTasks => Err(McpError::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        )),
        Hosted::TaskRefused(refused) => Err(McpError::invalid_request(refused.to_string(), None)),
        Hosted::CancelledAtCreation => {
            Err(McpError::invalid_request("the request was cancelled", None))
        }
    }
}

/// The one answer for a task id that is unknown, expired, or another
/// token's. The id itself is not repeated.
fn not_found() -> McpError {
    McpError::invalid_params(NotAnswered::UnknownTask.to_string(), None)
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
        TaskState::InputRequired { .. } => TaskStatus::InputRequired,
        TaskState::Completed(_) => TaskStatus::Completed,
        TaskState::Failed(_) => TaskStatus::Failed,
        TaskState::Cancelled => TaskStatus::Cancelled,
    }
}

fn error_object(e: &McpError) -> serde_json::Map<String, Value> {
    match serde_json::to_value(e) {
        Ok(Value::Object(o)) => o,
        _ => json!({ "code": -32603, "message": "internal error" })
            .as_object()
            .cloned()
            .unwrap_or_default(),
    }
}

/// A failed task's error: the JSON-RPC error a direct call would have got,
/// its coded `_meta.error` as the error's data.
fn failure(f: &Failure) -> serde_json::Map<String, Value> {
    match f {
        Failure::UnknownTool(unknown) => {
            error_object(&McpError::invalid_params(unknown.to_string(), None))
        }
        Failure::Coded(r) => {
            if let Err(e) = crate::content::result_of(r.clone(), true) {
                return error_object(&e);
            }
            let error = r
                .meta
                .as_ref()
                .and_then(|m| m.get("error"))
                .cloned()
                .unwrap_or(Value::Null);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the call failed")
                .to_owned();
            error_object(&McpError::internal_error(message, Some(error)))
        }
    }
}

/// The payload `tasks/get` shows for a state.
fn payload(state: &TaskState) -> TaskPayload {
    match state {
        TaskState::Working(_) => TaskPayload::Working,
        TaskState::InputRequired { key, question } => {
            let input_requests = elicit_params(question)
                .map(|params| {
                    let request = InputRequest::Elicitation(ElicitRequest::new(params));
                    serde_json::from_value(json!({ key.clone(): request })).unwrap_or_default()
                })
                .unwrap_or_default();
            TaskPayload::InputRequired { input_requests }
        }
        TaskState::Completed(r) => match crate::content::result_of(r.clone(), true) {
            Ok(CallToolResponse::Complete(result)) => match serde_json::to_value(result) {
                Ok(Value::Object(result)) => TaskPayload::Completed { result },
                _ => TaskPayload::Failed {
                    error: error_object(&McpError::internal_error(
                        "the result could not be encoded",
                        None,
                    )),
                },
            },
            Ok(_) => TaskPayload::Failed {
                error: error_object(&McpError::internal_error("the call did not complete", None)),
            },
            Err(e) => TaskPayload::Failed {
                error: error_object(&e),
            },
        },
        TaskState::Failed(f) => TaskPayload::Failed { error: failure(f) },
        TaskState::Cancelled => TaskPayload::Cancelled,
    }
}

/// `tasks/get`.
pub(crate) fn get(hub: &Hub, owner: &Owner, id: &str) -> Result<GetTaskResult, McpError> {
    let v = hub
        .tasks()
        .get(owner, id, Instant::now())
        .ok_or_else(not_found)?;
    Ok(GetTaskResult::new(DetailedTask::new(
        base(&v),
        payload(&v.state),
    )))
}

/// `tasks/update`: the answer to the task's outstanding question, checked
/// against the requested schema (the root closed) before it reaches the
/// plugin. An answer that does not fit is refused and the question stays
/// outstanding, so the client may answer again. Keys that name no
/// outstanding question are ignored, as the extension says.
pub(crate) fn update(
    hub: &Hub,
    owner: &Owner,
    id: &str,
    responses: &rmcp::model::InputResponses,
) -> Result<(), McpError> {
    let mut malformed = None;
    let answered = hub.tasks().answer(owner, id, |key| {
        let response = responses.get(key)?;
        match serde_json::from_value::<ElicitResult>(response.clone()) {
            Ok(answer) => Some(answer_of(answer)),
            Err(_) => {
                malformed = Some(key.to_owned());
                None
            }
        }
    });
    match answered {
        Err(NotAnswered::UnknownTask) => Err(not_found()),
        Err(e @ NotAnswered::DoesNotFit(_)) => Err(McpError::invalid_params(e.to_string(), None)),
        Ok(()) => match malformed {
            Some(key) => Err(McpError::invalid_params(
                format!(
                    "the response under {key:?} must be an elicitation result {{action, content}}"
                ),
                None,
            )),
            None => Ok(()),
        },
    }
}

/// `tasks/cancel`: cancels the owner's running task (its plugin call is
/// cancelled). An id the caller does not own is answered as `tasks/get`
/// answers it (`-32602`, the same words), so a cancel tells nobody whether
/// another's task exists; a task of the caller's that has already ended is
/// refused too, saying so, as the extension asks.
pub(crate) fn cancel(hub: &Hub, owner: &Owner, id: &str) -> Result<(), McpError> {
    match hub.tasks().cancel(Some(owner), id, Instant::now()) {
        Cancelled::Now => Ok(()),
        Cancelled::Unknown => Err(not_found()),
        Cancelled::AlreadyEnded => Err(McpError::invalid_params(
            "the task has already ended; its result stays readable with tasks/get",
            None,
        )),
    }
}
