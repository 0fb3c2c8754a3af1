//! One tool call as the handler sees it: its arguments and context, its
//! cancellation, and (protocol 2) its way back to the caller: progress,
//! log messages and questions.

use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolhost_proto::contract::DATA_DIR_KEY;
use toolhost_proto::plugin::AgentToolContext;
use toolhost_proto::plugin_v2::{self as wire, plugin_event::Event};

/// MCP's log levels, lowest first (the wire's enum; `Unspecified` is
/// never sent).
pub use toolhost_proto::plugin_v2::LogLevel;

/// A question for the user: a message and flat fields (strings, numbers,
/// integers, booleans, string choices). Build it field by field:
///
/// ```
/// use toolhost_plugin_sdk::Question;
/// let q = Question::new("Delete 3 notes?")
///     .boolean("confirm", "Delete them for good")
///     .required("confirm");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    message: String,
    properties: Map<String, Value>,
    required: Vec<String>,
}

impl Question {
    /// A question with no fields yet (accept or decline alone).
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            properties: Map::new(),
            required: Vec::new(),
        }
    }

    fn field(mut self, name: &str, schema: Value) -> Self {
        self.properties.insert(name.to_owned(), schema);
        self
    }

    /// A yes/no field.
    #[must_use]
    pub fn boolean(self, name: &str, title: &str) -> Self {
        self.field(name, json!({"type": "boolean", "title": title}))
    }

    /// A text field.
    #[must_use]
    pub fn string(self, name: &str, title: &str) -> Self {
        self.field(name, json!({"type": "string", "title": title}))
    }

    /// A whole-number field.
    #[must_use]
    pub fn integer(self, name: &str, title: &str) -> Self {
        self.field(name, json!({"type": "integer", "title": title}))
    }

    /// A number field.
    #[must_use]
    pub fn number(self, name: &str, title: &str) -> Self {
        self.field(name, json!({"type": "number", "title": title}))
    }

    /// A choice among `options`.
    #[must_use]
    pub fn choice(self, name: &str, title: &str, options: &[&str]) -> Self {
        self.field(
            name,
            json!({"type": "string", "title": title, "enum": options}),
        )
    }

    /// A field of your own schema (a flat primitive schema, as MCP
    /// elicitation defines it).
    #[must_use]
    pub fn field_schema(self, name: &str, schema: Map<String, Value>) -> Self {
        self.field(name, Value::Object(schema))
    }

    /// Marks a field as required.
    #[must_use]
    pub fn required(mut self, name: &str) -> Self {
        self.required.push(name.to_owned());
        self
    }

    fn schema(&self) -> Map<String, Value> {
        let mut s = Map::new();
        s.insert("type".into(), json!("object"));
        s.insert("properties".into(), Value::Object(self.properties.clone()));
        if !self.required.is_empty() {
            s.insert("required".into(), json!(self.required));
        }
        s
    }
}

/// The user's answer. toolhost has already checked accepted values
/// against the question's fields.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Answered, with these values.
    Accept(Map<String, Value>),
    /// Said no.
    Decline,
    /// Dismissed the question without choosing.
    Cancel,
}

impl Answer {
    /// Whether the user accepted.
    #[must_use]
    pub fn accepted(&self) -> bool {
        matches!(self, Self::Accept(_))
    }

    /// An accepted boolean field (false otherwise).
    #[must_use]
    pub fn flag(&self, name: &str) -> bool {
        match self {
            Self::Accept(v) => v.get(name).and_then(Value::as_bool).unwrap_or(false),
            _ => false,
        }
    }
}

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// The caller cannot answer questions (or the plugin runs under
    /// protocol 1). toolhost ends the call with an error that says so;
    /// check [`ToolCall::can_ask`] first to take another path.
    #[error("this caller cannot answer questions")]
    CannotAsk,
    /// The call ended (cancelled, or past its deadline) while waiting.
    #[error("the call ended before the question was answered")]
    Ended,
}

