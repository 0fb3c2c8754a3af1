//! The pids cgroups: one per plugin process, below one per daemon.
//!
//! A cgroup's `pids.max` stops a fork bomb whatever the user (root ignores
//! `RLIMIT_NPROC`, and that limit counts every process of the user), and
//! its member list lets toolhost kill every process a plugin started, even
//! one that left its process group. Membership is also how the admin
//! socket tells a plugin's process from the operator's
//! (the kernel module's `in_plugin_cgroup`): no sandboxed process can leave its
//! cgroup.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Makes `<own pids cgroup>/toolhost-<pid>`, where each plugin process gets
/// a cgroup of its own. Stale directories of daemons that are gone are
/// removed on the way.
pub(crate) fn pids_root() -> Result<PathBuf, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let v1 = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "pids")
            .then(|| Path::new("/sys/fs/cgroup/pids").join(path.trim_start_matches('/')))
    });
    let base = match v1 {
        Some(dir) if dir.join("cgroup.procs").exists() => dir,
        _ => {
            let path = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .ok_or("no pids cgroup (neither cgroup v1's pids nor cgroup v2)")?;
            let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            let controllers =
                std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            if !controllers.split_whitespace().any(|c| c == "pids") {
                return Err("the pids controller is not available to this daemon's cgroup".into());
            }
            dir
        }
    };
    remove_stale_cgroups(&base);
    let mine = base.join(format!("toolhost-{}", std::process::id()));
    match std::fs::create_dir(&mine) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", mine.display())),
    }
    if !mine.join("pids.max").exists() {
        // cgroup v2: the controller must be enabled for the children.
        let _ = std::fs::write(mine.join("cgroup.subtree_control"), "+pids");
    }
    // v1 has pids.max in every directory; v2 only in the children once
    // enabled: try one.
    let probe = mine.join("probe");
    let _ = std::fs::create_dir(&probe);
    let works = probe.join("pids.max").exists();
    let _ = std::fs::remove_dir(&probe);
    if works {
        Ok(mine)
    } else {
        let _ = std::fs::remove_dir(&mine);
        Err("the pids controller cannot be enabled below this daemon's cgroup".into())
    }
}

fn remove_stale_cgroups(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolhost-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        if !alive {
            if let Ok(children) = std::fs::read_dir(e.path()) {
                for c in children.filter_map(Result::ok) {
                    if c.path().is_dir() {
                        kill_all(&c.path());
                        let _ = std::fs::remove_dir(c.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// SIGKILL to every process in a cgroup.
fn kill_all(dir: &Path) {
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
}

/// One process's pids cgroup; its processes are killed and the directory
/// removed when dropped.
#[derive(Debug)]
pub struct Jail {
    pub(crate) dir: PathBuf,
}

impl Jail {
    pub(crate) fn create(root: &Path, max: u64) -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let dir = root.join(NEXT.fetch_add(1, Ordering::Relaxed).to_string());
        std::fs::create_dir(&dir)?;
        let jail = Self { dir };
        std::fs::write(jail.dir.join("pids.max"), max.to_string())?;
        Ok(jail)
    }

    /// Whether any process is still in it.
    pub fn is_empty(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs")).map_or(true, |s| s.trim().is_empty())
    }

    /// The processes in it now.
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs")).map_or_else(
            |_| Vec::new(),
            |s| s.lines().filter_map(|l| l.trim().parse().ok()).collect(),
        )
    }

    /// SIGKILL to every process still in it: helpers that left the process
    /// group, the remains of a fork bomb.
    pub fn kill_all(&self) {
        kill_all(&self.dir);
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        self.kill_all();
        if std::fs::remove_dir(&self.dir).is_ok() {
            return;
        }
        // Killed processes leave the cgroup once reaped, a moment later.
        let dir = self.dir.clone();
        let _ = std::thread::Builder::new()
            .name("toolhost-cgroup-cleanup".into())
            .spawn(move || {
                for _ in 0..200 {
                    kill_all(&dir);
                    if std::fs::remove_dir(&dir).is_ok() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            });
    }
}
