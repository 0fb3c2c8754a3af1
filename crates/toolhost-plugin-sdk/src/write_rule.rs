//! The sandbox's rule for writes, held in the test harness: where the
//! kernel has Landlock, the handlers the test harness (`Harness`) runs run
//! on a thread of their own that may write only beneath the data directory
//! (and the temporary directory, where `$TMPDIR` points inside the data
//! directory under the daemon, unless the plugin's own folder is in it). A handler that writes beside its code then
//! fails its test as it would fail under toolhost's sandbox, instead of
//! passing here and failing in production with only the daemon's log to
//! say why.
//!
//! Reads are not restricted: the daemon's read rules depend on the
//! operator's configuration, and a test that reads its fixtures must work.
//! The test's own code runs on its own threads and writes where it likes.
//!
//! What this module must not do: restrict any thread but the one it
//! makes (Landlock binds a thread and the threads it starts later), or
//! fail a harness on a kernel without Landlock (there the rule is not
//! held, as the SDK's docs say).

use std::path::PathBuf;

/// A thread with a runtime for handlers, restricted to writing beneath the
/// given directories where the kernel can.
pub(crate) struct HandlerThread {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl HandlerThread {
    pub(crate) fn start(writable: Vec<PathBuf>) -> std::io::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("toolhost-harness-handlers".into())
            .spawn(move || {
                restrict_writes(&writable);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => {
                        let _ = ready_tx.send(Ok(runtime.handle().clone()));
                        runtime.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })?;
        let handle = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the harness's handler thread ended"))??;
        Ok(Self {
            handle,
            stop: Some(stop),
        })
    }

    /// Where a handler's task is spawned.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Drop for HandlerThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Restricts the calling thread (and the threads it starts later) to
/// writing beneath `writable` and to `/dev/null` (written by any child
/// started with its output dropped; the daemon's sandbox allows it too).
/// Whether the rule holds: false where the kernel has no Landlock, or a
/// step failed. Landlock's crate does the system calls, best effort: an
/// older kernel enforces what it knows.
#[cfg(target_os = "linux")]
fn restrict_writes(writable: &[PathBuf]) -> bool {
    use landlock::{
        ABI, AccessFs, Ruleset, RulesetAttr as _, RulesetCreatedAttr as _, RulesetStatus,
    };
    // ABI 3's writes: write, make, remove, link (refer) and truncate; not
    // ioctl, which the daemon does not restrict either.
    let writes = AccessFs::from_write(ABI::V3);
    let paths = writable
        .iter()
        .map(PathBuf::as_path)
        .chain([std::path::Path::new("/dev/null")]);
    let restricted = Ruleset::default()
        .handle_access(writes)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(landlock::path_beneath_rules(paths, writes)))
        .and_then(|r| r.restrict_self());
    restricted.is_ok_and(|s| s.ruleset != RulesetStatus::NotEnforced)
}

#[cfg(not(target_os = "linux"))]
fn restrict_writes(_writable: &[PathBuf]) -> bool {
    false
}
