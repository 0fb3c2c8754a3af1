//! A plugin's own temporary folder, `$TMPDIR`: `.tmp` in its data
//! directory, so that what it writes there counts against its quota and
//! goes read-only with its data (the daemon's own temporary directory,
//! which it once was, is outside every quota). And the rule for a socket
//! a plugin makes beneath it.
//!
//! What this module must not do: follow a link a plugin put where the
//! folder goes.

use std::path::{Path, PathBuf};

/// The name of a plugin's own temporary directory in its data directory.
pub(crate) const TEMP_DIR: &str = ".tmp";

/// The plugin's own temporary directory (`$TMPDIR`), `<data>/.tmp`, made
/// empty at each start: inside its data, so what it puts there counts
/// against its quota (bytes and files) and goes read-only with it. The
/// data directory itself when it cannot be made (a full disk).
pub(crate) fn temp_dir(data: &Path) -> PathBuf {
    match fresh_temp_dir(data) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(dir = %data.display(), "cannot make the plugin's temporary directory ({e}); its data directory stands in");
            data.to_path_buf()
        }
    }
}

/// Empties and makes `<data>/.tmp` through a descriptor of `data`: a
/// plugin still running (the process an upgrade replaces) may race to put
/// a link there, and a link is removed, never followed.
fn fresh_temp_dir(data: &Path) -> std::io::Result<PathBuf> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let t = data.join(TEMP_DIR);
    match std::fs::symlink_metadata(&t) {
        // std's removal of a tree never follows a link inside it.
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&t)?,
        Ok(_) => std::fs::remove_file(&t)?,
        Err(_) => {}
    }
    let dir = rustix::fs::open(
        data,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if let Err(e) = rustix::fs::mkdirat(&dir, TEMP_DIR, Mode::RWXU) {
        // Made again in between: whatever it is, not ours to use.
        let _ = rustix::fs::unlinkat(&dir, TEMP_DIR, AtFlags::empty());
        return Err(e.into());
    }
    let made = rustix::fs::openat(
        &dir,
        TEMP_DIR,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // Whatever the umask.
    rustix::fs::fchmod(&made, Mode::RWXU)?;
    Ok(t)
}

/// Whether `socket` is beneath `dir` (no `..`; its parent resolved).
pub(crate) fn within(dir: &Path, socket: &Path) -> bool {
    if socket
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return false;
    }
    let (Some(parent), Ok(root)) = (socket.parent(), std::fs::canonicalize(dir)) else {
        return false;
    };
    std::fs::canonicalize(parent).is_ok_and(|p| p.starts_with(&root))
}
