//! A plugin's disk quota: its data directory's size, held by the kernel
//! where the file system can, and measured where it cannot.
//!
//! Two kernel mechanisms, for a root daemon:
//!
//! - **A file system of its own** (`[sandbox] disk_quota = "image"`):
//!   the data directory is the mount point of an ext4 image the size of
//!   the quota (`<state_dir>/disks/<id>.img`, sparse), made at the
//!   plugin's first start (what the directory held is copied in) and
//!   mounted until the daemon stops. A write past it fails with `ENOSPC`,
//!   and fills nothing but the image. It works on any kernel with loop
//!   devices and ext4.
//! - **Project quotas**, where the file system holding the data has them:
//!   every file created beneath a directory with `PROJINHERIT` set belongs
//!   to its project, and a write past the project's hard limit fails with
//!   `EDQUOT`, whoever the writer is. [`Quota::apply`] gives a data
//!   directory a project (its own inode number, which no other live
//!   directory on that file system has), marks everything already in it,
//!   and sets the limit.
//!
//! Either needs a root daemon; anything less is [`Enforcement::Measured`],
//! and says why.
//!
//! A plugin must not be able to take its files out of its project: the
//! calls that change a file's project or its inherit flag
//! (`FS_IOC_FSSETXATTR`, `FS_IOC_SETFLAGS`, `file_setattr`) are refused by
//! the sandbox's seccomp filter (`guard_rules`).
//!
//! A quota is of bytes *and* files: a quota of bytes alone lets a plugin
//! take every inode with empty files. Its own file system is made with
//! that many inodes; a project quota gets an inode limit too.
//!
//! Everywhere, one file is held to the quota by `RLIMIT_FSIZE` (the child
//! ignores `SIGXFSZ`, so the write fails with `EFBIG` rather than killing
//! the plugin), and [`usage`] reads what the directory holds, bytes and
//! files: from the quota where there is one, else by walking it. The walk
//! counts what is on disk (a sparse file by its allocated blocks, a file
//! with many names once), and never stops short with a partial count: past
//! the quota's files it answers "over", whatever it has not seen.
//!
//! What this module must not do: follow a link while it walks a data
//! directory (the plugin could point one anywhere), or change a file's
//! owner or mode.

use std::os::fd::{AsFd, AsRawFd as _, OwnedFd};
use std::path::Path;

/// How a plugin's disk quota holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    /// The kernel refuses a write past it: how (`a file system of its
    /// own`, `a project quota`).
    Kernel(&'static str),
    /// Measured by the daemon; the reason the kernel cannot hold it.
    Measured(String),
}

/// A data directory's quota, once applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The limit, bytes.
    pub bytes: u64,
    /// The limit, files and folders.
    pub files: u64,
    /// How it holds.
    pub enforcement: Enforcement,
}

/// What a data directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Bytes on disk.
    pub bytes: u64,
    /// Files and folders (each inode once).
    pub files: u64,
}

impl Usage {
    /// Whether it is past `quota`.
    #[must_use]
    pub fn over(&self, quota: &Quota) -> bool {
        self.bytes > quota.bytes || self.files > quota.files
    }
}

/// `struct fsxattr` (linux/fs.h).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

/// `_IOR('X', 31, struct fsxattr)`.
const FS_IOC_FSGETXATTR: u64 = 0x801c_581f;
/// `_IOW('X', 32, struct fsxattr)`.
const FS_IOC_FSSETXATTR: u64 = 0x401c_5820;
/// `_IOW('f', 2, long)` and its 32-bit form.
const FS_IOC_SETFLAGS: u64 = 0x4008_6602;
const FS_IOC32_SETFLAGS: u64 = 0x4004_6602;
const FS_XFLAG_PROJINHERIT: u32 = 0x0000_0200;
/// `file_setattr(2)` (Linux 6.17), the same on every architecture.
const SYS_FILE_SETATTR: i64 = 469;
const PRJQUOTA: u32 = 2;
const Q_GETQUOTA: u32 = 0x80_0007;
const Q_SETQUOTA: u32 = 0x80_0008;
const QIF_BLIMITS: u32 = 1;
const QIF_ILIMITS: u32 = 4;
/// Quota blocks are 1 KiB, whatever the file system's block size.
const QUOTA_BLOCK: u64 = 1024;
/// The most entries marked with a project (a directory with more is
/// measured instead).
const MAX_WALK: usize = 1_000_000;

