//! The pipeline's side of a call's events, and the call itself while it
//! runs.
//!
//! The pipeline hands a protocol-2 plugin's progress, log messages and
//! questions to a [`Relay`] (its [`Caller`]); whoever drives the call (the
//! host, on behalf of a session, a plain request or a task) takes them
//! from the call's [`Events`]. Between the two is one lock and one
//! wake-up ([`Shared`]): a call whose plugin sends none of them (every
//! protocol-1 call) costs one small allocation, not three channels.

use crate::reply::Reply;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::{
    AskFuture, CallResult, Caller, LogLevel, LogMessage, Progress, Question, Unanswered,
};

/// Log messages waiting to be sent, per call; more are dropped.
const LOG_QUEUE: usize = 64;

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
    /// The call runs as a task, whose status message is its progress.
    task: bool,
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

/// The driving request's side of a call's events.
pub(crate) struct Events {
    pub(crate) shared: Arc<Shared>,
    /// The progress value of the last update delivered.
    pub(crate) sent: Option<f64>,
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
pub struct Wants {
    /// It asked for progress (it sent a progress token).
    pub progress: bool,
    /// The lowest level of log message it wants; `None`: none.
    pub log_level: Option<LogLevel>,
    /// It can answer a question.
    pub can_ask: bool,
}

impl Relay {
    pub(crate) fn new(wants: Wants, task: bool) -> (Self, Events) {
        let shared = Arc::new(Shared::default());
        (
            Self {
                wants_progress: wants.progress,
                log_level: wants.log_level,
                can_ask: wants.can_ask,
                shared: Arc::clone(&shared),
                task,
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
        self.wants_progress || self.task
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

/// A call's run through the pipeline, from admission to its result.
pub type CallFuture = Pin<Box<dyn Future<Output = CallResult> + Send>>;

/// A call in progress, owned by whichever request drives it now.
pub(crate) struct Running {
    pub(crate) call: CallFuture,
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
            task.await.unwrap_or_else(|_| {
                CallResult::failure(
                    toolhost_pipeline::ErrorCode::Internal,
                    "the call's task failed",
                    None,
                )
            })
        });
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
        Relay::new(
            Wants {
                progress: true,
                log_level: Some(LogLevel::Debug),
                can_ask: true,
            },
            false,
        )
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
