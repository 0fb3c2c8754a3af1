//! Landlock (kernel 5.13+), spoken to directly through its three system
//! calls: the file system beyond the plugin's own directories, the
//! system's read-only paths and what was granted is out of reach; with
//! ABI 4 (6.7+), so are TCP connections to ports not granted and every
//! TCP bind; with ABI 6 (6.12+), signals to processes outside the sandbox
//! and abstract Unix sockets.
//!
//! The ruleset is built in the parent ([`ruleset`] opens paths and
//! allocates); the child only restricts itself with it
//! (the child module).

use crate::policy::{FsAccess, FsRule, NetPolicy, Own};
use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

// Landlock's ABI (include/uapi/linux/landlock.h).
pub(crate) const CREATE_RULESET_VERSION: u32 = 1;
pub(crate) const RULE_PATH_BENEATH: libc::c_int = 1;
pub(crate) const RULE_NET_PORT: libc::c_int = 2;
pub(crate) const FS_EXECUTE: u64 = 1 << 0;
pub(crate) const FS_WRITE_FILE: u64 = 1 << 1;
pub(crate) const FS_READ_FILE: u64 = 1 << 2;
pub(crate) const FS_READ_DIR: u64 = 1 << 3;
pub(crate) const FS_REMOVE_DIR: u64 = 1 << 4;
pub(crate) const FS_REMOVE_FILE: u64 = 1 << 5;
pub(crate) const FS_MAKE_CHAR: u64 = 1 << 6;
pub(crate) const FS_MAKE_DIR: u64 = 1 << 7;
pub(crate) const FS_MAKE_SOCK: u64 = 1 << 9;
pub(crate) const FS_MAKE_BLOCK: u64 = 1 << 11;
pub(crate) const FS_REFER: u64 = 1 << 13;
pub(crate) const FS_TRUNCATE: u64 = 1 << 14;
pub(crate) const FS_IOCTL_DEV: u64 = 1 << 15;
pub(crate) const NET_BIND_TCP: u64 = 1 << 0;
pub(crate) const NET_CONNECT_TCP: u64 = 1 << 1;
pub(crate) const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
pub(crate) const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
pub(crate) struct PathBeneathAttr {
    pub(crate) allowed_access: u64,
    pub(crate) parent_fd: i32,
}

#[repr(C)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

/// The file-system rights this ABI knows (all of them are handled, so
/// whatever is not allowed is denied).
pub(crate) fn fs_rights(abi: u32) -> u64 {
    let mut all = (1 << 13) - 1;
    if abi >= 2 {
        all |= FS_REFER;
    }
    if abi >= 3 {
        all |= FS_TRUNCATE;
    }
    if abi >= 5 {
        all |= FS_IOCTL_DEV;
    }
    all
}

/// Rights that apply to a file (not a directory).
fn file_rights(abi: u32) -> u64 {
    fs_rights(abi) & (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV)
}

#[allow(unsafe_code)]
pub(crate) fn abi() -> u32 {
    // SAFETY: with a null attribute, size 0 and the VERSION flag, the call
    // only returns the ABI version; it reads and writes no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// System paths every runtime needs, read-only. `/etc` is not whole: it
/// holds the shadow password file and the machine's secrets.
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/opt",
    // Not /proc whole: other processes' files are there (the daemon's
    // environment among them). The plugin's own /proc/<pid> is added in the
    // child, where "self" is the plugin.
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/proc/sys/kernel",
    "/proc/sys/vm/overcommit_memory",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/alternatives",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/python3.12",
    "/etc/python3.13",
    "/etc/ssh/ssh_config",
];

/// Devices a runtime opens.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

