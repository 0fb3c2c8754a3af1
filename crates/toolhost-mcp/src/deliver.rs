//! How a tool call's events reach an MCP client: the deliveries the call
//! host drives a call through ([`ToSession`] for a request with a stream,
//! [`Nowhere`] for a plain stateless one), and the mapping of questions
//! and log levels between MCP and the pipeline.
//!
//! - progress becomes `notifications/progress` with the client's token
//!   (coalesced by the host to one per 50 ms);
//! - log messages become `notifications/message`, to this caller only;
//! - a question becomes `elicitation/create` for 2025-era clients, asked
//!   while the call goes on; a 2026-07-28 client gets an input-required
//!   result instead, and answers by calling the tool again with the
//!   answer and the `requestState` (the call waits, parked, in the host).

// rmcp marks logging deprecated (SEP-2577); both protocol eras toolhost
// serves still have `logging/setLevel` and `notifications/message`.
#![allow(deprecated)]

use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use toolhost_calls::{BoxFuture, Delivery, Route};
use toolhost_pipeline::{
    Answer, AnswerAction, LogLevel, LogMessage, Progress, Question, Unanswered,
};

/// The input-request key of a question in an input-required result.
pub(crate) const QUESTION_KEY: &str = "question";

/// A request with a stream to its client (a session's, or a 2026-07-28
/// request's own).
pub(crate) struct ToSession<'a> {
    pub(crate) peer: &'a Peer<RoleServer>,
    /// The client's progress token; without one, progress goes nowhere.
    pub(crate) progress_token: Option<ProgressToken>,
    /// A 2026-07-28 client: questions park the call.
    pub(crate) modern: bool,
}

impl Delivery for ToSession<'_> {
    fn progress(&self, p: Progress) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let Some(token) = self.progress_token.clone() else {
                return;
            };
            let mut param = ProgressNotificationParam::new(token, p.progress);
            param.total = p.total;
            param.message = p.message;
            let _ = self.peer.notify_progress(param).await;
        })
    }

    fn log(&self, m: LogMessage) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let data = match m.data {
                Some(d) => serde_json::json!({ "message": m.message, "data": d }),
                None => Value::String(m.message),
            };
            let mut param = LoggingMessageNotificationParam::new(mcp_level(m.level), data);
            param.logger = m.logger;
            let _ = self.peer.notify_logging_message(param).await;
        })
    }

    fn question(&self, q: &Question) -> Route<'_> {
        let Some(params) = elicit_params(q) else {
            return Route::Refused(Unanswered::Failed(
                "the question could not be encoded".into(),
            ));
        };
        if self.modern {
            return Route::Park;
        }
        let had_progress = self.progress_token.is_some();
        Route::Asked(Box::pin(async move {
            ask(self.peer, params, had_progress)
                .await
                .map(answer_of)
                .map_err(|_| Unanswered::Failed("the client did not answer the question".into()))
        }))
    }
}

/// A plain stateless request: nothing reaches its client before the
/// result, and it cannot answer a question.
pub struct Nowhere;

impl Delivery for Nowhere {
    fn progress(&self, _: Progress) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn log(&self, _: LogMessage) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    // The pipeline asks only a caller that can answer; should a question
    // come anyway, it is refused as one this client cannot take.
    fn question(&self, _: &Question) -> Route<'_> {
        Route::Refused(Unanswered::CannotAsk)
    }
}

/// `elicitation/create`, carrying a progress token only when the call had
/// one (rmcp adds one to every request; `crate::unmarked` takes it off).
async fn ask(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
    call_had_progress: bool,
) -> Result<ElicitResult, rmcp::ServiceError> {
    use rmcp::model::{ClientResult, GetExtensions as _, ServerRequest};
    let mut request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    if !call_had_progress {
        request
            .extensions_mut()
            .insert(crate::unmarked::NoProgressToken);
    }
    match peer.send_request(request).await? {
        ClientResult::ElicitResult(r) => Ok(r),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}

pub(crate) fn mcp_level(l: LogLevel) -> LoggingLevel {
    match l {
        LogLevel::Debug => LoggingLevel::Debug,
        // Never passed on (it means "no messages"); Info if it were.
        LogLevel::Info | LogLevel::Unspecified => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

pub(crate) fn pipeline_level(l: LoggingLevel) -> LogLevel {
    match l {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}

/// The `elicitation/create` params of a question, or `None` when its
/// schema is not one MCP's types accept (the pipeline's rules are
/// stricter, so this is a bug guard, not a path).
pub(crate) fn elicit_params(q: &Question) -> Option<ElicitRequestParams> {
    serde_json::from_value(serde_json::json!({
        "mode": "form",
        "message": q.message,
        "requestedSchema": q.requested_schema,
    }))
    .ok()
}

/// A client's elicitation result as the pipeline's answer.
pub(crate) fn answer_of(r: ElicitResult) -> Answer {
    Answer {
        action: match r.action {
            ElicitationAction::Accept => AnswerAction::Accept,
            ElicitationAction::Decline => AnswerAction::Decline,
            // Cancel, and any action a later MCP adds: the user did not
            // answer.
            _ => AnswerAction::Cancel,
        },
        content: r.content,
    }
}
