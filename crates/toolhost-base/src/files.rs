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
//!   daemon from recording it. So the daemon keeps a [`Reserve`]: a file
//!   of allocated blocks in its state directory. A write that fails for
//!   lack of space gives back a piece of it and tries once more.
//!
//! What this module must not do: follow a link when it creates a file,
//! leave a temporary file behind, or loosen a directory's mode.

use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
        Err(e) if is_out_of_space(&e) && reserve::release_for(bytes.len()) => {
            tracing::warn!(
                file = %path.display(),
                "the disk holding the daemon's state is full: this write used the daemon's reserve (free space on it; the reserve is taken back once there is room)"
            );
            write_once(dir, path, bytes, durability)
        }
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

/// Space the daemon keeps for its own state: a file of allocated blocks,
/// given back a piece at a time when a private write finds the disk full,
/// and taken again when there is room.
#[derive(Debug)]
pub struct Reserve {
    path: PathBuf,
    /// The size it is kept at.
    size: u64,
}

mod reserve {
    use super::{Mutex, Reserve};

    /// The daemon's one reserve (a process serves one state directory).
    pub(super) static KEPT: Mutex<Option<Reserve>> = Mutex::new(None);

    /// Shrinks the reserve by enough for a write of `len` bytes (twice
    /// that, at least 1 MiB, for the temporary file and the directory);
    /// `false` when there is none left to give.
    pub(super) fn release_for(len: usize) -> bool {
        let Ok(guard) = KEPT.lock() else {
            return false;
        };
        let Some(r) = guard.as_ref() else {
            return false;
        };
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(&r.path) else {
            return false;
        };
        let Ok(held) = file.metadata().map(|m| m.len()) else {
            return false;
        };
        if held == 0 {
            return false;
        }
        let piece = (len as u64).saturating_mul(2).max(1 << 20);
        let left = held.saturating_sub(piece);
        if file.set_len(left).is_err() {
            return false;
        }
        // Truncation frees the blocks; sync so that the space is counted
        // before the retry.
        let _ = file.sync_all();
        true
    }
}

impl Reserve {
    /// Keeps a reserve of `size` bytes at `path` for this process's
    /// private writes, allocating what it can now. Returns how many bytes
    /// are held (less than `size` when the disk has less room).
    pub fn keep(path: &Path, size: u64) -> io::Result<u64> {
        let reserve = Self {
            path: path.to_path_buf(),
            size,
        };
        let held = reserve.fill()?;
        if let Ok(mut kept) = reserve::KEPT.lock() {
            *kept = Some(reserve);
        }
        Ok(held)
    }

    /// Takes the reserve back up to its size where the disk has room
    /// again; how many bytes it holds now. Called after a write succeeds
    /// and from time to time.
    pub fn replenish() -> Option<u64> {
        let kept = reserve::KEPT.lock().ok()?;
        kept.as_ref()?.fill().ok()
    }

    /// The bytes the reserve holds now, and the size it is kept at.
    #[must_use]
    pub fn held() -> Option<(u64, u64)> {
        let kept = reserve::KEPT.lock().ok()?;
        let r = kept.as_ref()?;
        let blocks = std::fs::metadata(&r.path).ok()?.blocks();
        Some((blocks.saturating_mul(512), r.size))
    }

    /// Allocates the file's blocks up to `size`, as far as the disk
    /// allows (a sparse file would reserve nothing).
    fn fill(&self) -> io::Result<u64> {
        if let Some(dir) = self.path.parent() {
            private_dir(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
            .open(&self.path)?;
        let mut held = file.metadata()?.blocks().saturating_mul(512);
        // In steps, so a nearly full disk still yields what it has.
        let step = (self.size / 16).max(1 << 20);
        while held < self.size {
            let len = step.min(self.size - held);
            let allocated =
                rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), held, len);
            match allocated {
                Ok(()) => held += len,
                Err(e) if e == rustix::io::Errno::NOSPC || e == rustix::io::Errno::DQUOT => break,
                Err(e) => return Err(e.into()),
            }
        }
        file.sync_all()?;
        Ok(file.metadata()?.blocks().saturating_mul(512).min(self.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

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

    #[test]
    fn the_reserve_holds_blocks_and_gives_them_back_in_pieces() {
        let dir = scratch("reserve");
        let path = dir.join(".reserve");
        let held = Reserve::keep(&path, 4 << 20).unwrap();
        assert_eq!(held, 4 << 20);
        assert!(reserve::release_for(100));
        let (now, size) = Reserve::held().unwrap();
        assert_eq!(size, 4 << 20);
        assert_eq!(now, 3 << 20, "one MiB given back");
        assert_eq!(Reserve::replenish(), Some(4 << 20));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
