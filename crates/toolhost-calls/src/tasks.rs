//! The tasks toolhost hosts for plugin tools (the MCP 2026-07-28 Tasks
//! extension): who owns each, what state it is in, and the bounds that
//! keep a caller from holding the daemon's memory or guessing another
//! caller's task.
//!
//! A task is one call's single attempt that outlives its request. This
//! registry only keeps the books: the call itself runs in the pipeline as
//! any call does, and reports here as it goes (progress, a question, its
//! end). The rules it holds:
//!
//! - **Ownership.** A task belongs to the token that created it (its
//!   SHA-256, as sessions are owned). Every read, answer and cancel names
//!   the owner, and a task of another owner is answered exactly as an
//!   unknown one: `None`, with nothing that tells the two apart.
//! - **Unguessable ids**: 128 bits from the system's CSPRNG.
//! - **Caps**: tasks per owner and in total, counted while a task runs and
//!   while its result is retained, so a caller cannot park results without
//!   end.
//! - **Retention**: a finished task is kept for the retention time, then
//!   forgotten; its result is held only within the result byte limit
//!   (the pipeline has bounded it already).
//!
//! It must not: run or retry a call, or hold a plugin slot (the pipeline
//! owns both), or keep anything but ids, states and bounded results.

use crate::callers::Owner;
use crate::reply::Reply;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::{
    Answer, CallResult, CheckedQuestion, ErrorCode, Question, UnknownTool, check_answer,
};

/// How often a client is asked to poll `tasks/get`.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Where a task stands. States hold what happened, typed; the MCP layer
/// writes them in the extension's wire form when a client reads them.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    /// Running; the message is the latest progress, if any.
    Working(Option<String>),
    /// The plugin asked a question; the call waits for its answer, under
    /// `key` (unique over the task's life).
    InputRequired {
        /// The input-request key the answer must come under.
        key: String,
        /// The question.
        question: Question,
    },
    /// Done: the call's result (a tool's own `isError` included).
    Completed(CallResult),
    /// Ended without a result: toolhost's coded error (the plugin
    /// crashed, timed out, answered too much), or a name that resolved to
    /// no tool.
    Failed(Failure),
    /// Cancelled by its owner, the operator, or the binding's revocation.
    Cancelled,
}

/// Why a task failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The call's coded error, as a direct call would get it.
    Coded(CallResult),
    /// The name resolved to no tool.
    UnknownTool(UnknownTool),
}

/// How a call's end reads as a task's final state: its result
/// (`completed`), toolhost's coded error (`failed`), or `cancelled`.
#[must_use]
pub fn ended(r: Result<CallResult, UnknownTool>) -> TaskState {
    match r {
        Err(unknown) => TaskState::Failed(Failure::UnknownTool(unknown)),
        Ok(r) if r.code == Some(ErrorCode::Cancelled) => TaskState::Cancelled,
        Ok(r) if r.code.is_some() => TaskState::Failed(Failure::Coded(r)),
        Ok(r) => TaskState::Completed(r),
    }
}

impl TaskState {
    /// Whether the task has ended.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Completed(_) | Self::Failed(_) | Self::Cancelled)
    }

    /// The state's name, for the status and the metrics.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Working(_) => "working",
            Self::InputRequired { .. } => "input_required",
            Self::Completed(_) => "completed",
            Self::Failed(_) => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Every state name, in the order the status shows them.
    pub const NAMES: [&'static str; 5] = [
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ];
}

/// What an owner is shown of one of its tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    /// The task's id.
    pub id: String,
    /// The tool it runs (exposed name).
    pub tool: String,
    /// Its state.
    pub state: TaskState,
    /// When it was created (ISO 8601).
    pub created_at: String,
    /// When it last changed (ISO 8601).
    pub updated_at: String,
    /// How long after its creation it may be forgotten: its lifetime plus
    /// the retention of its result.
    pub ttl: Duration,
}

/// What the operator is shown of any task: no result, no question, and
/// the owner only as the first bytes of its token's digest.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSummary {
    /// The task's id.
    pub id: String,
    /// The tool it runs.
    pub tool: String,
    /// Its state's name.
    pub state: &'static str,
    /// The owner's token digest, first 8 hex digits (the process's token
    /// is all zeros).
    pub owner: String,
    /// How long ago it was created.
    pub age: Duration,
}

