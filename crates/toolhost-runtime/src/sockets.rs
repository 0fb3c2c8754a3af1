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
//!
//! The directory is the plugin's to write in, so a check of the path made
//! once, at the handshake, does not hold later: the plugin can swap its
//! socket, or a directory on the way to it, for a symlink to another
//! plugin's socket at any moment, and toolhost connects again (a protocol-1
//! call's link, a health check's reconnect). So every connection goes
//! through [`connect_pinned`]: the handshake's socket is pinned to its
//! resolved path once ([`pin`]), and each connect opens the path without
//! following a final symlink, checks that the descriptor is a socket whose
//! resolved path is still the pinned one, and connects through that
//! descriptor (`/proc/self/fd/N`), so what was checked is what is reached.

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

/// The handshake's socket as the path it resolves to now (its parent
/// resolved through any symlinks, its own name kept): what every later
/// connection must still reach. `None` for a path without a file name.
pub(crate) fn pin(socket: &Path) -> Option<PathBuf> {
    let name = socket.file_name()?;
    let parent = std::fs::canonicalize(socket.parent()?).ok()?;
    Some(parent.join(name))
}

/// Connects to the socket at `pinned` (from [`pin`]) only if the path still
/// leads to it without a symlink anywhere on the way: see the module's
/// docs. The error says which check failed, never more than the path.
pub(crate) async fn connect_pinned(pinned: &Path) -> std::io::Result<tokio::net::UnixStream> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::os::fd::AsRawFd as _;
    let fd = rustix::fs::open(
        pinned,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind != FileType::Socket {
        let what = if kind == FileType::Symlink {
            "the socket is a symlink"
        } else {
            "the socket's path is not a socket"
        };
        return Err(std::io::Error::other(what));
    }
    // The descriptor's own path, as the kernel resolved it: a symlinked
    // directory on the way shows here as a different path.
    let through = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    if std::fs::read_link(&through)? != pinned {
        return Err(std::io::Error::other(
            "the socket's path leads elsewhere now (a symlink on the way)",
        ));
    }
    let stream = tokio::net::UnixStream::connect(&through).await;
    drop(fd);
    stream
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

    /// A plugin's directory with `sub/plugin.sock` listening, and another
    /// plugin's directory with its own socket: the target of each attack.
    fn two_plugins() -> (
        tempfile::TempDir,
        tempfile::TempDir,
        tokio::net::UnixListener,
        tokio::net::UnixListener,
    ) {
        let (Ok(mine), Ok(theirs)) = (tempfile::tempdir(), tempfile::tempdir()) else {
            panic!("temporary directories");
        };
        std::fs::create_dir(mine.path().join("sub")).expect("sub");
        std::fs::create_dir(theirs.path().join("sub")).expect("sub");
        let own =
            tokio::net::UnixListener::bind(mine.path().join("sub/plugin.sock")).expect("bind own");
        let other = tokio::net::UnixListener::bind(theirs.path().join("sub/plugin.sock"))
            .expect("bind other");
        (mine, theirs, own, other)
    }

    #[tokio::test]
    async fn a_pinned_socket_connects_while_its_path_is_what_was_pinned() {
        let (mine, _theirs, own, _other) = two_plugins();
        let pinned = pin(&mine.path().join("sub/plugin.sock")).expect("pin");
        connect_pinned(&pinned).await.expect("connects");
        own.accept()
            .await
            .expect("the connection reached the plugin's own socket");
    }

    #[tokio::test]
    async fn a_socket_swapped_for_a_symlink_after_the_handshake_is_refused() {
        let (mine, theirs, _own, _other) = two_plugins();
        let socket = mine.path().join("sub/plugin.sock");
        let pinned = pin(&socket).expect("pin");
        std::fs::remove_file(&socket).expect("remove");
        std::os::unix::fs::symlink(theirs.path().join("sub/plugin.sock"), &socket).expect("link");
        let e = connect_pinned(&pinned).await.expect_err("refused");
        assert_eq!(e.to_string(), "the socket is a symlink");
    }

    #[tokio::test]
    async fn a_directory_on_the_way_swapped_for_a_symlink_is_refused() {
        let (mine, theirs, _own, other) = two_plugins();
        let pinned = pin(&mine.path().join("sub/plugin.sock")).expect("pin");
        std::fs::rename(mine.path().join("sub"), mine.path().join("old")).expect("rename");
        std::os::unix::fs::symlink(theirs.path().join("sub"), mine.path().join("sub"))
            .expect("link");
        let e = connect_pinned(&pinned).await.expect_err("refused");
        assert!(e.to_string().contains("leads elsewhere"), "{e}");
        // Nothing reached the other plugin.
        let reached = tokio::time::timeout(std::time::Duration::ZERO, other.accept()).await;
        assert!(reached.is_err(), "the other plugin was connected to");
    }

    #[tokio::test]
    async fn a_path_that_is_not_a_socket_is_refused() {
        let (mine, _theirs, _own, _other) = two_plugins();
        let socket = mine.path().join("sub/plugin.sock");
        let pinned = pin(&socket).expect("pin");
        std::fs::remove_file(&socket).expect("remove");
        std::fs::write(&socket, b"not a socket").expect("write");
        let e = connect_pinned(&pinned).await.expect_err("refused");
        assert!(e.to_string().contains("not a socket"), "{e}");
    }
}
