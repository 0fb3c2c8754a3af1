//! One `tools/call` as MCP sees it: the pipeline's call plus everything a
//! protocol-2 plugin sends while it runs.
//!
//! The pipeline hands progress, log messages and questions to a [`Relay`]
//! (its [`Caller`]); the request that owns the call drives it
//! ([`drive`]), turning them into MCP messages on that request's own
//! stream:
//!
//! - progress becomes `notifications/progress` with the client's token,
//!   at most one per [`PROGRESS_INTERVAL`]; the latest update waiting when
//!   the result arrives is sent before it;
//! - log messages become `notifications/message`, to this caller only;
//! - a question becomes `elicitation/create` for 2025-era clients, and an
//!   input-required result for 2026-07-28 clients. Those clients answer by
//!   calling the tool again with the answer and the `requestState`; until
//!   then the call waits, still one attempt, in [`Parked`], bounded by its
//!   own deadline.

// rmcp marks logging deprecated (SEP-2577); both protocol eras toolhost
// serves still have `logging/setLevel` and `notifications/message`.
#![allow(deprecated)]

use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::{
    Answer, AnswerAction, AskFuture, CallResult, Caller, LogLevel, LogMessage, Progress, Question,
    Unanswered, UnknownTool,
};

/// At most one progress notification per call per this interval.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);
/// Log messages waiting to be sent, per call; more are dropped.
const LOG_QUEUE: usize = 64;
/// Calls waiting for an answer, per owner and in all.
const MAX_PARKED_PER_OWNER: usize = 64;
const MAX_PARKED: usize = 4096;
/// The input-request key of a question in an input-required result.
pub(crate) const QUESTION_KEY: &str = "question";

/// The answer channel of one question.
pub(crate) type Reply = oneshot::Sender<Result<Answer, Unanswered>>;

/// What the plugin has sent that the driving request has not taken yet.
/// One lock and one wake-up for all three kinds: a call to a plugin that
/// sends none of them (every protocol-1 call) costs one small allocation,
/// not three channels.
#[derive(Default)]
pub(crate) struct Pending {
    /// The latest progress update; only the latest matters.
    pub(crate) progress: Option<Progress>,
    /// `progress` changed since the driver last looked.
    pub(crate) progress_new: bool,
    /// At most [`LOG_QUEUE`]; more are dropped.
    pub(crate) logs: VecDeque<LogMessage>,
    /// At most one question is out at a time.
    pub(crate) question: Option<(Question, Reply)>,
    /// The driving side is gone: nothing will be delivered.
    closed: bool,
}

/// Shared by a call's [`Relay`] and its [`Events`].
#[derive(Default)]
pub(crate) struct Shared {
    pending: Mutex<Pending>,
    /// Wakes the driver when something arrives. A wake-up with nobody
    /// waiting is kept, so none is lost between two looks.
    pub(crate) arrived: Notify,
}

impl Shared {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The pipeline's side of a call's events.
pub(crate) struct Relay {
    wants_progress: bool,
    log_level: Option<LogLevel>,
    can_ask: bool,
    shared: Arc<Shared>,
    /// Set when the call is to run as a task.
    task: Option<TaskHook>,
}

/// What makes a call a task: the place it holds among the tasks, turned
/// into the task when the pipeline admits the call.
pub(crate) struct TaskPlan {
    pub(crate) place: crate::tasks::Place,
    /// The tool's exposed name.
    pub(crate) tool: String,
    /// How long the task may run: the tool's timeout within the cap.
    pub(crate) lifetime: Duration,
    /// The operator's cap on a task's lifetime.
    pub(crate) cap: Duration,
}

/// A [`TaskPlan`] on its way through the pipeline.
struct TaskHook {
    plan: Mutex<Option<TaskPlan>>,
    cap: Duration,
    cancel: CancellationToken,
    id: std::sync::OnceLock<String>,
    admitted: Mutex<Option<oneshot::Sender<String>>>,
}

impl TaskHook {
    fn admit(&self) -> Result<(), String> {
        let plan = self
            .plan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .ok_or_else(|| "the task was already created".to_owned())?;
        let id = plan
            .place
            .create(&plan.tool, self.cancel.clone(), plan.lifetime)
            .map_err(|e| e.to_string())?;
        let _ = self.id.set(id.clone());
        if let Some(tx) = self
            .admitted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = tx.send(id);
        }
        Ok(())
    }
}