/// A quota record that says nothing, for the kernel to fill.
fn no_limits() -> libc::dqblk {
    libc::dqblk {
        dqb_bhardlimit: 0,
        dqb_bsoftlimit: 0,
        dqb_curspace: 0,
        dqb_ihardlimit: 0,
        dqb_isoftlimit: 0,
        dqb_curinodes: 0,
        dqb_btime: 0,
        dqb_itime: 0,
        dqb_valid: 0,
    }
}

fn qcmd(cmd: u32, kind: u32) -> u32 {
    (cmd << 8) | (kind & 0xff)
}

/// `quotactl_fd(2)` (Linux 5.14): a quota command on the file system that
/// holds `fd`.
#[allow(unsafe_code)]
fn quotactl_fd(fd: &impl AsFd, cmd: u32, id: u32, dq: &mut libc::dqblk) -> std::io::Result<()> {
    // SAFETY: one system call; `dq` is a live, writable dqblk of this
    // frame's caller, which the kernel reads or fills and does not keep.
    let r = unsafe {
        libc::syscall(
            libc::SYS_quotactl_fd,
            fd.as_fd().as_raw_fd(),
            cmd,
            id,
            std::ptr::from_mut(dq),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn get_xattr(fd: &impl AsFd) -> std::io::Result<FsXattr> {
    let mut attr = FsXattr::default();
    ioctl_xattr(fd, FS_IOC_FSGETXATTR, &mut attr)?;
    Ok(attr)
}

#[allow(unsafe_code)]
fn ioctl_xattr(fd: &impl AsFd, request: u64, attr: &mut FsXattr) -> std::io::Result<()> {
    // SAFETY: one ioctl with a pointer to an fsxattr of the caller's, the
    // size both requests encode; the kernel copies it and does not keep it.
    let r = unsafe {
        libc::ioctl(
            fd.as_fd().as_raw_fd(),
            request as libc::Ioctl,
            std::ptr::from_mut(attr),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags, open};
    Ok(open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

impl Quota {
    /// Holds `data_dir` to `bytes`: on a file system of its own when
    /// `image` names one (`[sandbox] disk = "image"`), else a project
    /// quota where the kernel can, else [`Enforcement::Measured`] with the
    /// reason.
    #[must_use]
    pub fn apply(data_dir: &Path, bytes: u64, files: u64, image: Option<&Path>) -> Self {
        // A file system's inode tables take its room: one inode per 4 KiB
        // at most (a 16 MiB image cannot hold 100,000).
        let files = if image.is_some() {
            files.min((bytes / 4096).max(64))
        } else {
            files
        };
        let enforcement = match image {
            Some(image) => match own_file_system(data_dir, image, bytes, files) {
                Ok(()) => Enforcement::Kernel("a file system of its own"),
                Err(why) => Enforcement::Measured(why),
            },
            None => match project_quota(data_dir, bytes, files) {
                Ok(()) => Enforcement::Kernel("a project quota"),
                Err(why) => Enforcement::Measured(why),
            },
        };
        Self {
            bytes,
            files,
            enforcement,
        }
    }
}

/// Data directories this daemon mounted an image on, to unmount at its end.
static MOUNTED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Whether `dir` is a mount point now (`/proc/self/mountinfo`).
fn is_mount_point(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = dir.to_string_lossy();
    info.lines().any(|line| {
        line.split(' ')
            .nth(4)
            .is_some_and(|mount_point| unescape_octal(mount_point) == want)
    })
}

/// mountinfo's `\040`-style escapes undone.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(v) = u8::from_str_radix(&text[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn run(program: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "{program} failed ({}): {}",
            out.status,
            toolhost_base::text::escaped(err.trim(), 300)
        ))
    }
}

/// Mounts (making it first, if need be) `image`, an ext4 file system of
/// `bytes`, on `data_dir`. An image that already exists is grown to
/// `bytes` if that is larger (never shrunk: that would need it unmounted
/// and could lose data; the status shows the quota asked for).
///
/// Kept whole on purpose: the image's creation, sizing, formatting and
/// mounting are one sequence in the order the kernel needs them, and each
/// step's error names its step.
fn own_file_system(data_dir: &Path, image: &Path, bytes: u64, files: u64) -> Result<(), String> {
    use std::ffi::OsStr;
    if !rustix::process::geteuid().is_root() {
        return Err("a file system of its own needs a root daemon".into());
    }
    if is_mount_point(data_dir) {
        return Ok(());
    }
    let dir = image.parent().ok_or("the image path has no directory")?;
    toolhost_base::files::private_dir(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let fresh = !image.exists();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(image)
        .map_err(|e| format!("cannot create the image {}: {e}", image.display()))?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    if size < bytes {
        // Sparse: the quota is a ceiling, not an allocation.
        file.set_len(bytes)
            .map_err(|e| format!("cannot size the image: {e}"))?;
    }
    drop(file);
    if fresh {
        // As many inodes as the quota's files (ext4 rounds up a little).
        let inodes = files.max(64).to_string();
        run(
            "mkfs.ext4",
            &[
                OsStr::new("-q"),
                OsStr::new("-F"),
                // No journal thread per plugin, no blocks kept for root.
                OsStr::new("-O"),
                OsStr::new("^has_journal"),
                OsStr::new("-m"),
                OsStr::new("0"),
                OsStr::new("-N"),
                OsStr::new(&inodes),
                image.as_os_str(),
            ],
        )
        .inspect_err(|_| {
            let _ = std::fs::remove_file(image);
        })?;
    } else if size < bytes {
        run(
            "e2fsck",
            &[OsStr::new("-f"), OsStr::new("-p"), image.as_os_str()],
        )?;
        run("resize2fs", &[image.as_os_str()])?;
    }
    // What the directory held before it had a file system of its own is
    // moved aside, and copied in once it is mounted.
    std::fs::create_dir_all(data_dir).map_err(|e| e.to_string())?;
    let held = std::fs::read_dir(data_dir)
        .map_err(|e| e.to_string())?
        .next()
        .is_some();
    let aside = data_dir.with_extension("before-image");
    if held {
        std::fs::rename(data_dir, &aside)
            .map_err(|e| format!("cannot move the data aside: {e}"))?;
        std::fs::create_dir(data_dir).map_err(|e| e.to_string())?;
    }
    let mounted = run(
        "mount",
        &[
            OsStr::new("-o"),
            OsStr::new("loop,nosuid,nodev"),
            image.as_os_str(),
            data_dir.as_os_str(),
        ],
    );
    if let Err(e) = mounted {
        if held {
            let _ = std::fs::remove_dir(data_dir);
            let _ = std::fs::rename(&aside, data_dir);
        }
        return Err(e);
    }
    if let Ok(mut m) = MOUNTED.lock() {
        m.push(data_dir.to_path_buf());
    }
    // ext4 makes lost+found; the plugin needs none.
    let _ = std::fs::remove_dir(data_dir.join("lost+found"));
    if held {
        let mut from = aside.clone().into_os_string();
        from.push("/.");
        run("cp", &[OsStr::new("-a"), &from, data_dir.as_os_str()])
            .map_err(|e| format!("cannot copy the data into its file system: {e}"))?;
        let _ = std::fs::remove_dir_all(&aside);
    }
    Ok(())
}

/// Unmounts the file system of its own under `data_dir`, if this daemon
/// mounted one (before its data is purged).
pub fn release(data_dir: &Path) {
    let mine = MOUNTED
        .lock()
        .map(|mut m| {
            let before = m.len();
            m.retain(|d| d != data_dir);
            m.len() != before
        })
        .unwrap_or(false);
    if mine || is_mount_point(data_dir) {
        let _ = run("umount", &[data_dir.as_os_str()]);
    }
}

/// Unmounts every data directory's own file system (at the daemon's end,
/// once its plugins have stopped).
pub fn release_all() {
    let all = MOUNTED
        .lock()
        .map(|mut m| std::mem::take(&mut *m))
        .unwrap_or_default();
    for dir in all {
        if let Err(e) = run("umount", &[dir.as_os_str()]) {
            tracing::warn!("cannot unmount the file system of {}: {e}", dir.display());
        }
    }
}

/// Makes `data_dir` a project with a hard limit of `bytes`; why not.
fn project_quota(data_dir: &Path, bytes: u64, files: u64) -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("project quotas need a root daemon".into());
    }
    let dir = open_dir(data_dir).map_err(|e| format!("cannot open the data directory: {e}"))?;
    let inode = rustix::fs::fstat(&dir).map_err(|e| e.to_string())?.st_ino;
    let project = u32::try_from(inode)
        .ok()
        .filter(|p| *p > 0)
        .ok_or("the data directory's inode number does not fit a project id")?;
    let mut dq = no_limits();
    // Project quotas must be on (and enforced) for this file system.
    quotactl_fd(&dir, qcmd(Q_GETQUOTA, PRJQUOTA), project, &mut dq).map_err(|e| {
        match e.raw_os_error() {
            Some(libc::ESRCH) => "the file system holding the data has no project quotas turned on (ext4: features project,quota, mounted prjquota; XFS: pquota)".to_owned(),
            Some(libc::ENOSYS) => "this kernel has no quotactl_fd (Linux 5.14)".to_owned(),
            Some(libc::ENOTTY | libc::EOPNOTSUPP | libc::EINVAL) => "the file system holding the data has no project quotas".to_owned(),
            _ => format!("project quotas cannot be read here: {e}"),
        }
    })?;
    mark_tree(&dir, project)
        .map_err(|e| format!("cannot give the data directory its project: {e}"))?;
    let mut limit = libc::dqblk {
        dqb_bhardlimit: bytes.div_ceil(QUOTA_BLOCK),
        dqb_bsoftlimit: bytes.div_ceil(QUOTA_BLOCK),
        dqb_ihardlimit: files,
        dqb_isoftlimit: files,
        dqb_valid: QIF_BLIMITS | QIF_ILIMITS,
        ..dq
    };
    quotactl_fd(&dir, qcmd(Q_SETQUOTA, PRJQUOTA), project, &mut limit)
        .map_err(|e| format!("cannot set the project's limit: {e}"))
}

/// Gives `dir` and everything beneath it `project` (and the inherit flag
/// on directories), by descriptors opened without following links.
fn mark_tree(dir: &OwnedFd, project: u32) -> std::io::Result<()> {
    use rustix::fs::{Dir, FileType, Mode, OFlags, openat};
    let mark = |fd: &OwnedFd, is_dir: bool| -> std::io::Result<()> {
        let mut attr = get_xattr(fd)?;
        let flags = if is_dir {
            attr.xflags | FS_XFLAG_PROJINHERIT
        } else {
            attr.xflags
        };
        if attr.projid != project || attr.xflags != flags {
            attr.projid = project;
            attr.xflags = flags;
            ioctl_xattr(fd, FS_IOC_FSSETXATTR, &mut attr)?;
        }
        Ok(())
    };
    mark(dir, true)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let mut stack = vec![rustix::io::dup(dir)?];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        for entry in Dir::read_from(&d)? {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            seen += 1;
            if seen > MAX_WALK {
                return Err(std::io::Error::other(format!(
                    "more than {MAX_WALK} entries beneath it"
                )));
            }
            match entry.file_type() {
                FileType::Directory => {
                    let sub = openat(&d, name, flags | OFlags::DIRECTORY, Mode::empty())?;
                    mark(&sub, true)?;
                    stack.push(sub);
                }
                FileType::RegularFile => {
                    let file = openat(&d, name, flags, Mode::empty())?;
                    mark(&file, false)?;
                }
                // Links and special files hold no data blocks to speak of.
                _ => {}
            }
        }
    }
    Ok(())
}

