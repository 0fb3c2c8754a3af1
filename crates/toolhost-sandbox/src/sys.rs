//! The system calls behind the child's confinement and the account
//! switches, one per function: each function holds one `unsafe` block
//! around one call, with the note that makes it sound. The sequences
//! (limits, then the cgroup; the bounding set, then the other capability
//! sets; groups, then gid, then uid) are safe code in the modules that
//! use them.
//!
//! Many of these run in the child between `fork` and `exec`, where only
//! async-signal-safe calls are allowed: none of them allocates or takes a
//! lock, and an error is read from `errno` without allocating
//! (`std::io::Error::last_os_error`).

#![allow(unsafe_code)]

use std::io::{Error, Result};

/// `Ok` when a system call returned 0, else the error `errno` holds.
fn zero(r: libc::c_long) -> Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Error::last_os_error())
    }
}

/// `getrlimit(2)`.
pub(crate) fn getrlimit(resource: libc::__rlimit_resource_t) -> Result<libc::rlimit> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `current` is a live, writable rlimit of this frame, which the
    // kernel fills and does not keep.
    let r = unsafe { libc::getrlimit(resource, &raw mut current) };
    zero(r.into()).map(|()| current)
}

/// `setrlimit(2)`, soft and hard limit alike.
pub(crate) fn setrlimit(resource: libc::__rlimit_resource_t, value: u64) -> Result<()> {
    let new = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `new` is a live, initialized rlimit of this frame, which the
    // kernel only reads.
    let r = unsafe { libc::setrlimit(resource, &raw const new) };
    zero(r.into())
}

/// `open(2)`, close-on-exec.
pub(crate) fn open(path: &std::ffi::CStr, flags: libc::c_int) -> Result<libc::c_int> {
    // SAFETY: `path` is a valid NUL-terminated string borrowed for the
    // call; the kernel copies it.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// `write(2)` of all of `bytes` in one call, or an error.
pub(crate) fn write_all_once(fd: libc::c_int, bytes: &[u8]) -> Result<()> {
    // SAFETY: `bytes` is a live slice of the length passed, which the
    // kernel only reads.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    if usize::try_from(n).is_ok_and(|n| n == bytes.len()) {
        Ok(())
    } else {
        Err(Error::last_os_error())
    }
}

/// `close(2)`; the descriptor is gone whatever it returns.
pub(crate) fn close(fd: libc::c_int) {
    // SAFETY: closing an integer descriptor touches no memory of ours; the
    // caller owns `fd` and uses it no more.
    unsafe {
        libc::close(fd);
    }
}

/// `signal(2)`: `signal` ignored (and, being ignored, still ignored
/// after `exec`).
pub(crate) fn ignore_signal(signal: libc::c_int) -> Result<()> {
    // SAFETY: rt_sigaction with a constant disposition; no handler of ours
    // runs, and nothing is allocated.
    if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(Error::last_os_error());
    }
    Ok(())
}

/// `prctl(2)` with one argument (the others 0).
pub(crate) fn prctl(option: libc::c_int, arg: libc::c_ulong) -> Result<()> {
    let zero_arg: libc::c_ulong = 0;
    // SAFETY: prctl on integers only; none of the options used here reads
    // or writes memory of ours.
    let r = unsafe { libc::prctl(option, arg, zero_arg, zero_arg, zero_arg) };
    zero(r.into())
}

/// `struct __user_cap_header_struct` (linux/capability.h).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`; version 3 takes two of them (64 bits).
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `capset(2)`: this thread's permitted, effective and inheritable sets
/// emptied at once.
pub(crate) fn clear_capabilities() -> Result<()> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let none = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `none` are live structs of this frame, of the
    // layout version 3 names; the kernel reads them and does not keep them.
    let r = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, none.as_ptr()) };
    zero(r)
}

/// `close_range(2)` (Linux 5.11) marking every descriptor from `first`
/// on close-on-exec.
pub(crate) fn cloexec_from(first: u32) -> Result<()> {
    // SAFETY: integers only; marking descriptors touches no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    zero(r)
}

/// `sysconf(_SC_OPEN_MAX)`.
pub(crate) fn open_max() -> libc::c_long {
    // SAFETY: reads a limit; no memory of ours is involved.
    unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }
}

/// `fcntl(F_GETFD)`: a descriptor's flags, or `None` if it is not open.
pub(crate) fn fd_flags(fd: libc::c_int) -> Option<libc::c_int> {
    // SAFETY: integers only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    (flags >= 0).then_some(flags)
}

/// `fcntl(F_SETFD)`.
pub(crate) fn set_fd_flags(fd: libc::c_int, flags: libc::c_int) {
    // SAFETY: integers only; a descriptor closed meanwhile gets EBADF.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, flags);
    }
}

/// `getgroups(2)` into `into`; how many it wrote.
pub(crate) fn get_groups(into: &mut [libc::gid_t]) -> Result<usize> {
    // SAFETY: the kernel writes at most `into.len()` gids into the slice.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, into.len(), into.as_mut_ptr()) };
    usize::try_from(n).map_err(|_| Error::last_os_error())
}

/// `setgroups(2)`, as a raw system call: this thread only (glibc's wrapper
/// would broadcast to every thread, taking a lock).
pub(crate) fn set_groups(groups: &[libc::gid_t]) -> Result<()> {
    // SAFETY: the kernel reads `groups.len()` gids from the slice.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    zero(r)
}

/// The value that leaves an id as it is, for [`set_res_gid`] and
/// [`set_res_uid`].
pub(crate) const KEEP: libc::c_long = -1;

/// `setresgid(2)`, as a raw system call: this thread only.
pub(crate) fn set_res_gid(
    real: libc::c_long,
    effective: libc::c_long,
    saved: libc::c_long,
) -> Result<()> {
    // SAFETY: integers only.
    let r = unsafe { libc::syscall(libc::SYS_setresgid, real, effective, saved) };
    zero(r)
}

/// `setresuid(2)`, as a raw system call: this thread only.
pub(crate) fn set_res_uid(
    real: libc::c_long,
    effective: libc::c_long,
    saved: libc::c_long,
) -> Result<()> {
    // SAFETY: integers only.
    let r = unsafe { libc::syscall(libc::SYS_setresuid, real, effective, saved) };
    zero(r)
}
