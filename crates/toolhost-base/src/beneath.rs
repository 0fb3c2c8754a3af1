//! Files read and written beneath one directory, and nowhere else.
//!
//! The plugin author's tools (`check`, `serve --dev`, `schema sync`,
//! `harness`, `pack`) run on a plugin folder its author may have just
//! cloned: someone else's code, whose links and paths are data. A path
//! checked as text and then opened follows whatever `schemas` is a link to;
//! a check of the last component misses a linked folder in the middle; and
//! a check and an open are two moments. So every open here starts from a
//! descriptor of the root directory and asks the kernel to resolve the
//! rest beneath it (`openat2` with `RESOLVE_BENEATH`): a `..` that climbs
//! out, an absolute link, or a link that leads outside fails the open
//! (`EXDEV`), whenever it appears. Writes go further and follow no link at
//! all (`RESOLVE_NO_SYMLINKS`): a write never lands through a link, even
//! one that stays inside.
//!
//! What this module must not do: open anything by a path string alone, or
//! create a file outside the root whatever the tree holds.

use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::io::{self, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// A directory whose files are opened beneath it.
#[derive(Debug)]
pub struct Beneath {
    root: OwnedFd,
    path: PathBuf,
}

/// A path that is not a plain relative path (`..`, absolute, empty).
fn not_relative(rel: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is not a relative path inside the plugin's folder",
            crate::text::escaped(&rel.to_string_lossy(), 200)
        ),
    )
}

/// What a failed open beneath the root means, in words.
fn explained(rel: &Path, root: &Path, e: rustix::io::Errno) -> io::Error {
    let shown = crate::text::escaped(&rel.to_string_lossy(), 200).into_owned();
    match e {
        rustix::io::Errno::XDEV => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{shown} leads outside {} (a link or `..` out of the folder): toolhost reads and writes only inside it",
                root.display()
            ),
        ),
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{shown} passes through a symbolic link (or a file where a folder should be): toolhost writes a plugin's files only through plain folders"
            ),
        ),
        e => io::Error::from(e),
    }
}

