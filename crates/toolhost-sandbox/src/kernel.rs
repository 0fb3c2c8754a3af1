//! What this kernel offers the sandbox, probed once per daemon: Landlock's
//! ABI, a pids cgroup of the daemon's own, and whether the daemon is root
//! (root ignores `RLIMIT_NPROC`); and what follows from the daemon's
//! cgroup: which processes are in it, and its removal at shutdown.

use std::path::PathBuf;
use std::sync::OnceLock;

/// What this kernel offers, probed once.
#[derive(Debug)]
pub(crate) struct Kernel {
    /// Landlock's ABI version; 0 when absent or disabled.
    pub(crate) landlock_abi: u32,
    /// This daemon's pids cgroup directory, or why there is none.
    pub(crate) pids: Result<PathBuf, String>,
    /// Whether the daemon runs as root.
    pub(crate) root: bool,
}

/// The probe's answer (made on first use).
pub(crate) fn kernel() -> &'static Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    KERNEL.get_or_init(|| Kernel {
        landlock_abi: crate::landlock::abi(),
        pids: crate::cgroup::pids_root(),
        root: rustix::process::geteuid().is_root(),
    })
}

/// Whether `pid` is in one of this daemon's plugin cgroups. `false` when
/// this daemon has none, or when `pid` is gone.
#[must_use]
pub fn in_plugin_cgroup(pid: u32) -> bool {
    let Ok(root) = &kernel().pids else {
        return false;
    };
    let Some(name) = root.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|c| c.contains(&format!("/{name}/")))
}

/// Removes this daemon's cgroup directory (at shutdown, once plugins are
/// stopped).
pub fn remove_cgroup_root() {
    if let Ok(dir) = &kernel().pids {
        let _ = std::fs::remove_dir(dir);
    }
}