/// The driving request's side of a call's events.
pub(crate) struct Events {
    pub(crate) shared: Arc<Shared>,
    /// The progress value of the last notification sent.
    sent: Option<f64>,
}

impl Drop for Events {
    fn drop(&mut self) {
        // A question nobody will deliver is abandoned now (its asker learns
        // at once), and later ones are refused.
        let question = {
            let mut p = self.shared.lock();
            p.closed = true;
            p.question.take()
        };
        drop(question);
    }
}

/// What the caller can take, read from the request that started the call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wants {
    pub(crate) progress: bool,
    pub(crate) log_level: Option<LogLevel>,
    pub(crate) can_ask: bool,
}

impl Relay {
    pub(crate) fn new(wants: Wants) -> (Self, Events) {
        let shared = Arc::new(Shared::default());
        (
            Self {
                wants_progress: wants.progress,
                log_level: wants.log_level,
                can_ask: wants.can_ask,
                shared: Arc::clone(&shared),
                task: None,
            },
            Events { shared, sent: None },
        )
    }
}

impl Caller for Relay {
    /// A task's status message is its plugin's latest progress, whether or
    /// not the client sent a progress token (the Tasks extension gives it
    /// no reason to).
    fn wants_progress(&self) -> bool {
        self.wants_progress || self.task.is_some()
    }
    fn log_level(&self) -> Option<LogLevel> {
        self.log_level
    }
    fn can_ask(&self) -> bool {
        self.can_ask
    }
    fn progress(&self, update: Progress) {
        // Latest wins: the driver coalesces.
        {
            let mut p = self.shared.lock();
            p.progress = Some(update);
            p.progress_new = true;
        }
        self.shared.arrived.notify_one();
    }
    fn log(&self, message: LogMessage) {
        // A full queue drops: a slow client never holds up the plugin. So
        // does a gone one: nothing would deliver the message, so nothing
        // holds it for the rest of the call.
        {
            let mut p = self.shared.lock();
            if p.closed || p.logs.len() >= LOG_QUEUE {
                return;
            }
            p.logs.push_back(message);
        }
        self.shared.arrived.notify_one();
    }
    fn task_lifetime_cap(&self) -> Option<Duration> {
        self.task.as_ref().map(|t| t.cap)
    }
    fn admitted(&self) -> Result<(), String> {
        self.task.as_ref().map_or(Ok(()), TaskHook::admit)
    }
    fn task_id(&self) -> Option<String> {
        self.task.as_ref().and_then(|t| t.id.get().cloned())
    }
    fn ask(&self, question: Question) -> AskFuture<'_> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            {
                let mut p = self.shared.lock();
                if p.closed {
                    return Err(Unanswered::Failed("the caller went away".into()));
                }
                if p.question.is_some() {
                    return Err(Unanswered::Failed(
                        "a question is already waiting for its answer".into(),
                    ));
                }
                p.question = Some((question, reply));
            }
            self.shared.arrived.notify_one();
            answer
                .await
                .map_err(|_| Unanswered::Failed("the question was abandoned".into()))?
        })
    }
}

/// A call in progress, owned by whichever request drives it now.
pub(crate) struct Running {
    pub(crate) call: Pin<Box<dyn Future<Output = Result<CallResult, UnknownTool>> + Send>>,
    pub(crate) events: Events,
    /// Cancels the pipeline's call.
    pub(crate) cancel: CancellationToken,
    /// A bound past which the call has surely ended by itself (its
    /// deadline is shorter): how long a parked entry is kept.
    pub(crate) expires: Instant,
    /// The call's own task, once detached.
    pub(crate) task: Option<tokio::task::AbortHandle>,
    /// For a call run as a task: the task's id, once the pipeline has
    /// admitted the call. Dropped unsent if the call ended before.
    pub(crate) admitted: Option<oneshot::Receiver<String>>,
}