/// What `data_dir` holds: the file system's or the project's counts where
/// the kernel keeps them, else a walk of everything beneath it (links not
/// followed). `None` when it cannot be read.
#[must_use]
pub fn usage(data_dir: &Path, quota: &Quota) -> Option<Usage> {
    let dir = open_dir(data_dir).ok()?;
    if quota.enforcement == Enforcement::Kernel("a file system of its own") {
        let st = rustix::fs::fstatvfs(&dir).ok()?;
        return Some(Usage {
            bytes: st
                .f_blocks
                .saturating_sub(st.f_bfree)
                .saturating_mul(st.f_frsize),
            // The root folder and lost+found's inode are the file
            // system's own.
            files: st.f_files.saturating_sub(st.f_ffree).saturating_sub(11),
        });
    }
    if quota.enforcement == Enforcement::Kernel("a project quota") {
        let project = get_xattr(&dir).ok()?.projid;
        let mut dq = no_limits();
        if quotactl_fd(&dir, qcmd(Q_GETQUOTA, PRJQUOTA), project, &mut dq).is_ok() {
            return Some(Usage {
                bytes: dq.dqb_curspace,
                files: dq.dqb_curinodes,
            });
        }
    }
    walk(&dir, quota.files).ok()
}

/// Walks `dir`, counting each inode once by its blocks on disk. Past
/// `max_files` entries it stops and answers that many and one: over the
/// quota, whatever is left unseen (a count that stopped at a number of
/// names and answered what it had seen was a way past the quota). So is
/// anything it cannot look into (a folder the plugin made unreadable,
/// `chmod 000`, would otherwise hide what it holds): only a name removed
/// meanwhile is passed over.
///
/// Folders wait as paths, each opened beneath `dir` when its turn comes
/// (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: a folder the
/// plugin swaps for a link is not followed): one descriptor at a time,
/// however many folders a plugin makes side by side.
fn walk(dir: &OwnedFd, max_files: u64) -> std::io::Result<Usage> {
    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, fstat, openat2, statat};
    use std::os::unix::ffi::OsStrExt as _;
    let over = Usage {
        bytes: 0,
        files: max_files.saturating_add(1),
    };
    let mut used = Usage {
        bytes: fstat(dir)?.st_blocks.cast_unsigned().saturating_mul(512),
        files: 0,
    };
    // Inodes with more than one name, counted once.
    let mut linked = std::collections::HashSet::new();
    let mut pending: Vec<std::path::PathBuf> = vec![std::path::PathBuf::from(".")];
    while let Some(rel) = pending.pop() {
        let opened = openat2(
            dir,
            &rel,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        );
        let d = match opened {
            Ok(d) => d,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(_) => return Ok(over),
        };
        let Ok(entries) = Dir::read_from(&d) else {
            return Ok(over);
        };
        for entry in entries {
            let Ok(entry) = entry else {
                return Ok(over);
            };
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            used.files += 1;
            if used.files > max_files {
                return Ok(used);
            }
            let st = match statat(&d, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(_) => return Ok(over),
            };
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            if !is_dir && st.st_nlink > 1 && !linked.insert((st.st_dev, st.st_ino)) {
                // Another name of an inode already counted: a name, no
                // new blocks.
                continue;
            }
            used.bytes = used
                .bytes
                .saturating_add(st.st_blocks.cast_unsigned().saturating_mul(512));
            if is_dir {
                pending.push(rel.join(std::ffi::OsStr::from_bytes(name.to_bytes())));
            }
        }
    }
    Ok(used)
}

