//! The daemon's private files, written one way.
//!
//! Every file toolhost keeps for itself (the state file, configuration
//! values, the catalog fence and last-good snapshot, the admin token) and
//! every file it hands one plugin process (its configuration, its call
//! token) is written here, under one rule:
//!
//! - **Whole or not at all.** [`write_private`] writes a fresh temporary
//!   file beside the target (created new, never through a link), syncs it,
//!   renames it over the target and syncs the directory: a crash leaves
//!   the old file or the new one. A failure removes the temporary file.
//! - **Private whatever the umask.** Files are `0600`. A directory made
//!   here ([`private_dir`]) is `0700`, and is never readable or writable
//!   by others; but a search bit that the `[sandbox] user` hand-over gave
//!   it (so that the plugins' account can reach its data beneath) is
//!   kept. A rule that took it away on every write was what made each
//!   lifecycle operation lock every running plugin out of its data.
//! - **The daemon's state outlives a full disk.** A plugin that fills the
//!   file system (through a path it was granted, or where no quota holds)
//!   must not stop the operator from changing the configuration or the
//!   daemon from recording it. So the daemon keeps a reserve of spare
//!   files (`crate::reserve`): a write that finds the disk full, of bytes
//!   or of inodes, is written into a spare's own blocks and exchanged with
//!   its target, taking nothing from the disk.
//!
//! What this module must not do: follow a link when it creates a file,
//! leave a temporary file behind, or loosen a directory's mode.

use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Creates `dir` (and its parents) if needed and makes it private: the
/// owner may do everything, group and others may not read or write. A
/// search bit already set for group or others (the hand-over to the
/// plugins' account) is kept, so this can never lock a plugin out.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mode = std::fs::metadata(dir)?.mode() & 0o7777;
    let wanted = 0o700 | (mode & 0o011);
    if mode != wanted {
        set_mode(dir, wanted)?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Writes `bytes` to `path` whole and privately (`0600`), in a private
/// directory: see the module's rule.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_private_as(path, bytes, Durability::Synced)
}

/// [`write_private`] without waiting for the disk: the file is replaced
/// whole (readers never see half of it while the machine runs), but after
/// a power loss it may be old, empty or torn. Only for a file whose reader
/// detects that, by a digest kept in a file written with
/// [`write_private`]: a large cache, where waiting for the disk on every
/// write would cost more than the file is worth.
pub fn write_private_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_private_as(path, bytes, Durability::Lazy)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Durability {
    Synced,
    Lazy,
}

fn write_private_as(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    private_dir(dir)?;
    match write_once(dir, path, bytes, durability) {
        Err(e) if is_out_of_space(&e) => match crate::reserve::write_from_spare(path, bytes) {
            Ok(true) => {
                tracing::warn!(
                    file = %path.display(),
                    "the disk holding the daemon's state is full: this write used a spare of the daemon's reserve (it is made again once there is room)"
                );
                Ok(())
            }
            Ok(false) => Err(e),
            Err(spare) => Err(spare),
        },
        other => other,
    }
}

/// Creates a new private file (`0600`) at `path` holding `bytes`: it
/// must not exist (so it is never written through a link someone put
/// there). For the files one plugin process is handed.
pub fn create_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

/// Removes `path`, which is gone already if it does not exist.
pub fn remove_private(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn write_once(dir: &Path, path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.{:016x}.tmp", random()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if durability == Durability::Lazy {
            drop(f);
            // Not a rename over the old file: ext4 (auto_da_alloc) starts
            // writing a file renamed over another out at once, in the
            // renaming thread, which is the wait this form exists to skip.
            // Between the two steps there is no file, which its reader
            // takes as none kept.
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            return std::fs::rename(&tmp, path);
        }
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A temporary name no other writer (another thread, another daemon on
/// the same directory by mistake) picks at the same time.
fn random() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// Whether `e` says the file system (or a quota on it) is full.
#[must_use]
pub fn is_out_of_space(e: &io::Error) -> bool {
    // ENOSPC and EDQUOT on Linux.
    matches!(e.raw_os_error(), Some(28 | 122)) || e.kind() == io::ErrorKind::StorageFull
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::PathBuf;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("base-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0)
    }

    #[test]
    fn a_write_is_whole_private_and_leaves_nothing_behind() {
        let dir = scratch("whole");
        let file = dir.join("state.json");
        write_private(&file, b"one").unwrap();
        write_private(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&dir), 0o700);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_is_never_opened_to_others_and_never_closed_to_the_plugins_account() {
        let dir = scratch("modes");
        std::fs::create_dir_all(&dir).unwrap();
        set_mode(&dir, 0o777).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o711, "read and write taken, search kept");
        // The hand-over's 0711 survives every later write.
        write_private(&dir.join("a"), b"x").unwrap();
        assert_eq!(mode(&dir), 0o711);
        set_mode(&dir, 0o755).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o711);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_file_is_never_written_through_what_is_there() {
        let dir = scratch("new");
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.join("token")).unwrap();
        assert!(create_private(&dir.join("token"), b"secret").is_err());
        assert!(!target.exists());
        create_private(&dir.join("fresh"), b"secret").unwrap();
        assert_eq!(mode(&dir.join("fresh")), 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