/// Why a task was not created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskRefused {
    /// The owner has as many tasks as it may.
    #[error(
        "too many tasks for this token (the limit is {limit}, counting finished tasks while their results are kept, {retention_s} s after they end); {}",
        frees(*next_free_s)
    )]
    PerOwner {
        /// The cap.
        limit: usize,
        /// How long a finished task's result is kept.
        retention_s: u64,
        /// When the next place frees, if one of the owner's tasks has ended.
        next_free_s: Option<u64>,
    },
    /// The daemon has as many tasks as it may.
    #[error(
        "too many tasks on this daemon (the limit is {limit}, counting finished tasks while their results are kept); {}",
        frees(*next_free_s)
    )]
    Total {
        /// The cap.
        limit: usize,
        /// When the next place frees, if a task has ended.
        next_free_s: Option<u64>,
    },
    /// The system had no randomness for an id.
    #[error("no task id could be made: {0}")]
    NoId(String),
}

/// What frees a place, in words.
fn frees(next_free_s: Option<u64>) -> String {
    match next_free_s {
        Some(s) => format!("a place frees when a kept result expires, the next in {s} s"),
        None => "a place frees once a running task ends and its result has been kept for the retention time".to_owned(),
    }
}

/// The bounds.
#[derive(Debug, Clone, Copy)]
pub struct TaskLimits {
    /// Tasks of one owner, running or retained.
    pub per_owner: usize,
    /// Tasks in all, running or retained.
    pub total: usize,
    /// How long a finished task's result is kept.
    pub retention: Duration,
    /// The longest a task may run, whatever its tool declares.
    pub max_lifetime: Duration,
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self {
            per_owner: 16,
            total: 1024,
            retention: Duration::from_secs(600),
            max_lifetime: Duration::from_secs(3600),
        }
    }
}

/// A question a task's call is waiting on: the checked question the
/// answer must fit, and where the answer goes.
pub(crate) struct Asking {
    pub(crate) question: Box<CheckedQuestion>,
    pub(crate) reply: Reply,
}

impl std::fmt::Debug for Asking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asking").finish_non_exhaustive()
    }
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAnswered {
    /// No such task for this owner (or another owner's).
    #[error("no such task for this token (unknown, or its result has expired)")]
    UnknownTask,
    /// The answer does not fit the question: the violations' names and
    /// rules, never the value. The question is still waiting.
    #[error(
        "the answer does not match the requested schema: {0}; the question is still waiting for an answer"
    )]
    DoesNotFit(String),
}

#[derive(Debug)]
struct Task {
    owner: Owner,
    tool: String,
    state: TaskState,
    created: Instant,
    created_at: String,
    updated_at: String,
    ended: Option<Instant>,
    lifetime: Duration,
    cancel: CancellationToken,
    asking: Option<Asking>,
}

#[derive(Debug, Default)]
struct Books {
    limits: TaskLimits,
    tasks: HashMap<String, Task>,
    /// Places held by calls on their way through the pipeline, per owner.
    reserved: HashMap<Owner, usize>,
}

impl Books {
    fn reserved_total(&self) -> usize {
        self.reserved.values().sum()
    }

    fn release(&mut self, owner: &Owner) {
        if let Some(n) = self.reserved.get_mut(owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.reserved.remove(owner);
            }
        }
    }
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The task was running; it is cancelled now.
    Now,
    /// The task had already ended (its state stays as it ended).
    AlreadyEnded,
    /// No such task for this caller.
    Unknown,
}

/// The tasks of a daemon.
#[derive(Debug, Default)]
pub struct Tasks {
    books: Mutex<Books>,
}

/// A place among the tasks, held by a call while it goes through the
/// pipeline: counted against the caps from the start, so concurrent calls
/// cannot pass them, and given back if the call ends before it is
/// admitted ([`Place::create`] turns it into the task).
#[derive(Debug)]
pub struct Place {
    tasks: Arc<Tasks>,
    owner: Owner,
    taken: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.taken {
            self.tasks.lock().release(&self.owner);
        }
    }
}

impl Place {
    /// Creates the working task for `tool` in this place; its call is
    /// cancelled through `cancel` and may run for `lifetime`. Returns the
    /// task's id.
    pub fn create(
        mut self,
        tool: &str,
        cancel: CancellationToken,
        lifetime: Duration,
    ) -> Result<String, TaskRefused> {
        let id =
            toolhost_base::ids::unguessable_id().map_err(|e| TaskRefused::NoId(e.to_string()))?;
        let stamp = toolhost_base::time::utc_now_iso8601();
        let mut books = self.tasks.lock();
        books.release(&self.owner);
        self.taken = true;
        books.tasks.insert(
            id.clone(),
            Task {
                owner: self.owner,
                tool: tool.to_owned(),
                state: TaskState::Working(None),
                created: Instant::now(),
                created_at: stamp.clone(),
                updated_at: stamp,
                ended: None,
                lifetime,
                cancel,
                asking: None,
            },
        );
        Ok(id)
    }
}