impl Running {
    /// Moves the call onto its own task, so it keeps running (and its
    /// deadline keeps counting) with no request driving it.
    pub(crate) fn detach(&mut self) {
        let call = std::mem::replace(&mut self.call, Box::pin(std::future::pending()));
        let task = tokio::spawn(call);
        self.task = Some(task.abort_handle());
        self.call = Box::pin(async move {
            match task.await {
                Ok(r) => r,
                Err(_) => Ok(CallResult::failure(
                    toolhost_pipeline::ErrorCode::Internal,
                    "the call's task failed",
                    None,
                )),
            }
        });
    }
}

/// Starts one call through the pipeline, not yet driven: what every path
/// into a tool call (a session's, a 2026-07-28 request's, a plain
/// stateless one's) shares.
///
/// `find_tool` is the built-in find tool's name when it is served: a call
/// of it is answered here, at once, without the pipeline.
pub(crate) fn start(
    pipeline: &Arc<toolhost_pipeline::Pipeline>,
    find_tool: Option<&str>,
    binding: toolhost_pipeline::Binding,
    name: &str,
    arguments: Option<Value>,
    wants: Wants,
    task: Option<TaskPlan>,
) -> Running {
    let (mut relay, events) = Relay::new(wants);
    let cancel = CancellationToken::new();
    let mut admitted = None;
    if let Some(plan) = task {
        let (tx, rx) = oneshot::channel();
        admitted = Some(rx);
        relay.task = Some(TaskHook {
            cap: plan.cap,
            plan: Mutex::new(Some(plan)),
            cancel: cancel.clone(),
            id: std::sync::OnceLock::new(),
            admitted: Mutex::new(Some(tx)),
        });
    }
    let pipeline = Arc::clone(pipeline);
    if find_tool == Some(name) {
        let answer = crate::find::run(&pipeline.store().current(), &binding, name, arguments);
        return Running {
            call: Box::pin(std::future::ready(Ok(answer))),
            events,
            cancel,
            expires: Instant::now() + Duration::from_secs(5),
            task: None,
            admitted,
        };
    }
    let owned_name = name.to_owned();
    let call_cancel = cancel.clone();
    let longest = relay
        .task
        .as_ref()
        .map_or_else(|| pipeline.max_timeout(), |t| t.cap);
    let expires = Instant::now() + longest + Duration::from_secs(5);
    let call = async move {
        pipeline
            .call_for(&binding, &owned_name, arguments, &relay, call_cancel)
            .await
    };
    // The call may outlive the request (a detached call, a task): it keeps
    // the request's trace context, so its spans stay in the request's trace.
    let call: Pin<Box<dyn Future<Output = Result<CallResult, UnknownTool>> + Send>> =
        if toolhost_telemetry::enabled() {
            use toolhost_telemetry::FutureExt as _;
            Box::pin(call.with_context(toolhost_telemetry::Context::current()))
        } else {
            Box::pin(call)
        };
    Running {
        call,
        events,
        cancel,
        expires,
        task: None,
        admitted,
    }
}

/// Where one driving request sends the call's notifications.
pub(crate) struct Outlet<'a> {
    /// `None` where nothing can reach the client before the result (a
    /// plain stateless call): notifications are then dropped.
    pub(crate) peer: Option<&'a Peer<RoleServer>>,
    pub(crate) progress_token: Option<ProgressToken>,
}

/// What ends a driving request's interest in its call: the request's own
/// cancellation, or (HTTP) its client going away.
pub(crate) struct Stop<'a> {
    pub(crate) request: &'a CancellationToken,
    pub(crate) gone: Option<CancellationToken>,
}

impl Stop<'_> {
    /// Completes when either fires.
    pub(crate) async fn cancelled(&self) {
        match &self.gone {
            Some(gone) => {
                tokio::select! {
                    () = self.request.cancelled() => {}
                    () = gone.cancelled() => {}
                }
            }
            None => self.request.cancelled().await,
        }
    }
}

/// How driving ended.
pub(crate) enum Driven {
    /// The call finished.
    Done(Result<CallResult, UnknownTool>),
    /// The plugin asked a question; the call waits for `reply`.
    Asking(Question, Reply),
}