pub(crate) fn cstring(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

/// Builds the Landlock ruleset: every file-system right this ABI knows is
/// handled (so denied unless allowed), TCP connect and bind when a network
/// policy applies, and (ABI 6) signal and abstract-socket scoping.
///
/// Kept whole on purpose: the ruleset's fd and every rule added to it live
/// together; one function keeps the rules in one list the review reads against
/// the policy.
#[allow(unsafe_code)]
pub(crate) fn ruleset(
    abi: u32,
    fs: Option<(&Vec<FsRule>, &Own<'_>)>,
    net: Option<&NetPolicy>,
) -> std::io::Result<OwnedFd> {
    let attr = RulesetAttr {
        handled_access_fs: if fs.is_some() { fs_rights(abi) } else { 0 },
        handled_access_net: match net {
            None => 0,
            Some(NetPolicy::Any) => NET_BIND_TCP,
            Some(_) => NET_BIND_TCP | NET_CONNECT_TCP,
        },
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    // SAFETY: `attr` is a live, initialized struct of the size passed; the
    // kernel only reads it (trailing fields an older kernel does not know
    // are zero, as it requires).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &raw const attr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    let fd = libc::c_int::try_from(fd).map_err(std::io::Error::other)?;
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor, owned by no one else.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some((extra, own)) = fs {
        let read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;
        let all = fs_rights(abi);
        // Everything but making device nodes: a plugin that could make a
        // char device for /dev/kmsg, or a block device for a disk, in its
        // own data directory would read past every other rule.
        let writable = all & !(FS_MAKE_CHAR | FS_MAKE_BLOCK);
        let mut rules: Vec<(PathBuf, u64)> = Vec::new();
        rules.extend(SYSTEM_READ.iter().map(|p| (PathBuf::from(p), read)));
        let device = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
        rules.extend(DEVICES.iter().map(|p| (PathBuf::from(p), device)));
        rules.push((own.dir.to_path_buf(), read));
        rules.push((own.command.to_path_buf(), read));
        // Over its quota (measured, not held by the kernel) a plugin may
        // still read, delete and truncate its data: what gets it back.
        let data = if own.data_writable {
            writable
        } else {
            read | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_TRUNCATE
        };
        rules.push((own.data_dir.to_path_buf(), data));
        // Read-only, its `$TMPDIR` in its data still takes a folder and a
        // socket (where a plugin that makes its socket in a temporary
        // folder makes it), never a byte. Opened without following a
        // link: a plugin may have put one there.
        let temp = (!own.data_writable && own.temp_dir != own.data_dir).then_some(own.temp_dir);
        // The socket folder holds its socket, and what the daemon left it
        // to read (its configuration, its call token, which it may delete):
        // no file, folder or byte of its own, so nothing it writes there
        // escapes its quota. Its `$TMPDIR` is in its data.
        rules.push((
            own.socket_dir.to_path_buf(),
            FS_READ_FILE | FS_READ_DIR | FS_MAKE_SOCK | FS_REMOVE_FILE,
        ));
        for r in extra {
            let access = match r.access {
                FsAccess::ReadExec => read,
                FsAccess::ReadWrite => writable,
            };
            rules.push((r.path.clone(), access));
        }
        for (path, access) in rules {
            add_path_rule(&ruleset, &path, access & all, abi, true)?;
        }
        if let Some(temp) = temp {
            let access = FS_MAKE_DIR | FS_MAKE_SOCK | FS_REMOVE_DIR | FS_REMOVE_FILE;
            add_path_rule(&ruleset, temp, access & all, abi, false)?;
        }
    }
    if let Some(NetPolicy::Connect(ports)) = net {
        for &port in ports {
            let rule = NetPortAttr {
                allowed_access: NET_CONNECT_TCP,
                port: u64::from(port),
            };
            // SAFETY: a live descriptor and a live, initialized attribute.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset.as_raw_fd(),
                    RULE_NET_PORT,
                    &raw const rule,
                    0u32,
                )
            };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(ruleset)
}

/// Allows `access` beneath `path`; a path that does not exist is skipped
/// (it cannot be reached either way), and so is a link when not `follow`.
#[allow(unsafe_code)]
fn add_path_rule(
    ruleset: &OwnedFd,
    path: &Path,
    access: u64,
    abi: u32,
    follow: bool,
) -> std::io::Result<()> {
    let Ok(c) = cstring(path) else {
        return Ok(());
    };
    let flags = if follow {
        libc::O_PATH | libc::O_CLOEXEC
    } else {
        libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_DIRECTORY
    };
    // SAFETY: a valid C string; O_PATH opens for reference only.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: the kernel just returned this descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // What was opened, not what the path names now.
    let is_dir = rustix::fs::fstat(&fd)
        .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir());
    let allowed = if is_dir {
        access
    } else {
        access & file_rights(abi)
    };
    if allowed == 0 {
        return Ok(());
    }
    let r = add_path_beneath(ruleset.as_raw_fd(), allowed, fd.as_raw_fd());
    r.map_err(|e| {
        std::io::Error::other(format!(
            "cannot allow {} in the sandbox: {e}",
            path.display()
        ))
    })
}

/// `landlock_add_rule(2)`: `access` beneath the directory or file open
/// as `parent`, in the ruleset `ruleset`. Async-signal-safe (the child
/// adds its own `/proc/<pid>` with it).
#[allow(unsafe_code)]
pub(crate) fn add_path_beneath(
    ruleset: libc::c_int,
    access: u64,
    parent: libc::c_int,
) -> std::io::Result<()> {
    let rule = PathBeneathAttr {
        allowed_access: access,
        parent_fd: parent,
    };
    // SAFETY: `rule` is a live, initialized attribute of this frame, which
    // the kernel only reads; the descriptors are integers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &raw const rule,
            0u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `landlock_restrict_self(2)`: this thread (and what it execs) confined
/// to `ruleset`. Async-signal-safe.
#[allow(unsafe_code)]
pub(crate) fn restrict_self(ruleset: libc::c_int) -> std::io::Result<()> {
    // SAFETY: integers only.
    let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_rules_never_carry_directory_rights() {
        for abi in 1..=7 {
            assert_eq!(file_rights(abi) & FS_READ_DIR, 0);
            assert_eq!(fs_rights(abi) & file_rights(abi), file_rights(abi));
        }
    }
}
