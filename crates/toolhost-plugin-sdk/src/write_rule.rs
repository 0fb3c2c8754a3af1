//! The sandbox's rule for writes, held in the test harness: where the
//! kernel has Landlock, the handlers a [`crate::testing::Harness`] runs run
//! on a thread of their own that may write only beneath the data directory
//! (and the temporary directory, where `$TMPDIR` points inside the data
//! directory under the daemon). A handler that writes beside its code then
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

/// Landlock's filesystem rights that write (ABI 1), then REFER (ABI 2) and
/// TRUNCATE (ABI 3).
#[cfg(target_os = "linux")]
const WRITES: u64 = (1 << 1) // WRITE_FILE
    | (1 << 4) // REMOVE_DIR
    | (1 << 5) // REMOVE_FILE
    | (1 << 6) // MAKE_CHAR
    | (1 << 7) // MAKE_DIR
    | (1 << 8) // MAKE_REG
    | (1 << 9) // MAKE_SOCK
    | (1 << 10) // MAKE_FIFO
    | (1 << 11) // MAKE_BLOCK
    | (1 << 12); // MAKE_SYM
#[cfg(target_os = "linux")]
const REFER: u64 = 1 << 13;
#[cfg(target_os = "linux")]
const TRUNCATE: u64 = 1 << 14;

/// Restricts the calling thread (and threads it starts) to writing beneath
/// `writable`. Whether the rule holds: false where the kernel has no
/// Landlock, or a step failed (then nothing was restricted).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn restrict_writes(writable: &[PathBuf]) -> bool {
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt as _;

    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }

    // SAFETY: landlock_create_ruleset with no attribute and the VERSION
    // flag only reports the ABI.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    if abi < 1 {
        return false;
    }
    let mut handled = WRITES;
    if abi >= 2 {
        handled |= REFER;
    }
    if abi >= 3 {
        handled |= TRUNCATE;
    }
    // SAFETY: the attribute is the first field of landlock_ruleset_attr
    // (handled_access_fs), and its size is given.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &raw const handled,
            std::mem::size_of::<u64>(),
            0u32,
        )
    };
    let Ok(ruleset) = i32::try_from(ruleset) else {
        return false;
    };
    if ruleset < 0 {
        return false;
    }
    // SAFETY: a new descriptor the kernel just returned, owned here only.
    let ruleset = unsafe { OwnedFd::from_raw_fd(ruleset) };
    // /dev/null is written by any child started with its output dropped;
    // the daemon's sandbox allows it too. A rule on a file carries file
    // rights only.
    let null = PathBuf::from("/dev/null");
    for path in writable.iter().chain([&null]) {
        let Ok(parent) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(path)
        else {
            continue;
        };
        let is_dir = parent.metadata().is_ok_and(|m| m.is_dir());
        let rule = PathBeneath {
            allowed_access: if is_dir {
                handled
            } else {
                handled & ((1 << 1) | TRUNCATE)
            },
            parent_fd: parent.as_raw_fd(),
        };
        // SAFETY: a path-beneath rule (type 1) whose struct is the kernel's
        // packed landlock_path_beneath_attr; both descriptors are open.
        let added = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                1u32,
                &raw const rule,
                0u32,
            )
        };
        if added != 0 {
            return false;
        }
    }
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) binds this thread only, and is
    // what an unprivileged landlock_restrict_self requires.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return false;
    }
    // SAFETY: restricts the calling thread with an open ruleset.
    unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn restrict_writes(_writable: &[PathBuf]) -> bool {
    false
}