/// Drives the call until it ends or asks a question, sending its progress
/// and log messages through `out`. `stop` (the request's cancellation or
/// the client going away) cancels the call, which then ends as cancelled.
pub(crate) async fn drive(running: &mut Running, out: &Outlet<'_>, stop: &Stop<'_>) -> Driven {
    let mut last_sent: Option<Instant> = None;
    let mut pending_progress = false;
    let shared = Arc::clone(&running.events.shared);
    loop {
        let next_progress = last_sent.map_or_else(Instant::now, |t| t + PROGRESS_INTERVAL);
        tokio::select! {
            biased;
            r = &mut running.call => {
                // Whatever is still queued goes out before the result, in
                // order: log messages, then the last progress update. (The
                // relay is gone with the call, so compare the last update
                // with what was sent.)
                let logs = std::mem::take(&mut shared.lock().logs);
                for m in logs {
                    send_log(m, out).await;
                }
                flush_progress(&mut running.events, out).await;
                return Driven::Done(r);
            }
            () = stop.cancelled(), if !running.cancel.is_cancelled() => running.cancel.cancel(),
            () = shared.arrived.notified() => {
                let (logs, question, progress_new) = {
                    let mut p = shared.lock();
                    let new = std::mem::take(&mut p.progress_new);
                    (std::mem::take(&mut p.logs), p.question.take(), new)
                };
                for m in logs {
                    send_log(m, out).await;
                }
                if let Some((q, reply)) = question {
                    flush_progress(&mut running.events, out).await;
                    return Driven::Asking(q, reply);
                }
                if progress_new && !pending_progress {
                    if Instant::now() >= next_progress {
                        send_progress(&mut running.events, out).await;
                        last_sent = Some(Instant::now());
                    } else {
                        pending_progress = true;
                    }
                }
            }
            () = tokio::time::sleep_until(next_progress.into()), if pending_progress => {
                send_progress(&mut running.events, out).await;
                last_sent = Some(Instant::now());
                pending_progress = false;
            }
        }
    }
}

/// Sends the latest update if it has not been sent yet.
async fn flush_progress(events: &mut Events, out: &Outlet<'_>) {
    let unsent = events
        .shared
        .lock()
        .progress
        .as_ref()
        .is_some_and(|p| Some(p.progress) != events.sent);
    if unsent {
        send_progress(events, out).await;
    }
}

async fn send_progress(events: &mut Events, out: &Outlet<'_>) {
    let latest = {
        let mut p = events.shared.lock();
        p.progress_new = false;
        p.progress.clone()
    };
    let (Some(p), Some(token)) = (latest, out.progress_token.clone()) else {
        return;
    };
    events.sent = Some(p.progress);
    let mut param = ProgressNotificationParam::new(token, p.progress);
    param.total = p.total;
    param.message = p.message;
    if let Some(peer) = out.peer {
        let _ = peer.notify_progress(param).await;
    }
}

async fn send_log(m: LogMessage, out: &Outlet<'_>) {
    let Some(peer) = out.peer else {
        return;
    };
    let data = match m.data {
        Some(d) => serde_json::json!({ "message": m.message, "data": d }),
        None => Value::String(m.message),
    };
    let mut param = LoggingMessageNotificationParam::new(mcp_level(m.level), data);
    param.logger = m.logger;
    let _ = peer.notify_logging_message(param).await;
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

/// A call waiting for a 2026-07-28 client to answer its question.
pub(crate) struct Waiting {
    pub(crate) owner: crate::tokens::Owner,
    pub(crate) tool: String,
    pub(crate) running: Running,
    pub(crate) reply: Reply,
}

/// Calls waiting for an answer, by the opaque `requestState` handed to
/// the client. The handle is 128 random bits and names state kept here;
/// the client's copy carries nothing else, so it cannot be forged into
/// anything but an unknown handle.
#[derive(Default)]
pub(crate) struct Parked {
    calls: Mutex<HashMap<String, Waiting>>,
}

/// Why a call could not be parked.
/// Why a call could not be parked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotParked {
    /// The caps on parked calls, in all and per owner.
    #[error("too many calls are waiting for answers to questions; answer those first")]
    TooMany,
    /// No handle could be made that nobody could guess.
    #[error(
        "the question cannot be delivered: toolhost could not make a handle for it (the system's random number generator failed)"
    )]
    NoRandomness,
}

