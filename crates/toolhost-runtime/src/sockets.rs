//! Where plugins put their sockets: a directory toolhost creates for each
//! plugin process, 0700, and removes when that process ends.
//!
//! All of one daemon's socket directories live under one run directory,
//! `$TMPDIR/toolhost-<pid>-<random>/` (0700), so they stay short (a Unix
//! socket path has at most 107 bytes) and a daemon that was killed leaves
//! one directory that the next daemon removes at start.
//!
//! A plugin is told its directory twice: as `KANDEV_PLUGIN_SOCKET_DIR`, and
//! as `TMPDIR`, so a plugin that makes its socket in a temporary directory
//! (the SDKs do, and so does Python's `tempfile`) lands in it without
//! knowing. Its handshake must name a socket inside that directory: a
//! plugin cannot point toolhost at another plugin's socket.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

const PREFIX: &str = "toolhost-";

static RUN_DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(1);

fn private(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// This daemon's run directory, created on first use.
fn run_dir() -> std::io::Result<&'static Path> {
    let made = RUN_DIR.get_or_init(|| {
        let base = std::env::temp_dir();
        (0..16)
            .find_map(|_| {
                let dir = base.join(format!(
                    "{PREFIX}{}-{:08x}",
                    std::process::id(),
                    fastrand::u32(..)
                ));
                private(&dir).ok().map(|()| dir)
            })
            .ok_or_else(|| format!("cannot create a run directory in {}", base.display()))
    });
    match made {
        Ok(dir) => Ok(dir),
        Err(e) => Err(std::io::Error::other(e.clone())),
    }
}

/// Removes the run directories of daemons that are no longer running
/// (owned by this user, named for a process that does not exist).
pub fn remove_stale_run_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let me = rustix::process::getuid().as_raw();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let ours =
            std::fs::symlink_metadata(entry.path()).is_ok_and(|m| m.is_dir() && m.uid() == me);
        let alive = rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        if ours && !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Removes this daemon's run directory (at shutdown, once plugins stopped).
pub fn remove_run_dir() {
    if let Some(Ok(dir)) = RUN_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// One plugin process's socket directory; removed when dropped.
#[derive(Debug)]
pub(crate) struct SocketDir(PathBuf);

impl SocketDir {
    /// A fresh 0700 directory for one plugin process.
    pub(crate) fn create() -> std::io::Result<Self> {
        let dir = run_dir()?.join(NEXT.fetch_add(1, Ordering::Relaxed).to_string());
        private(&dir)?;
        Ok(Self(dir))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Whether `socket` is inside this directory: a plain path under it (no
    /// `..`), whose parent resolves, through any symlinks, to a place still
    /// inside it.
    pub(crate) fn contains(&self, socket: &Path) -> bool {
        if socket
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return false;
        }
        let (Some(parent), Ok(root)) = (socket.parent(), std::fs::canonicalize(&self.0)) else {
            return false;
        };
        std::fs::canonicalize(parent).is_ok_and(|p| p.starts_with(&root))
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_dir_is_private_knows_its_own_and_goes_away() {
        let Ok(dir) = SocketDir::create() else {
            panic!("cannot create a socket directory");
        };
        let path = dir.path().to_path_buf();
        let mode = std::fs::metadata(&path).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o700));
        assert!(dir.contains(&path.join("plugin.sock")));
        assert!(!dir.contains(&path.join("../1/plugin.sock")));
        assert!(!dir.contains(Path::new("/tmp/elsewhere/plugin.sock")));
        let Ok(other) = SocketDir::create() else {
            panic!("cannot create a socket directory");
        };
        assert!(!dir.contains(&other.path().join("plugin.sock")));
        drop(dir);
        assert!(!path.exists());
    }
}