/// The protocol-2 side of a call: the event stream to toolhost and the
/// questions waiting for answers.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) events: mpsc::Sender<Result<wire::PluginEvent, tonic::Status>>,
    pub(crate) answers: Mutex<HashMap<u32, oneshot::Sender<wire::Answer>>>,
    pub(crate) next_question: AtomicU32,
    /// Answers received so far: sent with each question, so toolhost can
    /// tell a question asked while another is open, whatever the timing.
    pub(crate) answers_seen: AtomicU32,
    pub(crate) wants_progress: bool,
    pub(crate) log_level: Option<LogLevel>,
    pub(crate) can_ask: bool,
    /// The latest progress update that found the queue full: sent before
    /// anything else goes out, so the last update is never lost.
    pub(crate) pending_progress: Mutex<Option<wire::Progress>>,
}

impl Link {
    pub(crate) fn new(
        events: mpsc::Sender<Result<wire::PluginEvent, tonic::Status>>,
        start: &wire::Start,
    ) -> Self {
        Self {
            events,
            answers: Mutex::new(HashMap::new()),
            next_question: AtomicU32::new(1),
            answers_seen: AtomicU32::new(0),
            wants_progress: start.wants_progress,
            log_level: LogLevel::try_from(start.log_level)
                .ok()
                .filter(|l| *l != LogLevel::Unspecified),
            can_ask: start.can_ask,
            pending_progress: Mutex::new(None),
        }
    }

    /// Queues a progress update without waiting; when the queue is full
    /// the update waits as the pending one (replacing an older pending one).
    fn progress(&self, p: wire::Progress) {
        let Ok(mut pending) = self.pending_progress.lock() else {
            return;
        };
        if let Some(older) = pending.take()
            && let Err(e) = self.events.try_send(Ok(progress_event(older)))
        {
            drop(e);
            *pending = Some(p);
            return;
        }
        if self.events.try_send(Ok(progress_event(p.clone()))).is_err() {
            *pending = Some(p);
        }
    }

    /// Sends the pending progress update, if any, waiting for room: before
    /// a question and before the result.
    pub(crate) async fn flush_progress(&self) {
        let pending = self.pending_progress.lock().ok().and_then(|mut p| p.take());
        if let Some(p) = pending {
            let _ = self.events.send(Ok(progress_event(p))).await;
        }
    }

    fn send_now(&self, event: Event) {
        if let Ok(mut pending) = self.pending_progress.lock()
            && let Some(p) = pending.take()
            && self.events.try_send(Ok(progress_event(p.clone()))).is_err()
        {
            *pending = Some(p);
        }
        // Progress and logs never block a handler: a full queue drops them
        // (toolhost coalesces progress anyway).
        let _ = self
            .events
            .try_send(Ok(wire::PluginEvent { event: Some(event) }));
    }

    /// Delivers an answer to the question waiting for it.
    pub(crate) fn answered(&self, answer: wire::Answer) {
        let waiting = self
            .answers
            .lock()
            .ok()
            .and_then(|mut a| a.remove(&answer.question_id));
        if let Some(tx) = waiting {
            self.answers_seen.fetch_add(1, Ordering::AcqRel);
            let _ = tx.send(answer);
        }
    }
}

/// The data directory the test harness gives (the environment cannot be
/// changed safely in a process that runs threads).
pub(crate) static DATA_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// One tool call, as the handler sees it.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// Unique per call: use it to deduplicate and to correlate logs.
    pub invocation_id: String,
    /// The tool's local name.
    pub name: String,
    /// Arguments, validated by toolhost against the tool's input schema.
    pub arguments: Map<String, Value>,
    /// Who is calling.
    pub context: AgentToolContext,
    /// When toolhost stops waiting for this call, if it said.
    pub deadline: Option<tokio::time::Instant>,
    pub(crate) cancelled: CancellationToken,
    pub(crate) link: Option<Arc<Link>>,
}

impl ToolCall {
    /// Completes when the call is cancelled: the agent cancelled it, its
    /// deadline passed, or toolhost went away. The result of a cancelled call
    /// is discarded, so stop work and return.
    pub async fn cancelled(&self) {
        self.cancelled.cancelled().await;
    }

