//! Space the daemon keeps for its own state, that no plugin can take.
//!
//! A plugin that fills the file system holding the daemon's state (through
//! a path it was granted, or where no kernel quota holds) must not stop the
//! operator's next change: `plugins config`, `disable`, `enable` each write
//! the state file or a plugin's values. A reserve that is *given back* when
//! the disk is full does not survive a plugin that keeps writing: the freed
//! blocks are the plugin's as soon as they are free, and its next write
//! takes them before the daemon's retry does. And a full disk is also one
//! with no free inodes, which no amount of bytes helps.
//!
//! So the reserve is never given back to the file system for the daemon's
//! own writes. It is a folder of **spare files** (`<state_dir>/.reserve/`),
//! each an inode holding blocks allocated past its end (`fallocate` with
//! `KEEP_SIZE`: the file is empty, the blocks are its own). A private
//! write that finds the disk full (`ENOSPC`, `EDQUOT`, bytes or inodes)
//! takes the smallest spare that fits, writes its bytes into the blocks
//! the spare already holds (nothing is allocated, nothing freed), and
//! renames it over its target, exchanging the two (`RENAME_EXCHANGE`): the
//! file it replaces, blocks and inode, becomes a spare in its place. No
//! inode is made, so it succeeds on a disk with no free block and no free
//! inode. A write of a file that did not exist uses up a spare; when there
//! is room again the watcher makes new ones and grows the spares that
//! came from replaced files back to their size ([`Reserve::replenish`]).
//!
//! An operation that must make new files on a full disk (an install
//! staging a package) asks for spares to be given back ([`Reserve::release`])
//! once the daemon has stopped every plugin that could take them: that is
//! the lifecycle's part.
//!
//! What this module must not do: free a spare during a write, follow a
//! link, or leave a spare outside its folder.

use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The daemon's one reserve (a process serves one state directory).
static KEPT: Mutex<Option<Reserve>> = Mutex::new(None);

/// The reserve: a folder of spare files of allocated blocks.
#[derive(Debug, Clone)]
pub struct Reserve {
    dir: PathBuf,
    /// The bytes the spares are kept at, together.
    bytes: u64,
    /// How many spares are kept.
    files: usize,
}

/// What the reserve holds now, and what it is kept at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Bytes allocated in its spares.
    pub bytes: u64,
    /// Spare files (each an inode).
    pub files: usize,
    /// The bytes it is kept at.
    pub want_bytes: u64,
    /// The spares it is kept at.
    pub want_files: usize,
}

impl Reserve {
    /// Keeps a reserve of `bytes` in `files` spares in the folder `dir`,
    /// for this process's private writes, making what it can now.
    ///
    /// # Errors
    /// The folder cannot be made.
    pub fn keep(dir: &Path, bytes: u64, files: usize) -> io::Result<Held> {
        let reserve = Self {
            dir: dir.to_path_buf(),
            bytes,
            files: files.max(1),
        };
        // Private, like every folder of the state (`files` writes through
        // this module, so it makes its own).
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        reserve.fill();
        let held = reserve.held();
        if let Ok(mut kept) = KEPT.lock() {
            *kept = Some(reserve);
        }
        Ok(held)
    }

    /// Makes spares back up to the reserve's size where the disk has room
    /// again; what it holds now. Called from time to time.
    pub fn replenish() -> Option<Held> {
        let r = KEPT.lock().ok()?.clone()?;
        r.fill();
        Some(r.held())
    }

    /// What the reserve holds now.
    #[must_use]
    pub fn held_now() -> Option<Held> {
        let r = KEPT.lock().ok()?.clone()?;
        Some(r.held())
    }

    /// The folder of the kept reserve, if there is one.
    #[must_use]
    pub fn folder() -> Option<PathBuf> {
        Some(KEPT.lock().ok()?.as_ref()?.dir.clone())
    }

    /// Gives spares back to the file system until at least `bytes` and
    /// `files` inodes are free for an operation that must make new files:
    /// only once nothing else can take them (the lifecycle stops the
    /// plugins that write first). Returns what was given back.
    pub fn release(bytes: u64, files: usize) -> (u64, usize) {
        let Some(r) = KEPT.lock().ok().and_then(|k| k.clone()) else {
            return (0, 0);
        };
        let mut spares = r.spares();
        // The largest first: the fewest spares for the bytes asked.
        spares.sort_by_key(|(_, size)| std::cmp::Reverse(*size));
        let (mut freed, mut count) = (0u64, 0usize);
        for (path, size) in spares {
            if freed >= bytes && count >= files {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                freed += size;
                count += 1;
            }
        }
        (freed, count)
    }

