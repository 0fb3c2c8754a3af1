//! One way through a call, whoever asked for it.
//!
//! [`CallHost::call`] takes a binding, a tool name, arguments and a
//! [`Delivery`]; it looks the tool up once, decides whether the call runs
//! directly or as a task, runs the pipeline, and delivers what the plugin
//! sends through the delivery: a session's stream, nothing (a plain
//! stateless call), or a task's state. The MCP handler, the direct
//! stateless path and the task requests are adapters over it.
//!
//! A call is one attempt from here on. Whatever becomes of the request
//! that started it (answered, parked with a question, dropped by its
//! connection), the call runs to its end exactly once: a call whose
//! driver goes away mid-way is cancelled and finishes on its own task, so
//! its plugin is told, its slot freed and its audit event written.

use crate::callers::{Owner, task_owner};
use crate::deliver::{Delivery, Driven, Stop, drive};
use crate::parked::{NotTaken, Parked, Waiting};
use crate::port::{Admission, Builtin, CallPipeline};
use crate::relay::{Relay, Running, TaskPlan, Wants};
use crate::tasks::{TaskRefused, TaskState, TaskView, Tasks, ended};
use serde_json::Value;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use toolhost_catalog::Entry;
use toolhost_pipeline::{
    Answer, Binding, CallMode, CallResult, ErrorCode, Found, Question, Resolution, Unanswered,
    UnknownTool, arguments_digest,
};

/// How long past its longest deadline a call is surely over.
const SLACK: Duration = Duration::from_secs(5);

/// A call to host.
#[derive(Debug)]
pub struct CallRequest {
    /// Who calls, and for what (shared with the token table or the
    /// session, not copied per call).
    pub binding: Arc<Binding>,
    /// The tool's exposed name, as the agent gave it.
    pub name: String,
    /// The arguments, as the agent gave them.
    pub arguments: Option<Value>,
    /// What the caller can take.
    pub wants: Wants,
    /// Whose quota a parked call or a task counts against: the token's
    /// digest, or the process's (stdio).
    pub owner: Owner,
    /// Whether the call may run as a task.
    pub tasks: TaskOffer,
}

/// Whether a caller can take a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOffer {
    /// Tasks are not part of this caller's protocol (the 2025 era, a
    /// plain stateless call): every call is direct.
    NotOffered,
    /// The protocol has tasks; `declared` says whether this caller
    /// declared the extension.
    Offered {
        /// The caller declared the Tasks extension.
        declared: bool,
    },
}

/// What became of a hosted call, for the request that asked.
#[derive(Debug)]
pub enum Hosted {
    /// The call finished (or the name resolved to no tool).
    Done(Result<CallResult, UnknownTool>),
    /// The plugin asked a question this caller answers in a later
    /// request: the call waits under `handle`.
    Parked {
        /// The call's handle (the client's `requestState`).
        handle: String,
        /// What the plugin asked.
        question: Question,
    },
    /// The call runs as a task, created once the pipeline admitted it.
    Task(TaskView),
    /// The tool runs only as a task, and this caller declared none.
    NeedsTasks,
    /// No task could be made: the caps, or no randomness for an id.
    TaskRefused(TaskRefused),
    /// The request was cancelled while its task was being created: the
    /// task exists, and ended as its call did.
    CancelledAtCreation,
}

/// How a call runs, decided from its tool's declaration.
enum Mode {
    Direct,
    Task(Duration),
    NeedsTasks,
}

/// The call host: the pipeline, the calls parked on a question, the
/// tasks, and the built-in tool, if any.
pub struct CallHost {
    pipeline: Arc<dyn CallPipeline>,
    builtin: OnceLock<Arc<dyn Builtin>>,
    parked: Parked,
    tasks: Arc<Tasks>,
}

impl std::fmt::Debug for CallHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallHost")
            .field("parked", &self.parked_len())
            .finish_non_exhaustive()
    }
}

impl CallHost {
    /// A host over `pipeline`, keeping its tasks' books in `tasks`.
    #[must_use]
    pub fn new(pipeline: Arc<dyn CallPipeline>, tasks: Arc<Tasks>) -> Self {
        Self {
            pipeline,
            builtin: OnceLock::new(),
            parked: Parked::default(),
            tasks,
        }
    }

    /// Answers calls of `builtin`'s tool itself (set once, at start).
    pub fn set_builtin(&self, builtin: Arc<dyn Builtin>) {
        let _ = self.builtin.set(builtin);
    }

    /// The tasks' books.
    #[must_use]
    pub fn tasks(&self) -> &Arc<Tasks> {
        &self.tasks
    }

    /// Calls waiting for an answer now (for the metrics).
    #[must_use]
    pub fn parked_len(&self) -> usize {
        self.parked.len()
    }

