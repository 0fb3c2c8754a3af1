//! `toolhost call --task` and `--task-id`: a call run as an MCP task, and
//! a task followed to its end, as a 2026-07-28 client with the Tasks
//! extension does it: poll `tasks/get` at the interval the daemon asks
//! for, print the status message when it changes, answer a question with
//! `tasks/update` (a refused answer is said, and the question asked
//! again), and on Ctrl-C send `tasks/cancel`.

use crate::call_client::{Answering, CallClient};
use anyhow::{Context as _, Result, bail};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    InputRequest, TaskPayload, UpdateTaskParams,
};
use rmcp::service::RunningService;
use std::collections::BTreeSet;
use std::time::Duration;
use toolhost_base::errln;

type Client = RunningService<RoleClient, CallClient>;

/// Calls, and follows the task if the daemon made one. `None`: the task
/// ended without a result (said on stderr).
pub async fn call(
    client: &Client,
    params: CallToolRequestParams,
) -> Result<Option<CallToolResult>> {
    let name = params.name.clone();
    match client
        .peer()
        .call_tool_once(params)
        .await
        .context("the call failed")?
    {
        CallToolResponse::Task(created) => {
            let id = created.task.task_id;
            errln!("[task {id}] created; `--task-id {id}` follows it from another terminal");
            follow(client, &id).await
        }
        CallToolResponse::Complete(result) => {
            errln!("[task] {name} ran directly (its manifest does not allow tasks)");
            Ok(Some(result))
        }
        CallToolResponse::InputRequired(_) => {
            bail!("{name} asked a question outside a task; call it without --task to answer it")
        }
        _ => bail!("the daemon answered the call with something this toolhost does not know"),
    }
}

/// Follows task `id` to its end.
///
/// Kept whole on purpose: one polling loop whose states (working, input
/// required, terminal) share the last status printed and the answer sent.
pub async fn follow(client: &Client, id: &str) -> Result<Option<CallToolResult>> {
    let mut shown: Option<String> = None;
    let mut answered: BTreeSet<String> = BTreeSet::new();
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let t = tokio::select! {
            r = client.peer().get_task(GetTaskParams::new(id)) => r.context("tasks/get failed")?,
            _ = &mut interrupted => return cancel(client, id).await,
        };
        let status = serde_json::to_value(t.task.status())
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        let line = match &t.task.task.status_message {
            Some(m) => format!("{status}: {m}"),
            None => status,
        };
        if shown.as_deref() != Some(line.as_str()) {
            errln!("[task {id}] {line}");
            shown = Some(line);
        }
        match t.task.payload {
            TaskPayload::Completed { result } => {
                return serde_json::from_value(serde_json::Value::Object(result))
                    .map(Some)
                    .context("the task's result is not a tool result");
            }
            TaskPayload::Failed { error } => {
                let message = error
                    .get("message")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("no reason given");
                errln!("[task {id}] failed: {message}");
                return Ok(None);
            }
            TaskPayload::Cancelled => return Ok(None),
            TaskPayload::InputRequired { input_requests } => {
                for (key, request) in input_requests {
                    if answered.contains(&key) {
                        continue;
                    }
                    let InputRequest::Elicitation(question) = request else {
                        continue;
                    };
                    let answer = client.service().answer(question.params).await;
                    let mut responses = rmcp::model::InputResponses::new();
                    responses.insert(key.clone(), serde_json::to_value(answer)?);
                    match client
                        .peer()
                        .update_task(UpdateTaskParams::new(id, responses))
                        .await
                    {
                        Ok(()) => {
                            answered.insert(key);
                        }
                        // Refused (it did not fit the question): the
                        // question still waits. On a terminal it is asked
                        // again; `--answer` would only be refused again, so
                        // the task is cancelled rather than left waiting.
                        Err(e) => {
                            errln!("[task {id}] the answer was refused: {e}");
                            if !matches!(client.service().answering, Answering::Terminal) {
                                return cancel(client, id).await;
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        let wait = Duration::from_millis(
            t.task
                .task
                .poll_interval_ms
                .unwrap_or(1000)
                .clamp(50, 10_000),
        );
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = &mut interrupted => return cancel(client, id).await,
        }
    }
}

async fn cancel(client: &Client, id: &str) -> Result<Option<CallToolResult>> {
    client
        .peer()
        .cancel_task(CancelTaskParams::new(id))
        .await
        .context("tasks/cancel failed")?;
    errln!("[task {id}] cancelled");
    Ok(None)
}