impl Tasks {
    /// An empty registry with these bounds.
    #[must_use]
    pub fn new(limits: TaskLimits) -> Self {
        Self {
            books: Mutex::new(Books {
                limits,
                ..Books::default()
            }),
        }
    }

    /// The bounds.
    #[must_use]
    pub fn limits(&self) -> TaskLimits {
        self.lock().limits
    }

    /// Sets the bounds (at start; tasks already held stay).
    pub fn set_limits(&self, limits: TaskLimits) {
        self.lock().limits = limits;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds a place for a task of `owner`, within the caps (finished
    /// tasks past their retention are forgotten first).
    pub fn reserve(self: &Arc<Self>, owner: Owner, now: Instant) -> Result<Place, TaskRefused> {
        let mut books = self.lock();
        let limits = books.limits;
        sweep(&mut books.tasks, limits.retention, now);
        // When the soonest of these tasks' results expires, freeing a place.
        let next_free = |only: Option<&Owner>| {
            books
                .tasks
                .values()
                .filter(|t| only.is_none_or(|o| t.owner == *o))
                .filter_map(|t| t.ended)
                .map(|ended| {
                    (ended + limits.retention)
                        .saturating_duration_since(now)
                        .as_secs()
                })
                .min()
        };
        if books.tasks.len() + books.reserved_total() >= limits.total {
            return Err(TaskRefused::Total {
                limit: limits.total,
                next_free_s: next_free(None),
            });
        }
        let mine = books.tasks.values().filter(|t| t.owner == owner).count()
            + books.reserved.get(&owner).copied().unwrap_or(0);
        if mine >= limits.per_owner {
            return Err(TaskRefused::PerOwner {
                limit: limits.per_owner,
                retention_s: limits.retention.as_secs(),
                next_free_s: next_free(Some(&owner)),
            });
        }
        *books.reserved.entry(owner).or_default() += 1;
        Ok(Place {
            tasks: Arc::clone(self),
            owner,
            taken: false,
        })
    }

    /// The task `id` as its owner sees it; `None` when there is no such
    /// task or it is another owner's (the two are not told apart).
    #[must_use]
    pub fn get(&self, owner: &Owner, id: &str, now: Instant) -> Option<TaskView> {
        // A read is the polling path: it looks at one entry and leaves
        // forgetting expired ones to `reserve` and `list`.
        let books = self.lock();
        let retention = books.limits.retention;
        books
            .tasks
            .get(id)
            .filter(|t| t.owner == *owner && !expired(t, retention, now))
            .map(|t| TaskView {
                id: id.to_owned(),
                tool: t.tool.clone(),
                state: t.state.clone(),
                created_at: t.created_at.clone(),
                updated_at: t.updated_at.clone(),
                ttl: t.lifetime + retention,
            })
    }

    /// Records where a running task stands (progress or its end). A task
    /// that has ended stays as it ended; a question waiting is abandoned
    /// when the task ends.
    pub fn update(&self, id: &str, state: TaskState, now: Instant) {
        let mut books = self.lock();
        if let Some(t) = books.tasks.get_mut(id)
            && !t.state.is_terminal()
            // Progress while a question waits leaves the question shown.
            && (state.is_terminal() || t.asking.is_none())
        {
            if state.is_terminal() {
                t.ended = Some(now);
                t.asking = None;
            }
            if t.state != state {
                t.state = state;
                t.updated_at = toolhost_base::time::utc_now_iso8601();
            }
        }
    }

    /// Puts a running task in `input_required` with its question, under
    /// `key`. A task that has ended gives the question back.
    pub(crate) fn ask(
        &self,
        id: &str,
        key: String,
        question: Question,
        asking: Asking,
    ) -> Result<(), Asking> {
        let mut books = self.lock();
        match books.tasks.get_mut(id) {
            Some(t) if !t.state.is_terminal() => {
                t.state = TaskState::InputRequired { key, question };
                t.updated_at = toolhost_base::time::utc_now_iso8601();
                t.asking = Some(asking);
                Ok(())
            }
            _ => Err(asking),
        }
    }

    /// Answers the question `owner`'s task `id` waits on: `responses`
    /// holds answers by input-request key, and the one under the
    /// question's key is checked against its schema (the root closed)
    /// before the plugin sees it. The task goes back to `working`. An
    /// answer that does not fit is refused and the question stays; a task
    /// waiting for no answer, or no answer under its key, changes nothing
    /// (keys that name no outstanding question are ignored, as the
    /// extension says).
    pub fn answer(
        &self,
        owner: &Owner,
        id: &str,
        responses: impl FnOnce(&str) -> Option<Answer>,
    ) -> Result<(), NotAnswered> {
        let mut books = self.lock();
        let retention = books.limits.retention;
        let t = books
            .tasks
            .get_mut(id)
            .filter(|t| t.owner == *owner && !expired(t, retention, Instant::now()))
            .ok_or(NotAnswered::UnknownTask)?;
        let (TaskState::InputRequired { key, .. }, Some(asking)) = (&t.state, t.asking.as_ref())
        else {
            return Ok(());
        };
        let Some(answer) = responses(key) else {
            return Ok(());
        };
        let checked = check_answer(&asking.question, answer).map_err(|violations| {
            let why: Vec<&str> = violations.iter().map(|v| v.message.as_str()).collect();
            NotAnswered::DoesNotFit(why.join("; "))
        })?;
        if let Some(asking) = t.asking.take() {
            let _ = asking.reply.send(Ok(checked));
        }
        t.state = TaskState::Working(None);
        t.updated_at = toolhost_base::time::utc_now_iso8601();
        Ok(())
    }

    /// Cancels the running task `id`: its call is cancelled and the task
    /// ends `cancelled`. With `owner`, only that owner's task (anything
    /// else is answered as an unknown id); without, the operator's cancel
    /// of any task.
    pub fn cancel(&self, owner: Option<&Owner>, id: &str, now: Instant) -> Cancelled {
        let mut books = self.lock();
        let retention = books.limits.retention;
        let Some(t) = books
            .tasks
            .get_mut(id)
            .filter(|t| owner.is_none_or(|o| t.owner == *o) && !expired(t, retention, now))
        else {
            return Cancelled::Unknown;
        };
        if t.state.is_terminal() {
            return Cancelled::AlreadyEnded;
        }
        t.cancel.cancel();
        t.state = TaskState::Cancelled;
        t.asking = None;
        t.ended = Some(now);
        t.updated_at = toolhost_base::time::utc_now_iso8601();
        Cancelled::Now
    }

    /// Every task, for the operator, oldest first.
    #[must_use]
    pub fn list(&self, now: Instant) -> Vec<TaskSummary> {
        let mut books = self.lock();
        let retention = books.limits.retention;
        sweep(&mut books.tasks, retention, now);
        let mut all: Vec<TaskSummary> = books
            .tasks
            .iter()
            .map(|(id, t)| TaskSummary {
                id: id.clone(),
                tool: t.tool.clone(),
                state: t.state.name(),
                owner: t.owner[..4].iter().map(|b| format!("{b:02x}")).collect(),
                age: now.saturating_duration_since(t.created),
            })
            .collect();
        all.sort_by(|a, b| b.age.cmp(&a.age).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// Tasks by state name, every state named, for the status and the
    /// metrics.
    #[must_use]
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        let books = self.lock();
        TaskState::NAMES
            .iter()
            .map(|name| {
                let n = books
                    .tasks
                    .values()
                    .filter(|t| t.state.name() == *name)
                    .count();
                (*name, n)
            })
            .collect()
    }
}

/// Whether a finished task's retention has passed.
fn expired(t: &Task, retention: Duration, now: Instant) -> bool {
    t.ended
        .is_some_and(|ended| now.saturating_duration_since(ended) >= retention)
}

/// Forgets finished tasks whose retention has passed.
fn sweep(tasks: &mut HashMap<String, Task>, retention: Duration, now: Instant) {
    tasks.retain(|_, t| !expired(t, retention, now));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: Owner = [1; 32];
    const B: Owner = [2; 32];
    const LIFE: Duration = Duration::from_secs(60);

    fn limits(per_owner: usize, total: usize) -> TaskLimits {
        TaskLimits {
            per_owner,
            total,
            retention: Duration::from_secs(10),
            max_lifetime: LIFE,
        }
    }

    fn make(
        tasks: &Arc<Tasks>,
        owner: Owner,
        now: Instant,
    ) -> Result<(String, CancellationToken), TaskRefused> {
        let cancel = CancellationToken::new();
        let id = tasks
            .reserve(owner, now)?
            .create("t", cancel.clone(), LIFE)?;
        Ok((id, cancel))
    }

    #[test]
    fn another_owner_is_answered_as_for_an_unknown_task() {
        let tasks = Arc::new(Tasks::new(TaskLimits::default()));
        let now = Instant::now();
        let (id, cancel) = make(&tasks, A, now).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(id.len(), 32);
        assert!(tasks.get(&A, &id, now).is_some());
        assert_eq!(
            tasks.get(&B, &id, now),
            tasks.get(&B, "f".repeat(32).as_str(), now)
        );
        assert_eq!(tasks.cancel(Some(&B), &id, now), Cancelled::Unknown);
        assert!(!cancel.is_cancelled(), "another owner cancelled the call");
        assert_eq!(
            tasks.answer(&B, &id, |_| None),
            Err(NotAnswered::UnknownTask)
        );
        assert_eq!(tasks.cancel(Some(&A), &id, now), Cancelled::Now);
        assert_eq!(tasks.cancel(Some(&A), &id, now), Cancelled::AlreadyEnded);
        assert_eq!(
            tasks.get(&A, &id, now).map(|v| v.state),
            Some(TaskState::Cancelled)
        );
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn a_finished_task_stays_as_it_ended_until_its_retention_passes() {
        let tasks = Arc::new(Tasks::new(limits(1, 10)));
        let t0 = Instant::now();
        let (id, _) = make(&tasks, A, t0).unwrap_or_else(|e| panic!("{e}"));
        tasks.update(&id, TaskState::Working(Some("half way".into())), t0);
        let done = TaskState::Completed(CallResult {
            content: vec![toolhost_pipeline::content::Block::text("done")],
            structured: None,
            is_error: false,
            code: None,
            meta: None,
        });
        tasks.update(&id, done.clone(), t0);
        tasks.update(&id, TaskState::Working(None), t0);
        assert_eq!(tasks.get(&A, &id, t0).map(|v| v.state), Some(done));
        // Retained, it still counts against the owner's cap.
        assert!(matches!(
            make(&tasks, A, t0).err(),
            Some(TaskRefused::PerOwner { limit: 1, .. })
        ));
        let later = t0 + Duration::from_secs(11);
        assert_eq!(tasks.get(&A, &id, later), None);
        assert!(make(&tasks, A, later).is_ok());
    }

    #[test]
    fn a_place_counts_until_it_is_created_or_given_back() {
        let tasks = Arc::new(Tasks::new(limits(2, 3)));
        let now = Instant::now();
        let a1 = tasks.reserve(A, now).unwrap_or_else(|e| panic!("{e}"));
        let a2 = tasks.reserve(A, now).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            tasks.reserve(A, now).err(),
            Some(TaskRefused::PerOwner { limit: 2, .. })
        ));
        let b1 = tasks.reserve(B, now).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            tasks.reserve(B, now).err(),
            Some(TaskRefused::Total { limit: 3, .. })
        ));
        drop(a1);
        let _ = a2.create("t", CancellationToken::new(), LIFE);
        drop(b1);
        assert!(tasks.reserve(A, now).is_ok());
        assert_eq!(tasks.counts().iter().map(|(_, c)| c).sum::<usize>(), 1);
    }

