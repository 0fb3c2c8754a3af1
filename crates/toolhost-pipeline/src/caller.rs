//! The caller's side of a protocol-2 call: what it can take, and where the
//! plugin's progress, log messages and questions go.
//!
//! The pipeline checks and bounds everything a plugin sends before it gets
//! here; the MCP layer implements [`Caller`] to deliver it (notifications,
//! `elicitation/create`, or an input-required result) without the pipeline
//! knowing MCP. A protocol-1 call never touches it.

use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;

/// MCP's log levels (syslog's), lowest first: the wire's own enum. Its
/// `Unspecified` means "no messages" and never reaches a [`Caller`].
pub use toolhost_proto::plugin_v2::LogLevel;

/// The level of a wire value; `None` for `Unspecified` and numbers the
/// protocol does not have.
pub(crate) fn level_from_wire(v: i32) -> Option<LogLevel> {
    LogLevel::try_from(v)
        .ok()
        .filter(|l| *l != LogLevel::Unspecified)
}

/// One progress update, already checked (finite, increasing) and bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// How far the call has got; increases from one update to the next.
    pub progress: f64,
    /// The value `progress` will reach, when known.
    pub total: Option<f64>,
    /// A short message for a person.
    pub message: Option<String>,
}

/// One log message for the caller, at or above its level, bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct LogMessage {
    /// Its level.
    pub level: LogLevel,
    /// The component that logged, if the plugin said.
    pub logger: Option<String>,
    /// The text.
    pub message: String,
    /// Structured detail, if any.
    pub data: Option<Value>,
}

/// A question for the user: a message and a flat schema of primitive
/// fields (MCP form elicitation), already checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// What to ask.
    pub message: String,
    /// `{"type": "object", "properties": {...}, "required": [...]}`.
    pub requested_schema: Map<String, Value>,
}

/// What the user chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerAction {
    /// Answered; the content holds the values.
    Accept,
    /// Said no.
    Decline,
    /// Dismissed the question.
    Cancel,
}

/// The user's answer, as the client sent it (the pipeline checks it
/// against the requested schema before the plugin sees it).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// What the user chose.
    pub action: AnswerAction,
    /// For `Accept`: the values.
    pub content: Option<Value>,
}

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    /// The client cannot answer questions (it declared no form
    /// elicitation capability).
    #[error("this client cannot answer questions (it did not declare the elicitation capability)")]
    CannotAsk,
    /// Asking failed: the client went away, refused the request, or too
    /// many questions are waiting. The text names no value.
    #[error("{0}")]
    Failed(String),
}

/// What a protocol-2 plugin sent during one call, for the audit.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EventCounts {
    pub(crate) progress: u32,
    pub(crate) logs: u32,
    pub(crate) logs_dropped: u32,
    pub(crate) questions: u32,
}

/// The future of [`Caller::ask`].
pub type AskFuture<'a> = Pin<Box<dyn Future<Output = Result<Answer, Unanswered>> + Send + 'a>>;

/// Where a protocol-2 call's events go, and what its caller can take.
///
/// `progress` and `log` must not block: they hand the event over and
/// return (an implementation coalesces or drops under pressure). `ask` may
/// wait as long as it likes; the pipeline bounds it by the call's deadline
/// and cancellation.
pub trait Caller: Send + Sync {
    /// Whether the caller asked for progress.
    fn wants_progress(&self) -> bool;
    /// The lowest log level the caller wants; `None`: no log messages.
    fn log_level(&self) -> Option<LogLevel>;
    /// Whether the caller can answer a question.
    fn can_ask(&self) -> bool;
    /// A progress update.
    fn progress(&self, update: Progress);
    /// A log message.
    fn log(&self, message: LogMessage);
    /// Asks the user; resolves with the client's answer.
    fn ask(&self, question: Question) -> AskFuture<'_>;
}

/// A shared caller is a caller: the plugin author's harness keeps its own
/// to read what the call delivered.
impl<T: Caller + ?Sized> Caller for std::sync::Arc<T> {
    fn wants_progress(&self) -> bool {
        (**self).wants_progress()
    }
    fn log_level(&self) -> Option<LogLevel> {
        (**self).log_level()
    }
    fn can_ask(&self) -> bool {
        (**self).can_ask()
    }
    fn progress(&self, update: Progress) {
        (**self).progress(update);
    }
    fn log(&self, message: LogMessage) {
        (**self).log(message);
    }
    fn ask(&self, question: Question) -> AskFuture<'_> {
        (**self).ask(question)
    }
}

/// A caller that takes nothing and cannot answer: progress and logs are
/// dropped, questions end the call. What benchmarks and callers without a
/// session use.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Caller for Silent {
    fn wants_progress(&self) -> bool {
        false
    }
    fn log_level(&self) -> Option<LogLevel> {
        None
    }
    fn can_ask(&self) -> bool {
        false
    }
    fn progress(&self, _update: Progress) {}
    fn log(&self, _message: LogMessage) {}
    fn ask(&self, _question: Question) -> AskFuture<'_> {
        Box::pin(async { Err(Unanswered::CannotAsk) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::descriptor as tool;

    use crate::CallMode;
    use std::time::Duration;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_direct_call_runs_for_its_tool_timeout_within_the_daemons_cap() {
        let direct = |t, task| CallMode::Direct.deadline(&tool(t, task), 10 * SECOND);
        assert_eq!(direct(2_000, None), 2 * SECOND);
        assert_eq!(direct(60_000, None), 10 * SECOND);
        // A task timeout is a task's: a direct call does not take it.
        assert_eq!(direct(2_000, Some(600_000)), 2 * SECOND);
    }

    #[test]
    fn a_task_runs_for_its_task_timeout_within_the_operators_cap_not_max_timeout() {
        let task =
            |t, task| CallMode::Task { cap: 300 * SECOND }.deadline(&tool(t, task), 10 * SECOND);
        assert_eq!(task(2_000, Some(120_000)), 120 * SECOND);
        assert_eq!(task(2_000, Some(900_000)), 300 * SECOND);
        // Without a task timeout, the tool's own timeout.
        assert_eq!(task(2_000, None), 2 * SECOND);
    }

    #[test]
    fn only_the_wires_real_levels_reach_a_caller() {
        assert_eq!(level_from_wire(LogLevel::Unspecified as i32), None);
        assert_eq!(level_from_wire(-1), None);
        assert_eq!(level_from_wire(9_999), None);
        assert_eq!(
            level_from_wire(LogLevel::Warning as i32),
            Some(LogLevel::Warning)
        );
    }

    #[test]
    fn a_silent_caller_takes_nothing_and_cannot_be_asked() {
        let silent = Silent;
        assert!(!silent.wants_progress() && !silent.can_ask());
        assert_eq!(silent.log_level(), None);
    }
}
