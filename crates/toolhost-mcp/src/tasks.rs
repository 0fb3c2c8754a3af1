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

use crate::tokens::Owner;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Where a task stands.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    /// Running; the message is the latest progress, if any.
    Working(Option<String>),
    /// The plugin asked a question; the call waits for `tasks/update`.
    InputRequired(serde_json::Value),
    /// Done: the call's result, mapped as a direct call's would be.
    Completed(serde_json::Value),
    /// Ended without a result: the coded error a direct call would get.
    Failed(serde_json::Value),
    /// Cancelled by its owner or the operator.
    Cancelled,
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
            Self::InputRequired(_) => "input_required",
            Self::Completed(_) => "completed",
            Self::Failed(_) => "failed",
            Self::Cancelled => "cancelled",
        }
    }
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
    /// How long ago it was created.
    pub age: Duration,
}

/// Why a task was not created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskRefused {
    /// The owner has as many tasks as it may.
    #[error("too many tasks for this token (the limit is {0}); wait for one to end or cancel one")]
    PerOwner(usize),
    /// The daemon has as many tasks as it may.
    #[error("too many tasks on this daemon (the limit is {0}); try again later")]
    Total(usize),
    /// The system had no randomness for an id.
    #[error("no task id could be made: {0}")]
    NoId(String),
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
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self {
            per_owner: 16,
            total: 1024,
            retention: Duration::from_secs(600),
        }
    }
}

#[derive(Debug)]
struct Task {
    owner: Owner,
    tool: String,
    state: TaskState,
    created: Instant,
    ended: Option<Instant>,
    cancel: CancellationToken,
}

/// The tasks of a daemon.
#[derive(Debug, Default)]
pub struct Tasks {
    limits: TaskLimits,
    tasks: Mutex<HashMap<String, Task>>,
}