    /// The spares there are now: path and allocated bytes.
    fn spares(&self) -> Vec<(PathBuf, u64)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("spare-"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                m.is_file()
                    .then(|| (e.path(), m.blocks().saturating_mul(512)))
            })
            .collect()
    }

    fn held(&self) -> Held {
        let spares = self.spares();
        Held {
            bytes: spares.iter().map(|(_, b)| b).sum(),
            files: spares.len(),
            want_bytes: self.bytes,
            want_files: self.files,
        }
    }

    /// The sizes the spares are made at: half the bytes in one spare of
    /// each eighth (for the largest state files), the rest shared by the
    /// others (for the many small ones), every spare at least 64 KiB.
    fn size_of(&self, index: usize) -> u64 {
        let big = (self.files / 8).max(1);
        let n = self.files as u64;
        let size = if index < big {
            self.bytes / 2 / big as u64
        } else {
            (self.bytes / 2) / n.saturating_sub(big as u64).max(1)
        };
        size.max(64 * 1024)
    }

    /// Makes the missing spares and grows the small ones back, as far as
    /// the disk allows.
    fn fill(&self) {
        let spares = self.spares();
        let mut held: u64 = spares.iter().map(|(_, b)| b).sum();
        let mut have = std::collections::BTreeSet::new();
        for (path, allocated) in &spares {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let index = name
                .as_deref()
                .and_then(|n| n.strip_prefix("spare-"))
                .and_then(|n| n.parse::<usize>().ok());
            if let Some(n) = &name {
                have.insert(n.clone());
            }
            let want = self.size_of(index.unwrap_or(0) % self.files);
            if *allocated < want && regrow(path, want).is_ok() {
                held += want - allocated;
            }
        }
        let mut count = spares.len();
        for index in 0..self.files * 4 {
            if count >= self.files || held >= self.bytes {
                break;
            }
            let name = format!("spare-{index:04}");
            if have.contains(&name) {
                continue;
            }
            let size = self.size_of(index % self.files);
            match make_spare(&self.dir.join(&name), size) {
                Ok(()) => {
                    held += size;
                    count += 1;
                }
                Err(_) => break,
            }
        }
    }
}

/// Blocks past the end of `file`, up to `size` bytes, kept when it is
/// written (a sparse file would hold none).
fn allocate_past_end(file: &std::fs::File, size: u64) -> io::Result<()> {
    rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, size)
        .map_err(io::Error::from)
        .and_then(|()| file.sync_all())
}

/// A new spare: empty, holding `size` allocated bytes.
fn make_spare(path: &Path, size: u64) -> io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let allocated = allocate_past_end(&file, size);
    if allocated.is_err() {
        drop(file);
        let _ = std::fs::remove_file(path);
    }
    allocated
}

/// A spare that came from a replaced file, made empty and grown back to
/// `size` (when there is room: emptied first, so tried only then).
fn regrow(path: &Path, size: u64) -> io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(path)?;
    file.set_len(0)?;
    allocate_past_end(&file, size)
}

/// Writes `bytes` to `path` (in a folder on the reserve's file system)
/// from a spare: no block or inode is taken from the disk. `Ok(false)`
/// when there is no reserve, or no spare large enough.
///
/// # Errors
/// A spare was taken and the write or rename failed.
pub(crate) fn write_from_spare(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let Some(r) = KEPT.lock().ok().and_then(|k| k.clone()) else {
        return Ok(false);
    };
    let mut spares = r.spares();
    spares.sort_by_key(|(_, size)| *size);
    let Some((spare, _)) = spares
        .into_iter()
        .find(|(_, size)| *size >= bytes.len() as u64)
    else {
        return Ok(false);
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(&spare)?;
    // Into the blocks it holds: nothing is allocated. A spare that was a
    // replaced file is longer than the write only by what it held, and
    // cutting it frees no more than that.
    file.write_all(bytes)?;
    if file.metadata()?.len() > bytes.len() as u64 {
        file.set_len(bytes.len() as u64)?;
    }
    file.sync_all()?;
    drop(file);
    let exchanged = rustix::fs::renameat_with(
        rustix::fs::CWD,
        &spare,
        rustix::fs::CWD,
        path,
        rustix::fs::RenameFlags::EXCHANGE,
    );
    match exchanged {
        // What it replaced is a spare now, under the spare's name.
        Ok(()) => {}
        // Nothing to replace: the spare becomes the file.
        Err(rustix::io::Errno::NOENT) => std::fs::rename(&spare, path)?,
        Err(e) => return Err(e.into()),
    }
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::*;

    #[test]
    fn spares_hold_their_blocks_and_a_write_from_one_keeps_what_it_replaced() {
        let dir = std::env::temp_dir().join(format!("base-reserve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let held = Reserve::keep(&dir.join(".reserve"), 4 << 20, 8).unwrap();
        assert_eq!(held.files, 8);
        assert!(held.bytes >= 4 << 20, "{held:?}");
        let target = dir.join("state.json");
        std::fs::write(&target, b"old content").unwrap();
        assert!(write_from_spare(&target, b"{\"new\": 1}").unwrap());
        assert_eq!(std::fs::read(&target).unwrap(), b"{\"new\": 1}");
        // The old file is a spare now: as many spares as before.
        let now = Reserve::held_now().unwrap();
        assert_eq!(now.files, 8);
        // A new file uses one up; replenishing makes it again.
        assert!(write_from_spare(&dir.join("fresh.json"), b"{}").unwrap());
        assert_eq!(Reserve::held_now().unwrap().files, 7);
        assert_eq!(Reserve::replenish().unwrap().files, 8);
        let (freed, count) = Reserve::release(1, 2);
        assert!(freed > 0 && count == 2, "{freed} {count}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