    proptest! {
        /// Whatever the owners do, no owner holds more than its cap, the
        /// daemon no more than the total, and no owner sees another's task.
        #[test]
        fn caps_hold_and_owners_see_only_their_own(
            ops in proptest::collection::vec((0u8..3, any::<bool>()), 1..80),
        ) {
            let tasks = Arc::new(Tasks::new(limits(3, 7)));
            let now = Instant::now();
            let mut made: Vec<(Owner, String)> = Vec::new();
            for (who, finish) in ops {
                let owner = [who; 32];
                if let Ok((id, _)) = make(&tasks, owner, now) {
                    if finish {
                        tasks.update(&id, TaskState::Cancelled, now);
                    }
                    made.push((owner, id));
                }
                let total: usize = tasks.counts().iter().map(|(_, c)| c).sum();
                prop_assert!(total <= 7);
                for o in 0u8..3 {
                    let mine = made.iter().filter(|(w, _)| *w == [o; 32]).count();
                    prop_assert!(mine <= 3);
                }
            }
            for (owner, id) in &made {
                prop_assert!(tasks.get(owner, id, now).is_some());
                let other = [owner[0].wrapping_add(1) % 3; 32];
                prop_assert!(tasks.get(&other, id, now).is_none());
            }
        }
    }
}