    /// Hosts one call: the built-in tool is answered at once; any other
    /// name is resolved once, then run directly (delivering through `to`,
    /// cancelled by `stop`) or as a task.
    pub async fn call(&self, request: CallRequest, to: &dyn Delivery, stop: Stop<'_>) -> Hosted {
        if let Some(builtin) = self.builtin.get().filter(|b| b.claims(&request.name)) {
            let answer = builtin.answer(&request.binding, &request.name, request.arguments);
            return Hosted::Done(Ok(answer));
        }
        let found = match self.pipeline.resolve(&request.binding, &request.name) {
            Resolution::Found(found) => found,
            Resolution::Answered(answer) => return Hosted::Done(answer),
        };
        match self.mode(found.entry(), request.tasks) {
            Mode::NeedsTasks => Hosted::NeedsTasks,
            // Boxed: a task's start is a large future, and the direct
            // calls beside it should not carry its size (BENCHMARKS.md).
            Mode::Task(lifetime) => Box::pin(self.start_task(request, found, lifetime, stop)).await,
            Mode::Direct => {
                let (owner, tool) = (request.owner, request.name.clone());
                let arguments = arguments_digest(&request.arguments.as_ref());
                let running = self.start(request, found, None);
                self.drive_call(running, (owner, tool, arguments), to, stop)
                    .await
            }
        }
    }

    /// Takes the call parked under `handle`, if `owner` parked it for
    /// `tool`; anything else looks like an unknown handle.
    pub fn take_parked(
        &self,
        handle: &str,
        owner: &Owner,
        tool: &str,
        arguments: Option<&Value>,
    ) -> Result<Waiting, NotTaken> {
        let digest = arguments_digest(&arguments);
        self.parked.take(handle, owner, tool, &digest)
    }

    /// Puts a taken call back under its handle (its answer was
    /// malformed; the client may send it again).
    pub fn put_back(&self, handle: String, waiting: Waiting) {
        self.parked.put_back(handle, waiting);
    }

    /// Gives a parked call its answer and drives it on from this request.
    /// A binding revoked meanwhile cancels the call instead.
    pub async fn resume(
        &self,
        waiting: Waiting,
        answer: Answer,
        binding_active: bool,
        to: &dyn Delivery,
        stop: Stop<'_>,
    ) -> Hosted {
        let Waiting {
            owner,
            tool,
            arguments,
            running,
            reply,
        } = waiting;
        if !binding_active {
            running.cancel.cancel();
        }
        let _ = reply.send(Ok(answer));
        self.drive_call(running, (owner, tool, arguments), to, stop)
            .await
    }

    fn mode(&self, entry: &Entry, offer: TaskOffer) -> Mode {
        let d = &entry.descriptor;
        match offer {
            TaskOffer::NotOffered => Mode::Direct,
            TaskOffer::Offered { declared } if declared && d.task.allows_task() => {
                let cap = self.tasks.limits().max_lifetime;
                let declared = d.task_timeout_ms.unwrap_or(d.timeout_ms);
                Mode::Task(Duration::from_millis(u64::from(declared)).min(cap))
            }
            TaskOffer::Offered { .. } if !d.task.allows_direct() => Mode::NeedsTasks,
            TaskOffer::Offered { .. } => Mode::Direct,
        }
    }