impl Parked {
    /// Parks a call; returns its handle.
    pub(crate) fn park(&self, w: Waiting) -> Result<String, Box<(NotParked, Waiting)>> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        // Calls past their deadline have ended by themselves; forget them.
        calls.retain(|_, c| c.running.expires > now);
        let mine = calls.values().filter(|c| c.owner == w.owner).count();
        if calls.len() >= MAX_PARKED || mine >= MAX_PARKED_PER_OWNER {
            return Err(Box::new((NotParked::TooMany, w)));
        }
        let Ok(handle) = toolhost_runtime::ids::unguessable_id() else {
            return Err(Box::new((NotParked::NoRandomness, w)));
        };
        calls.insert(handle.clone(), w);
        Ok(handle)
    }

    /// Takes the call parked under `handle`, if `owner` parked it for
    /// `tool`. Anything else looks like an unknown handle.
    pub(crate) fn take(
        &self,
        handle: &str,
        owner: &crate::tokens::Owner,
        tool: &str,
    ) -> Option<Waiting> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match calls.get(handle) {
            Some(w) if w.owner == *owner && w.tool == tool => calls.remove(handle),
            _ => None,
        }
    }

    /// Puts a taken call back under the same handle (its answer was
    /// malformed, and the client may send it again).
    pub(crate) fn put_back(&self, handle: String, w: Waiting) {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.insert(handle, w);
    }

    /// Calls still waiting for an answer now (for metrics). An entry whose
    /// call has ended by itself is kept until it expires, so a late answer
    /// learns how the call ended, but it waits for nothing.
    pub(crate) fn len(&self) -> usize {
        self.calls.lock().map_or(0, |c| {
            c.values()
                .filter(|w| w.running.task.as_ref().is_none_or(|t| !t.is_finished()))
                .count()
        })
    }
}

#[cfg(test)]
mod tests {
    //! The relay as a hostile plugin plays it: more events than anyone
    //! takes, a second question while one is out, events after the caller
    //! has gone.

    use super::*;
    use toolhost_pipeline::LogLevel;

    fn relay() -> (Relay, Events) {
        Relay::new(Wants {
            progress: true,
            log_level: Some(LogLevel::Debug),
            can_ask: true,
        })
    }

    fn log(n: usize) -> LogMessage {
        LogMessage {
            level: LogLevel::Info,
            logger: None,
            message: format!("message {n}"),
            data: None,
        }
    }

    fn question() -> Question {
        Question {
            message: "which?".into(),
            requested_schema: serde_json::Map::new(),
        }
    }

    #[test]
    fn a_log_flood_is_held_to_the_queue_and_progress_to_the_latest() {
        let (relay, events) = relay();
        for n in 0..10_000 {
            relay.log(log(n));
            relay.progress(Progress {
                progress: n as f64,
                total: None,
                message: None,
            });
        }
        let p = events.shared.lock();
        assert_eq!(p.logs.len(), LOG_QUEUE);
        assert_eq!(p.progress.as_ref().map(|p| p.progress), Some(9_999.0));
    }

    #[tokio::test]
    async fn a_second_question_while_one_is_out_is_refused() {
        let (relay, events) = relay();
        let mut waiting = relay.ask(question());
        assert!(
            futures_poll_once(&mut waiting).await.is_none(),
            "the first question waits for its answer"
        );
        let second = relay.ask(question()).await;
        assert!(
            matches!(second, Err(Unanswered::Failed(ref m)) if m.contains("already waiting")),
            "{second:?}"
        );
        drop(events);
        assert!(matches!(waiting.await, Err(Unanswered::Failed(_))));
    }

    #[tokio::test]
    async fn after_the_caller_goes_nothing_is_held_and_questions_fail_at_once() {
        let (relay, events) = relay();
        let shared = Arc::clone(&events.shared);
        drop(events);
        for n in 0..100 {
            relay.log(log(n));
        }
        assert!(shared.lock().logs.is_empty());
        let answer = tokio::time::timeout(Duration::from_secs(5), relay.ask(question())).await;
        assert!(
            matches!(answer, Ok(Err(Unanswered::Failed(ref m))) if m.contains("went away")),
            "{answer:?}"
        );
    }

    /// Polls a future once: `Some` if it finished.
    async fn futures_poll_once<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match Pin::new(&mut *f).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