    /// The token to call `audience` with on the caller's behalf: one the
    /// manifest declares under `[credentials]` and the operator granted,
    /// exchanged by toolhost from the caller's own (which a plugin never
    /// sees). `None` when the caller proved no identity (a static token,
    /// stdio) or the audience was not granted: fall back to a configured
    /// secret, or refuse.
    #[must_use]
    pub fn token_for(&self, audience: &str) -> Option<&str> {
        self.context
            .credentials
            .iter()
            .find(|c| c.audience == audience)
            .map(|c| c.access_token.as_str())
    }

    /// Whether the call has been cancelled.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
    }

    /// The plugin's data directory (from toolhost), if set.
    #[must_use]
    pub fn data_dir() -> Option<PathBuf> {
        DATA_DIR
            .get()
            .cloned()
            .or_else(|| std::env::var_os(DATA_DIR_KEY).map(PathBuf::from))
    }

    /// Whether the caller asked for progress. [`ToolCall::progress`] is
    /// cheap either way; this only spares computing it.
    #[must_use]
    pub fn wants_progress(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.wants_progress)
    }

    /// Reports progress: `progress` must increase from one call to the
    /// next; `total` is where it ends, when known. Never blocks, never
    /// fails; a no-op under protocol 1 or when the caller did not ask.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: impl Into<String>) {
        if let Some(l) = self.link.as_ref().filter(|l| l.wants_progress) {
            l.progress(wire::Progress {
                progress,
                total,
                message: message.into(),
            });
        }
    }

    /// Sends a log message to the caller, if it wants this level. Never
    /// blocks, never fails; toolhost bounds the rate and size.
    pub fn log(&self, level: LogLevel, message: impl Into<String>) {
        self.log_with(level, message, None);
    }

    /// [`ToolCall::log`] with structured detail.
    pub fn log_with(&self, level: LogLevel, message: impl Into<String>, data: Option<Value>) {
        let Some(l) = &self.link else {
            return;
        };
        if level == LogLevel::Unspecified || l.log_level.is_none_or(|min| level < min) {
            return;
        }
        l.send_now(Event::Log(wire::Log {
            level: level.into(),
            message: message.into(),
            data: data.as_ref().map(toolhost_proto::json::value_from_json),
            logger: String::new(),
        }));
    }

    /// Whether the caller can answer a question. When it cannot, asking
    /// ends the call with an error that says so.
    #[must_use]
    pub fn can_ask(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.can_ask)
    }

    /// Asks the user a question and waits for the answer, within the
    /// call's deadline. The answer has been checked against the fields.
    pub async fn ask(&self, question: Question) -> Result<Answer, AskError> {
        let Some(l) = &self.link else {
            return Err(AskError::CannotAsk);
        };
        let id = l.next_question.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut a) = l.answers.lock() {
            a.insert(id, tx);
        }
        l.flush_progress().await;
        let event = wire::PluginEvent {
            event: Some(Event::Question(wire::Question {
                id,
                message: question.message.clone(),
                requested_schema: Some(toolhost_proto::json::struct_from_json(&question.schema())),
                answers_seen: Some(l.answers_seen.load(Ordering::Acquire)),
            })),
        };
        if l.events.send(Ok(event)).await.is_err() {
            return Err(AskError::Ended);
        }
        if !l.can_ask {
            // toolhost ends the call; wait for that rather than race it.
            self.cancelled().await;
            return Err(AskError::CannotAsk);
        }
        let answer = tokio::select! {
            a = rx => a.map_err(|_| AskError::Ended)?,
            () = self.cancelled() => return Err(AskError::Ended),
        };
        Ok(match wire::answer::Action::try_from(answer.action) {
            Ok(wire::answer::Action::Accept) => Answer::Accept(
                answer
                    .content
                    .as_ref()
                    .map(toolhost_proto::json::json_from_struct)
                    .unwrap_or_default(),
            ),
            Ok(wire::answer::Action::Decline) => Answer::Decline,
            _ => Answer::Cancel,
        })
    }
}

fn progress_event(p: wire::Progress) -> wire::PluginEvent {
    wire::PluginEvent {
        event: Some(Event::Progress(p)),
    }
}
