//! Handing a plugin's directories to the account it runs as
//! (`[sandbox] user`, a root daemon only).
//!
//! The account owns exactly two places: the plugin's data directory
//! (everything in it, so files an earlier start left as root are its own
//! now) and its socket directory (with the configuration and call-token
//! files in it). The directories above them that toolhost made get search
//! permission for others (`0711`: reachable, not listable). Directories
//! toolhost did not make are never changed: if the account cannot reach
//! the plugin's files through them, the start fails and says which one.

use crate::policy::RunAs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Why a plugin cannot be started as its account.
#[derive(Debug, thiserror::Error)]
pub enum HandOverError {
    /// A directory on the way to the plugin's files is closed to it.
    #[error(
        "user {user:?} (uid {uid}) cannot reach {path}: {dir} (mode {mode:04o}, owner uid {owner}) has no search permission for it; `chmod o+x` it or install the plugin elsewhere"
    )]
    Unreachable {
        /// The account.
        user: String,
        /// Its uid.
        uid: u32,
        /// What it must reach.
        path: String,
        /// The closed directory.
        dir: String,
        /// Its mode.
        mode: u32,
        /// Its owner.
        owner: u32,
    },
    /// A change of owner or mode failed.
    #[error("cannot hand {path} to user {user:?}: {source}")]
    Io {
        /// The account.
        user: String,
        /// Where.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Hands `data_dir` and `socket_dir` to `user`, opens the directories
/// toolhost made above them for search (`made_by_toolhost`), and checks
/// that `user` can reach them and each of `needed` (its command, its
/// working directory).
pub fn hand_over(
    user: &RunAs,
    data_dir: &Path,
    socket_dir: &Path,
    made_by_toolhost: &[&Path],
    needed: &[&Path],
) -> Result<(), HandOverError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        let user = user.name.clone();
        move |source| HandOverError::Io { user, path, source }
    };
    for dir in made_by_toolhost {
        let mode = std::fs::metadata(dir).map_err(io(dir))?.mode() & 0o7777;
        if mode & 0o001 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o711))
                .map_err(io(dir))?;
        }
    }
    chown_tree(data_dir, user).map_err(io(data_dir))?;
    chown_tree(socket_dir, user).map_err(io(socket_dir))?;
    for target in needed.iter().copied().chain([data_dir, socket_dir]) {
        reachable(user, target)?;
    }
    Ok(())
}

/// A root daemon whose plugins no longer run as another account takes
/// their data back: root's plugins hold no capability, so a directory
/// still owned by the old account would be closed to them.
pub fn reclaim(data_dir: &Path) -> std::io::Result<()> {
    let me = rustix::process::geteuid();
    if !me.is_root() {
        return Ok(());
    }
    let owned_by_other = std::fs::symlink_metadata(data_dir).is_ok_and(|m| m.uid() != 0);
    if owned_by_other {
        let root = RunAs {
            name: "root".into(),
            uid: 0,
            gid: rustix::process::getegid().as_raw(),
        };
        chown_tree(data_dir, &root)?;
    }
    Ok(())
}

/// `path` and everything beneath it, owned by `user`. The walk goes by
/// descriptors opened with `O_NOFOLLOW` and changes owners relative to
/// them: a symbolic link is changed itself, never followed, and a
/// directory swapped for a link while the walk runs makes the walk fail,
/// not wander (another process of the same account could try exactly
/// that, to have root hand it something outside).
fn chown_tree(path: &Path, user: &RunAs) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Mode, OFlags, chownat, fchown, openat};
    let owner = Some(rustix::fs::Uid::from_raw(user.uid));
    let group = Some(rustix::fs::Gid::from_raw(user.gid));
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root = openat(rustix::fs::CWD, path, flags, Mode::empty())?;
    fchown(&root, owner, group)?;
    let mut stack = vec![root];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        for entry in rustix::fs::Dir::read_from(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            seen += 1;
            if seen > MAX_ENTRIES {
                return Err(std::io::Error::other(format!(
                    "more than {MAX_ENTRIES} entries beneath it"
                )));
            }
            if entry.file_type() == rustix::fs::FileType::Directory {
                // Opened without following: a link put in its place fails.
                let sub = openat(&dir, name, flags, Mode::empty())?;
                fchown(&sub, owner, group)?;
                stack.push(sub);
            } else {
                chownat(&dir, name, owner, group, AtFlags::SYMLINK_NOFOLLOW)?;
            }
        }
    }
    Ok(())
}

/// The most entries a data directory handed over may hold.
const MAX_ENTRIES: usize = 1_000_000;

/// Whether every directory above `target` lets `user` search it.
fn reachable(user: &RunAs, target: &Path) -> Result<(), HandOverError> {
    let mut dirs: Vec<PathBuf> = target.ancestors().skip(1).map(Path::to_path_buf).collect();
    dirs.retain(|d| !d.as_os_str().is_empty());
    for dir in dirs {
        let Ok(m) = std::fs::metadata(&dir) else {
            continue;
        };
        let mode = m.mode();
        let searchable = if m.uid() == user.uid {
            mode & 0o100 != 0
        } else if m.gid() == user.gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !searchable {
            return Err(HandOverError::Unreachable {
                user: user.name.clone(),
                uid: user.uid,
                path: target.display().to_string(),
                dir: dir.display().to_string(),
                mode: mode & 0o7777,
                owner: m.uid(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nobody() -> RunAs {
        RunAs {
            name: "nobody".into(),
            uid: 65_534,
            gid: 65_534,
        }
    }

    #[test]
    fn handing_over_changes_links_not_what_they_point_at() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        use std::os::unix::fs::MetadataExt as _;
        let root = std::env::temp_dir().join(format!("hand-links-{}", std::process::id()));
        let data = root.join("data");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        let outside = root.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "root's").unwrap();
        std::fs::write(data.join("sub/own"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, data.join("sub/link")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), data.join("file-link")).unwrap();
        chown_tree(&data, &nobody()).unwrap();
        let uid = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        assert_eq!(uid(&data.join("sub/own")), 65_534);
        assert_eq!(uid(&data.join("sub/link")), 65_534, "the link itself");
        assert_eq!(uid(&outside), 0, "not what it points at");
        assert_eq!(uid(&outside.join("secret")), 0);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_closed_directory_is_named_and_an_open_one_passes() {
        let root = std::env::temp_dir().join(format!("hand-over-{}", std::process::id()));
        let closed = root.join("closed");
        std::fs::create_dir_all(closed.join("in")).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711)).unwrap();
        let err = reachable(&nobody(), &closed.join("in/cmd")).unwrap_err();
        assert!(
            err.to_string().contains(&closed.display().to_string()),
            "{err}"
        );
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
        let open = reachable(&nobody(), &closed.join("in/cmd"));
        // Directories above the temporary directory are the machine's.
        if std::env::temp_dir()
            .ancestors()
            .all(|d| std::fs::metadata(d).map_or(true, |m| m.mode() & 0o001 != 0))
        {
            assert!(open.is_ok(), "{open:?}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