impl Tasks {
    /// An empty registry with these bounds.
    #[must_use]
    pub fn new(limits: TaskLimits) -> Self {
        Self {
            limits,
            tasks: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Task>> {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Creates a working task of `owner` for `tool`, within the caps
    /// (finished tasks past their retention are forgotten first). Returns
    /// its id and the token that cancels its call.
    pub fn create(
        &self,
        owner: Owner,
        tool: &str,
        now: Instant,
    ) -> Result<(String, CancellationToken), TaskRefused> {
        let mut tasks = self.lock();
        sweep(&mut tasks, self.limits.retention, now);
        if tasks.len() >= self.limits.total {
            return Err(TaskRefused::Total(self.limits.total));
        }
        if tasks.values().filter(|t| t.owner == owner).count() >= self.limits.per_owner {
            return Err(TaskRefused::PerOwner(self.limits.per_owner));
        }
        let id = toolhost_runtime::ids::unguessable_id()
            .map_err(|e| TaskRefused::NoId(e.to_string()))?;
        let cancel = CancellationToken::new();
        tasks.insert(
            id.clone(),
            Task {
                owner,
                tool: tool.to_owned(),
                state: TaskState::Working(None),
                created: now,
                ended: None,
                cancel: cancel.clone(),
            },
        );
        Ok((id, cancel))
    }

    /// The task `id` as its owner sees it; `None` when there is no such
    /// task or it is another owner's (the two are not told apart).
    #[must_use]
    pub fn get(&self, owner: &Owner, id: &str, now: Instant) -> Option<TaskView> {
        let mut tasks = self.lock();
        sweep(&mut tasks, self.limits.retention, now);
        tasks
            .get(id)
            .filter(|t| t.owner == *owner)
            .map(|t| TaskView {
                id: id.to_owned(),
                tool: t.tool.clone(),
                state: t.state.clone(),
                age: now.saturating_duration_since(t.created),
            })
    }

    /// Records where a running task stands (progress, a question, or its
    /// end). A task that has ended stays as it ended.
    pub fn update(&self, id: &str, state: TaskState, now: Instant) {
        if let Some(t) = self.lock().get_mut(id)
            && !t.state.is_terminal()
        {
            if state.is_terminal() {
                t.ended = Some(now);
            }
            t.state = state;
        }
    }

    /// Cancels `owner`'s running task `id`: its call is cancelled and the
    /// task ends `cancelled`. `None` as for [`Tasks::get`]; a task that
    /// has ended is shown as it ended.
    pub fn cancel(&self, owner: &Owner, id: &str, now: Instant) -> Option<TaskView> {
        {
            let mut tasks = self.lock();
            let t = tasks.get_mut(id).filter(|t| t.owner == *owner)?;
            if !t.state.is_terminal() {
                t.cancel.cancel();
                t.state = TaskState::Cancelled;
                t.ended = Some(now);
            }
        }
        self.get(owner, id, now)
    }

    /// Tasks by state name, for the status and the metrics.
    #[must_use]
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        let tasks = self.lock();
        let mut counts: Vec<(&'static str, usize)> = Vec::new();
        for t in tasks.values() {
            let name = t.state.name();
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => counts.push((name, 1)),
            }
        }
        counts.sort_unstable();
        counts
    }
}

/// Forgets finished tasks whose retention has passed.
fn sweep(tasks: &mut HashMap<String, Task>, retention: Duration, now: Instant) {
    tasks.retain(|_, t| {
        t.ended
            .is_none_or(|ended| now.saturating_duration_since(ended) < retention)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: Owner = [1; 32];
    const B: Owner = [2; 32];

    fn limits(per_owner: usize, total: usize) -> TaskLimits {
        TaskLimits {
            per_owner,
            total,
            retention: Duration::from_secs(10),
        }
    }

    #[test]
    fn another_owner_is_answered_as_for_an_unknown_task() {
        let tasks = Tasks::new(TaskLimits::default());
        let now = Instant::now();
        let (id, cancel) = tasks
            .create(A, "kandev_x_run", now)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(id.len(), 32);
        assert!(tasks.get(&A, &id, now).is_some());
        assert_eq!(
            tasks.get(&B, &id, now),
            tasks.get(&B, "f".repeat(32).as_str(), now)
        );
        assert_eq!(tasks.cancel(&B, &id, now), None);
        assert!(!cancel.is_cancelled(), "another owner cancelled the call");
        let view = tasks.cancel(&A, &id, now);
        assert_eq!(view.map(|v| v.state), Some(TaskState::Cancelled));
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn a_finished_task_stays_as_it_ended_until_its_retention_passes() {
        let tasks = Tasks::new(limits(1, 10));
        let t0 = Instant::now();
        let (id, _) = tasks.create(A, "t", t0).unwrap_or_else(|e| panic!("{e}"));
        tasks.update(&id, TaskState::Working(Some("half way".into())), t0);
        let done = TaskState::Completed(serde_json::json!({ "content": [] }));
        tasks.update(&id, done.clone(), t0);
        tasks.update(&id, TaskState::Working(None), t0);
        assert_eq!(tasks.get(&A, &id, t0).map(|v| v.state), Some(done));
        // Retained, it still counts against the owner's cap.
        assert_eq!(tasks.create(A, "t", t0), Err(TaskRefused::PerOwner(1)));
        let later = t0 + Duration::from_secs(11);
        assert_eq!(tasks.get(&A, &id, later), None);
        assert!(tasks.create(A, "t", later).is_ok());
    }

    proptest! {
        /// Whatever the owners do, no owner holds more than its cap, the
        /// daemon no more than the total, and no owner sees another's task.
        #[test]
        fn caps_hold_and_owners_see_only_their_own(
            ops in proptest::collection::vec((0u8..3, any::<bool>()), 1..80),
        ) {
            let tasks = Tasks::new(limits(3, 7));
            let now = Instant::now();
            let mut made: Vec<(Owner, String)> = Vec::new();
            for (who, finish) in ops {
                let owner = [who; 32];
                if let Ok((id, _)) = tasks.create(owner, "t", now) {
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