impl Beneath {
    /// The directory `root`.
    ///
    /// # Errors
    /// It cannot be opened as a directory.
    pub fn open(root: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(
            root,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            root: fd,
            path: root.to_path_buf(),
        })
    }

    /// The root's path, as given.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `rel` is a plain relative path: normal components only.
    fn check(rel: &Path) -> io::Result<()> {
        let plain = !rel.as_os_str().is_empty()
            && rel
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if plain {
            Ok(())
        } else {
            Err(not_relative(rel))
        }
    }

    /// The file `rel`, read whole, at most `max` bytes; links that stay
    /// beneath the root are followed.
    ///
    /// # Errors
    /// Not found, outside the root, or larger than `max`.
    pub fn read(&self, rel: &Path, max: u64) -> io::Result<Vec<u8>> {
        Self::check(rel)?;
        let fd = rustix::fs::openat2(
            &self.root,
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| explained(rel, &self.path, e))?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(max.saturating_add(1))
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("larger than {max} bytes"),
            ));
        }
        Ok(bytes)
    }

    /// Whether `rel` names something beneath the root (not through a link
    /// out).
    #[must_use]
    pub fn exists(&self, rel: &Path) -> bool {
        Self::check(rel).is_ok()
            && rustix::fs::openat2(
                &self.root,
                rel,
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            )
            .is_ok()
    }

    /// Removes the file `rel` (not through a link).
    ///
    /// # Errors
    /// A component is a link or missing, or the removal fails.
    pub fn remove(&self, rel: &Path) -> io::Result<()> {
        Self::check(rel)?;
        let name = rel.file_name().ok_or_else(|| not_relative(rel))?;
        let dir = match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            None => rustix::io::dup(&self.root)?,
            Some(parent) => rustix::fs::openat2(
                &self.root,
                parent,
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
            .map_err(|e| explained(rel, &self.path, e))?,
        };
        rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty()).map_err(io::Error::from)
    }

    /// Writes `bytes` to `rel` whole (a fresh file renamed over the old
    /// one), making its folders; no component may be a link.
    ///
    /// # Errors
    /// A component is a link or not a folder, or the write fails.
    pub fn write(&self, rel: &Path, bytes: &[u8]) -> io::Result<()> {
        Self::check(rel)?;
        let name = rel.file_name().ok_or_else(|| not_relative(rel))?;
        let strict =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let mut dir = rustix::io::dup(&self.root)?;
        if let Some(parent) = rel.parent() {
            for part in parent.components() {
                let Component::Normal(part) = part else {
                    continue;
                };
                let open = |at: &OwnedFd| {
                    rustix::fs::openat2(
                        at,
                        part,
                        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                        Mode::empty(),
                        strict,
                    )
                };
                dir = match open(&dir) {
                    Ok(fd) => fd,
                    Err(rustix::io::Errno::NOENT) => {
                        rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755))?;
                        open(&dir).map_err(|e| explained(rel, &self.path, e))?
                    }
                    Err(e) => return Err(explained(rel, &self.path, e)),
                };
            }
        }
        let id = crate::ids::unguessable_id().map_err(io::Error::other)?;
        let tmp = format!(".{}.{}.tmp", name.to_string_lossy(), &id[..12]);
        let fd = rustix::fs::openat2(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o644),
            strict,
        )
        .map_err(|e| explained(rel, &self.path, e))?;
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(bytes).and_then(|()| file.flush());
        drop(file);
        let renamed = written.and_then(|()| {
            rustix::fs::renameat(&dir, tmp.as_str(), &dir, name).map_err(io::Error::from)
        });
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        }
        renamed
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::*;

    fn scratch() -> PathBuf {
        let id = crate::ids::unguessable_id().unwrap();
        let d = std::env::temp_dir().join(format!("th-beneath-{id}"));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_write_lands_inside_and_makes_its_folders() {
        let root = scratch();
        let b = Beneath::open(&root).unwrap();
        b.write(Path::new("schemas/deep/x.json"), b"{}").unwrap();
        assert_eq!(
            std::fs::read(root.join("schemas/deep/x.json")).unwrap(),
            b"{}"
        );
        b.write(Path::new("schemas/deep/x.json"), b"[]").unwrap();
        assert_eq!(b.read(Path::new("schemas/deep/x.json"), 10).unwrap(), b"[]");
        let _ = std::fs::remove_dir_all(root);
    }

    /// `schemas` is a link to a folder outside: the write is refused and
    /// nothing lands there.
    #[test]
    fn a_linked_folder_is_never_written_through() {
        let (root, outside) = (scratch(), scratch());
        std::os::unix::fs::symlink(&outside, root.join("schemas")).unwrap();
        let b = Beneath::open(&root).unwrap();
        let e = b.write(Path::new("schemas/x.json"), b"{}").unwrap_err();
        assert!(
            e.to_string().contains("symbolic link") || e.to_string().contains("outside"),
            "{e}"
        );
        assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
        // Even a link that stays inside is not written through.
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink("real", root.join("alias")).unwrap();
        assert!(b.write(Path::new("alias/x.json"), b"{}").is_err());
        let _ = std::fs::remove_dir_all(root);
        let _ = std::fs::remove_dir_all(outside);
    }

    #[test]
    fn a_read_stays_beneath_whatever_the_links_say() {
        let (root, outside) = (scratch(), scratch());
        std::fs::write(outside.join("secret.json"), "{\"key\": 1}").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("schemas")).unwrap();
        std::os::unix::fs::symlink("../../etc/passwd", root.join("up")).unwrap();
        let b = Beneath::open(&root).unwrap();
        assert!(b.read(Path::new("schemas/secret.json"), 100).is_err());
        assert!(b.read(Path::new("up"), 100_000).is_err());
        assert!(!b.exists(Path::new("schemas/secret.json")));
        for bad in ["../x", "/etc/passwd", ""] {
            assert!(b.read(Path::new(bad), 100).is_err(), "{bad}");
            assert!(b.write(Path::new(bad), b"x").is_err(), "{bad}");
        }
        // A link inside, to a file inside, is read.
        std::fs::write(root.join("a.json"), "{}").unwrap();
        std::os::unix::fs::symlink("a.json", root.join("b.json")).unwrap();
        assert_eq!(b.read(Path::new("b.json"), 10).unwrap(), b"{}");
        let _ = std::fs::remove_dir_all(root);
        let _ = std::fs::remove_dir_all(outside);
    }
}
