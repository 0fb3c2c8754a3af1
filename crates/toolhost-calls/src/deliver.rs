//! How a call's events reach its caller: one trait, [`Delivery`], and one
//! loop that drives a call through it ([`drive`]).
//!
//! - progress reaches the delivery at most once per [`PROGRESS_INTERVAL`];
//!   the latest update waiting when the result arrives is delivered before
//!   it;
//! - log messages are delivered in order, before the result;
//! - a question is routed as the caller takes questions ([`Route`]):
//!   asked now while the call goes on (a 2025-era session's
//!   `elicitation/create`, a task's `tasks/update`), parked until another
//!   request answers it (a 2026-07-28 client's input-required result), or
//!   refused (a client that cannot answer).

use crate::relay::{Events, Running};
use crate::reply::Reply;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::{Answer, CallResult, LogMessage, Progress, Question, Unanswered};

/// At most one progress update per call per this interval.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// A boxed future, as the trait's methods return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where one caller's events go: a session's stream, nowhere (a plain
/// stateless call), or a task's state.
pub trait Delivery: Send + Sync {
    /// A progress update (already coalesced).
    fn progress(&self, update: Progress) -> BoxFuture<'_, ()>;
    /// A log message for the caller.
    fn log(&self, message: LogMessage) -> BoxFuture<'_, ()>;
    /// How the caller takes this question.
    fn question(&self, question: &Question) -> Route<'_>;
}

/// How a question reaches a caller.
pub enum Route<'a> {
    /// Asked now; the answer comes from this future while the call goes
    /// on delivering its progress and logs.
    Asked(BoxFuture<'a, Result<Answer, Unanswered>>),
    /// Parked: the request driving the call ends with the question, and
    /// a later request answers it.
    Park,
    /// Not asked: the call's question fails with this.
    Refused(Unanswered),
}

/// What ends a driving request's interest in its call: the request's own
/// cancellation, or (HTTP) its client going away.
#[derive(Debug, Clone, Copy)]
pub struct Stop<'a> {
    /// The request's cancellation.
    pub request: &'a CancellationToken,
    /// Its client going away, where the transport can tell.
    pub gone: Option<&'a CancellationToken>,
}

impl Stop<'_> {
    /// Completes when either fires.
    pub async fn cancelled(&self) {
        match self.gone {
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
    Done(CallResult),
    /// The plugin asked a question the caller takes later; the call waits
    /// for `Reply`.
    Park(Question, Reply),
}

/// A question out to the caller, and where its answer goes.
type Asking<'a> = (BoxFuture<'a, Result<Answer, Unanswered>>, Reply);

/// Drives the call until it ends or parks a question, delivering its
/// progress and log messages. `stop` cancels the call, which then ends as
/// cancelled.
pub(crate) async fn drive(running: &mut Running, to: &dyn Delivery, stop: Stop<'_>) -> Driven {
    let mut last_sent: Option<Instant> = None;
    let mut pending_progress = false;
    let mut asking: Option<Asking<'_>> = None;
    let shared = Arc::clone(&running.events.shared);
    loop {
        let next_progress = last_sent.map_or_else(Instant::now, |t| t + PROGRESS_INTERVAL);
        tokio::select! {
            biased;
            r = &mut running.call => {
                // Whatever is still queued goes out before the result, in
                // order: log messages, then the last progress update.
                let logs = std::mem::take(&mut shared.lock().logs);
                for m in logs {
                    to.log(m).await;
                }
                flush_progress(&mut running.events, to).await;
                return Driven::Done(r);
            }
            () = stop.cancelled(), if !running.cancel.is_cancelled() => running.cancel.cancel(),
            answer = async {
                match asking.as_mut() {
                    Some((answer, _)) => Some(answer.await),
                    None => None,
                }
            }, if asking.is_some() => {
                if let (Some(answer), Some((_, reply))) = (answer, asking.take()) {
                    let _ = reply.send(answer);
                }
            }
            () = shared.arrived.notified() => {
                let (logs, question, progress_new) = {
                    let mut p = shared.lock();
                    let new = std::mem::take(&mut p.progress_new);
                    (std::mem::take(&mut p.logs), p.question.take(), new)
                };
                for m in logs {
                    to.log(m).await;
                }
                if let Some((q, reply)) = question {
                    flush_progress(&mut running.events, to).await;
                    match to.question(&q) {
                        Route::Asked(answer) => asking = Some((answer, reply)),
                        Route::Park => return Driven::Park(q, reply),
                        Route::Refused(why) => {
                            let _ = reply.send(Err(why));
                        }
                    }
                }
                if progress_new && !pending_progress {
                    if Instant::now() >= next_progress {
                        send_progress(&mut running.events, to).await;
                        last_sent = Some(Instant::now());
                    } else {
                        pending_progress = true;
                    }
                }
            }
            () = tokio::time::sleep_until(next_progress.into()), if pending_progress => {
                send_progress(&mut running.events, to).await;
                last_sent = Some(Instant::now());
                pending_progress = false;
            }
        }
    }
}

/// Delivers the latest update if it has not been delivered yet.
async fn flush_progress(events: &mut Events, to: &dyn Delivery) {
    let unsent = events
        .shared
        .lock()
        .progress
        .as_ref()
        .is_some_and(|p| Some(p.progress) != events.sent);
    if unsent {
        send_progress(events, to).await;
    }
}

async fn send_progress(events: &mut Events, to: &dyn Delivery) {
    let latest = {
        let mut p = events.shared.lock();
        p.progress_new = false;
        p.progress.clone()
    };
    if let Some(p) = latest {
        events.sent = Some(p.progress);
        to.progress(p).await;
    }
}