/// The seccomp rules that keep a plugin's files in its project: every
/// `ioctl` that sets a file's project or flags, and `file_setattr`, are
/// refused (system call number -> its rules; an empty list refuses every
/// call).
pub(crate) fn guard_rules()
-> Result<Vec<(i64, Vec<seccompiler::SeccompRule>)>, seccompiler::BackendError> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let request = |value: u64| -> Result<SeccompRule, seccompiler::BackendError> {
        SeccompRule::new(vec![SeccompCondition::new(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            value,
        )?])
    };
    Ok(vec![
        (
            libc::SYS_ioctl,
            vec![
                request(FS_IOC_FSSETXATTR)?,
                request(FS_IOC_SETFLAGS)?,
                request(FS_IOC32_SETFLAGS)?,
            ],
        ),
        (SYS_FILE_SETATTR, vec![]),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_measured_without_following_links() {
        let dir = std::env::temp_dir().join(format!("disk-usage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a"), vec![1u8; 64 * 1024]).unwrap();
        std::os::unix::fs::symlink("/usr", dir.join("usr")).unwrap();
        let measured = Quota {
            bytes: 1 << 20,
            files: 1000,
            enforcement: Enforcement::Measured("test".into()),
        };
        let used = usage(&dir, &measured).unwrap();
        assert!(used.bytes >= 64 * 1024, "{used:?}");
        assert!(used.bytes < 1 << 20, "{used:?}: /usr was not counted");
        assert_eq!(used.files, 3, "sub, sub/a and the link");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Many names of one file are its blocks once and a name each; past
    /// the quota's files the walk answers "over" without counting on.
    #[test]
    fn hard_links_count_once_and_a_flood_of_names_is_over() {
        let dir = std::env::temp_dir().join(format!("disk-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("big"), vec![1u8; 256 * 1024]).unwrap();
        for i in 0..50 {
            std::fs::hard_link(dir.join("big"), dir.join(format!("l{i}"))).unwrap();
        }
        let q = Quota {
            bytes: 1 << 30,
            files: 1000,
            enforcement: Enforcement::Measured("test".into()),
        };
        let used = usage(&dir, &q).unwrap();
        assert_eq!(used.files, 51);
        assert!(used.bytes < 512 * 1024, "counted once: {used:?}");
        let tight = Quota { files: 20, ..q };
        let used = usage(&dir, &tight).unwrap();
        assert!(used.over(&tight), "{used:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Thousands of folders side by side, one of them full: every one is
    /// looked into (a walk that held a descriptor per waiting folder ran
    /// out of them and passed the rest over).
    #[test]
    fn many_folders_side_by_side_are_each_counted() {
        let dir = std::env::temp_dir().join(format!("disk-wide-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for i in 0..3000 {
            std::fs::create_dir_all(dir.join(format!("d{i}"))).unwrap();
        }
        std::fs::write(dir.join("d0/big"), vec![1u8; 1 << 20]).unwrap();
        std::fs::write(dir.join("d2999/big"), vec![1u8; 1 << 20]).unwrap();
        let q = Quota {
            bytes: 1 << 30,
            files: 100_000,
            enforcement: Enforcement::Measured("test".into()),
        };
        let used = usage(&dir, &q).unwrap();
        assert_eq!(used.files, 3002);
        assert!(used.bytes >= 2 << 20, "{used:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unprivileged_daemon_or_a_plain_file_system_is_measured_and_says_why() {
        let dir = std::env::temp_dir().join(format!("disk-quota-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let q = Quota::apply(&dir, 1 << 20, 1000, None);
        // This machine's temporary directory has no project quotas.
        match &q.enforcement {
            Enforcement::Measured(why) => assert!(!why.is_empty()),
            Enforcement::Kernel(_) => {}
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_guard_compiles() {
        assert!(guard_rules().is_ok());
    }
}
