//! A task's call, followed to its end with no request driving it: its
//! progress becomes the task's status message, a question puts the task
//! in `input_required` until `tasks/update` answers it, log messages have
//! no stream to go to, and its end is the task's final state. Revoking
//! the binding that made the task cancels it.

use crate::deliver::{BoxFuture, Delivery, Driven, Route, Stop, drive};
use crate::relay::Running;
use crate::tasks::{Asking, TaskState, Tasks, ended};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::{LogMessage, Progress, Question, Unanswered};

/// A task's side of its call's events.
struct ToTask {
    tasks: Arc<Tasks>,
    id: String,
    /// Questions asked so far: each gets its own input-request key.
    asked: AtomicU32,
}

impl Delivery for ToTask {
    fn progress(&self, update: Progress) -> BoxFuture<'_, ()> {
        let state = TaskState::Working(Some(status_message(&update)));
        self.tasks.update(&self.id, state, Instant::now());
        Box::pin(std::future::ready(()))
    }

    fn log(&self, _message: LogMessage) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn question(&self, question: &Question) -> Route<'_> {
        let Ok(checked) = toolhost_pipeline::check_question(
            question.message.clone(),
            question.requested_schema.clone(),
        ) else {
            return Route::Refused(Unanswered::Failed("the question could not be kept".into()));
        };
        let n = self.asked.fetch_add(1, Ordering::Relaxed) + 1;
        let (reply, answered) = tokio::sync::oneshot::channel();
        let asking = Asking {
            question: Box::new(checked),
            reply,
        };
        match self
            .tasks
            .ask(&self.id, format!("question-{n}"), question.clone(), asking)
        {
            Err(_) => Route::Refused(Unanswered::Failed("the task has ended".into())),
            Ok(()) => Route::Asked(Box::pin(async move {
                answered
                    .await
                    .unwrap_or_else(|_| Err(Unanswered::Failed("the task has ended".into())))
            })),
        }
    }
}

/// A progress update as a status message.
pub(crate) fn status_message(p: &Progress) -> String {
    let amount = match p.total {
        Some(total) => format!("{}/{}", p.progress, total),
        None => format!("{}", p.progress),
    };
    match &p.message {
        Some(m) => format!("{m} ({amount})"),
        None => format!("progress {amount}"),
    }
}

/// Follows task `id`'s call to its end, recording what it sends.
pub(crate) async fn follow(
    tasks: Arc<Tasks>,
    id: String,
    mut running: Running,
    revoked: CancellationToken,
) {
    let to = ToTask {
        tasks: Arc::clone(&tasks),
        id: id.clone(),
        asked: AtomicU32::new(0),
    };
    // Nothing but the revocation stops a task from here: its owner and
    // the operator cancel it through the books, which cancel the call.
    let never = CancellationToken::new();
    let mut revocation_seen = false;
    loop {
        let stop = Stop {
            request: &never,
            gone: None,
        };
        tokio::select! {
            driven = drive(&mut running, &to, stop) => match driven {
                Driven::Done(r) => {
                    tasks.update(&id, ended(Ok(r)), Instant::now());
                    return;
                }
                // A task takes its questions itself: never parked.
                Driven::Park(_, reply) => {
                    let _ = reply.send(Err(Unanswered::Failed("the task cannot park a question".into())));
                }
            },
            () = revoked.cancelled(), if !revocation_seen => {
                revocation_seen = true;
                tracing::info!(task = %id, "task cancelled: the binding that made it was revoked");
                tasks.cancel(None, &id, Instant::now());
                running.cancel.cancel();
            }
        }
    }
}