    /// Starts the pipeline's call, not yet driven: admission, then (for a
    /// task) the task made from `plan`'s place, then the rest of the call.
    fn start(&self, request: CallRequest, found: Found, plan: Option<TaskPlan>) -> Running {
        let (relay, events) = Relay::new(request.wants, plan.is_some());
        let cancel = CancellationToken::new();
        let (mode, longest) = match &plan {
            Some(p) => (CallMode::Task { cap: p.cap }, p.cap),
            None => (CallMode::Direct, self.pipeline.max_timeout()),
        };
        let expires = Instant::now() + longest + SLACK;
        let (admitted_tx, admitted_rx) = match plan {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let pipeline = Arc::clone(&self.pipeline);
        let (binding, arguments, call_cancel) =
            (request.binding, request.arguments, cancel.clone());
        let call: crate::relay::CallFuture = Box::pin(async move {
            let admission = pipeline
                .admit(
                    &binding,
                    &found,
                    arguments,
                    &relay,
                    call_cancel.clone(),
                    mode,
                )
                .await;
            let admitted = match admission {
                Admission::Done(r) => return r,
                Admission::Admitted(a) => a,
            };
            let task =
                match (plan, admitted_tx) {
                    (Some(plan), Some(tx)) => {
                        match plan.place.create(&plan.tool, call_cancel, plan.lifetime) {
                            Ok(id) => {
                                let _ = tx.send(id.clone());
                                Some(id)
                            }
                            Err(e) => {
                                return admitted.abandon(CallResult::failure(
                            ErrorCode::Internal,
                            format!("{e}; nothing reached the plugin, so the call may be repeated"),
                            None,
                        ));
                            }
                        }
                    }
                    _ => None,
                };
            admitted.finish(task).await
        });
        // The call may outlive the request (a parked call, a task): it
        // keeps the request's trace context, so its spans stay in the
        // request's trace.
        let call: crate::relay::CallFuture = if toolhost_telemetry::enabled() {
            use toolhost_telemetry::FutureExt as _;
            Box::pin(call.with_context(toolhost_telemetry::Context::current()))
        } else {
            call
        };
        Running {
            call,
            events,
            cancel,
            expires,
            task: None,
            admitted: admitted_rx,
        }
    }

    /// Drives a direct call until it ends, or parks its question when the
    /// caller takes questions in a later request.
    async fn drive_call(
        &self,
        running: Running,
        (owner, tool, arguments): (Owner, String, String),
        to: &dyn Delivery,
        stop: Stop<'_>,
    ) -> Hosted {
        let mut unfinished = Unfinished(Some(running));
        loop {
            let Some(running) = unfinished.0.as_mut() else {
                return Hosted::Done(Ok(lost()));
            };
            match drive(running, to, stop).await {
                Driven::Done(r) => {
                    unfinished.0 = None;
                    return Hosted::Done(Ok(r));
                }
                Driven::Park(question, reply) => {
                    let Some(mut running) = unfinished.0.take() else {
                        return Hosted::Done(Ok(lost()));
                    };
                    running.detach();
                    let waiting = Waiting {
                        owner,
                        tool: tool.clone(),
                        arguments: arguments.clone(),
                        running,
                        reply,
                    };
                    match self.parked.park(waiting) {
                        Ok(handle) => return Hosted::Parked { handle, question },
                        Err(refused) => {
                            let (why, w) = *refused;
                            let _ = w.reply.send(Err(Unanswered::Failed(why.to_string())));
                            unfinished.0 = Some(w.running);
                        }
                    }
                }
            }
        }
    }

    /// Runs a call as a task: through the pipeline until it is admitted,
    /// then detached and followed to its end. A call that ends before
    /// admission is answered as the direct call it then was.
    async fn start_task(
        &self,
        request: CallRequest,
        found: Found,
        lifetime: Duration,
        stop: Stop<'_>,
    ) -> Hosted {
        let owner = task_owner(&request.owner, &request.binding);
        let place = match self.tasks.reserve(owner, Instant::now()) {
            Ok(place) => place,
            Err(refused) => return Hosted::TaskRefused(refused),
        };
        let plan = TaskPlan {
            place,
            tool: request.name.clone(),
            lifetime,
            cap: self.tasks.limits().max_lifetime,
        };
        let tool = request.name.clone();
        // Revoking the binding that made the task cancels it.
        let revoked = request.binding.revocation();
        let mut running = self.start(request, found, Some(plan));
        let Some(mut admitted) = running.admitted.take() else {
            return Hosted::Done(Ok(lost()));
        };
        // From here the call runs on its own task: the request only waits
        // to learn whether it was admitted.
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
            // Admitted in a race with the client's cancel: the task exists,
            // so its end is recorded, and it never stays `working` with
            // nothing behind it.
            if let Ok(id) = admitted.try_recv() {
                self.tasks.update(&id, ended(Ok(r)), Instant::now());
                return Hosted::CancelledAtCreation;
            }
            return Hosted::Done(Ok(r));
        };
        let now = Instant::now();
        let view = self
            .tasks
            .get(&owner, &id, now)
            .unwrap_or_else(|| TaskView {
                id: id.clone(),
                tool,
                state: TaskState::Working(None),
                created_at: toolhost_base::time::utc_now_iso8601(),
                updated_at: toolhost_base::time::utc_now_iso8601(),
                ttl: lifetime + self.tasks.limits().retention,
            });
        tokio::spawn(crate::follow::follow(
            Arc::clone(&self.tasks),
            id,
            running,
            revoked,
        ));
        Hosted::Task(view)
    }
}

/// The answer when a call was lost on the host's side (a bug guard).
fn lost() -> CallResult {
    CallResult::failure(ErrorCode::Internal, "the call was lost", None)
}

/// A call whose driver is dropped mid-way (hyper drops a request's future
/// when its connection closes) is not dropped with it: it is cancelled
/// and runs to its end on its own task.
struct Unfinished(Option<Running>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(running) = self.0.take() else {
            return;
        };
        running.cancel.cancel();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = running.call.await;
            });
        }
    }
}

#[cfg(test)]
mod tests;
