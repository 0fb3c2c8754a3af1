//! The thread that forks every plugin process.
//!
//! Why a thread of its own: forking a daemon that holds a large catalog
//! copies its page tables, about 10 ms of kernel time a plugin on the
//! project's machine. On a runtime worker, a thousand plugins starting at
//! once keep that worker from answering anyone (an operator's `status`
//! took ten seconds during such a start). Here the worker hands the built
//! command over and awaits the child; the kernel's scheduler shares the
//! cores between the fork and everything else.
//!
//! Why not tokio's blocking pool: each plugin is forked with a parent-death
//! signal (`PR_SET_PDEATHSIG`), which Linux sends when the *thread* that
//! forked it exits, and the pool retires threads idle for ten seconds,
//! which would kill every plugin they forked. This thread is made once and
//! never exits while the process lives: it waits on a channel whose sender
//! is a static, and a job that panics is caught, not allowed to end it.
//!
//! What it must not do: anything but fork. The command is built, and the
//! sandbox prepared, on the caller's side; what follows the fork (the
//! handshake, health) stays on the runtime.

use crate::leaders::{Leader, Leaders};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};
use tokio::process::{Child, Command};

type Job = Box<dyn FnOnce() + Send>;

/// The spawner thread's queue; `None` when the thread could not be made
/// (then the caller forks on its own thread, as before).
static QUEUE: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();

fn queue() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let made = std::thread::Builder::new()
                .name("toolhost-spawner".to_owned())
                .spawn(move || {
                    // Ends only if every sender is gone, and one lives in
                    // the static for as long as the process does.
                    while let Ok(job) = rx.recv() {
                        // A panic must not end the thread: its plugins
                        // would die with it.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                });
            match made {
                Ok(_) => Some(Mutex::new(tx)),
                Err(e) => {
                    tracing::warn!(
                        "cannot start the plugin spawner thread ({e}): plugins are forked on the runtime's threads"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// Forks `command` and enters the child among `leaders`, under the
/// spawning lock that keeps the sweep of strays from mistaking it for one
/// (`leaders::SPAWNING`). On the spawner thread when there is one.
///
/// If the caller stops waiting, the child is dropped with its place among
/// the leaders; the command's `kill_on_drop` kills it and tokio reaps it.
/// A caller gone before its fork has run may also have dropped the
/// sandbox the command refers to (the Landlock ruleset's descriptor):
/// then the confinement fails in the child and so does its exec. A child
/// never runs without its sandbox.
pub(crate) async fn spawn(
    command: Command,
    leaders: Leaders,
) -> std::io::Result<(Child, u32, Leader)> {
    let Some(queue) = queue() else {
        return fork(command, &leaders);
    };
    // The child's pipes and its reaping belong to the caller's runtime.
    let runtime = tokio::runtime::Handle::current();
    let (done, forked) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _in_runtime = runtime.enter();
        let _ = done.send(fork(command, &leaders));
    });
    let sent = queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(job);
    if sent.is_err() {
        // Cannot be, short of a bug: the receiving thread never returns.
        return Err(std::io::Error::other("the plugin spawner thread is gone"));
    }
    forked
        .await
        // The job panicked: its sender was dropped unsent.
        .unwrap_or_else(|_| Err(std::io::Error::other("the plugin spawner failed")))
}

fn fork(mut command: Command, leaders: &Leaders) -> std::io::Result<(Child, u32, Leader)> {
    let _no_sweep = crate::leaders::SPAWNING
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    let child = command.spawn()?;
    let pid = child.id().unwrap_or(0);
    let leader = leaders.enter(pid);
    Ok((child, pid, leader))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sleep 30` with the parent-death signal every plugin gets.
    fn sleeper() -> Command {
        let mut cmd = Command::new("sleep");
        cmd.arg("30").kill_on_drop(true);
        toolhost_sandbox::Prepared::default().confine(cmd.as_std_mut());
        cmd
    }

    fn alive(child: &mut Child) -> bool {
        matches!(child.try_wait(), Ok(None))
    }

    /// Whether a SIGKILL is pending for `pid` (sent, not yet acted on).
    fn kill_pending(pid: u32) -> bool {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            return true;
        };
        status.lines().any(|l| {
            let mask = |k: &str| {
                l.strip_prefix(k)
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            };
            let zombie = l.starts_with("State:") && (l.contains('Z') || l.contains('X'));
            let sigkill = 1 << (9 - 1);
            zombie
                || [mask("SigPnd:"), mask("ShdPnd:")]
                    .into_iter()
                    .flatten()
                    .any(|m| m & sigkill != 0)
        })
    }

    /// The reason this thread exists: a plugin must not die with the
    /// thread that asked for it (a blocking-pool thread retires when idle).
    #[test]
    fn a_child_outlives_the_thread_that_asked_for_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let handle = runtime.handle().clone();
        let leaders = Leaders::default();
        let (mut kept, mut control) = std::thread::spawn(move || {
            let _in = handle.enter();
            let kept = handle.block_on(spawn(sleeper(), leaders.clone()));
            // The control is forked here, on the thread about to exit.
            let control = fork(sleeper(), &leaders);
            (kept, control)
        })
        .join()
        .expect("the asking thread ends");
        // The kernel signals a dying thread's children in the order they
        // were forked, `kept` first: once the control is dead, any signal
        // meant for `kept` has been sent.
        let (kept, kept_pid, _kept_leader) = kept.as_mut().expect("forked on the spawner");
        let (control, _, _control_leader) = control.as_mut().expect("forked here");
        let _in = runtime.enter();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive(control) {
            assert!(
                std::time::Instant::now() < deadline,
                "the control never got its parent-death signal"
            );
            std::thread::yield_now();
        }
        assert!(
            alive(kept) && !kill_pending(*kept_pid),
            "a child of the spawner thread lives on after the asking thread exits"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_child_is_entered_among_the_leaders_until_its_place_is_dropped() {
        let leaders = Leaders::default();
        let (mut child, pid, leader) = spawn(sleeper(), leaders.clone()).await.expect("forked");
        assert!(leaders.is_plugin_process(pid));
        child.start_kill().expect("kill");
        child.wait().await.expect("reaped by this runtime");
        drop(leader);
        assert!(!leaders.is_plugin_process(pid));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_command_that_cannot_run_is_an_error_and_the_thread_lives_on() {
        let bad = Command::new("/nonexistent/toolhost-test-binary");
        assert!(spawn(bad, Leaders::default()).await.is_err());
        let mut ok = Command::new("true");
        ok.kill_on_drop(true);
        let (mut child, _, _leader) = spawn(ok, Leaders::default()).await.expect("still forks");
        assert!(child.wait().await.expect("reaped").success());
    }
}
