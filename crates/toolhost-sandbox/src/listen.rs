//! Listening sockets: the daemon decides each `listen()` a plugin makes.
//!
//! A plugin must listen on its Unix socket (that is how toolhost reaches
//! it), and must not listen on TCP: no manifest can be granted a bind. But
//! `listen()` on a TCP socket nobody bound makes the kernel pick a port,
//! and neither Landlock (its bind rule never sees that) nor a seccomp
//! filter (which sees a descriptor number, not a socket) can tell the two
//! apart. So a plugin granted network gets one more seccomp filter that
//! hands each `listen()` to the daemon (`SECCOMP_RET_USER_NOTIF`):
//!
//! 1. the child installs the filter before `exec` and sends the filter's
//!    notification descriptor to the parent over a socket pair;
//! 2. a thread of the daemon ([`ListenSupervisor`]) receives each
//!    `listen()`, takes a copy of the plugin's descriptor (`pidfd_getfd`),
//!    and looks at the socket itself: IPv4 or IPv6 is refused with
//!    `EACCES`; anything else is listened on *by the daemon, on that very
//!    socket*, and the plugin gets the result. The daemon never lets the
//!    plugin's own call continue: between the check and a continued call
//!    another thread of the plugin could put a TCP socket under the same
//!    descriptor number.
//!
//! The kernel stamps a listener with the credentials of whoever called
//! `listen()`, and a client's `SO_PEERCRED` reads them. So the answering
//! thread takes the plugin's account for the call (its effective user and
//! group, and no supplementary group: per thread, by the raw system
//! calls, so no other thread of the daemon changes), and a client of a
//! plugin run as `[sandbox] user` sees that account, not root. The pid it
//! sees is the daemon's: only a thread of the plugin's process could put
//! its own there, and letting the plugin's call continue is what the
//! check above must not do (docs/PROTOCOL.md §3 says what a client may
//! rely on).
//!
//! Anything that goes wrong on the daemon's side refuses the call. The same
//! filter also refuses the x32 system-call numbers on x86-64, a second
//! system-call table the network filter's rules do not cover.

use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
#[cfg(target_arch = "x86_64")]
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const AUDIT_ARCH: u32 = 0;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The program: other architectures pass (the network filter kills them),
/// x32 numbers are refused, `listen` goes to the daemon when
/// `supervise_listen`, everything else passes.
pub(crate) fn guard_program(supervise_listen: bool) -> Vec<libc::sock_filter> {
    let refuse = SECCOMP_RET_ERRNO | u32::try_from(libc::EACCES).unwrap_or(13);
    let listen = if supervise_listen {
        libc::SECCOMP_RET_USER_NOTIF
    } else {
        SECCOMP_RET_ALLOW
    };
    let listen_nr = u32::try_from(libc::SYS_listen).unwrap_or(u32::MAX);
    let mut p = vec![
        op(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
    ];
    #[cfg(target_arch = "x86_64")]
    {
        p.push(op(BPF_JEQ_K, 0, 5, AUDIT_ARCH)); // to "allow"
        p.push(op(BPF_LD_W_ABS, 0, 0, 0)); // seccomp_data.nr
        p.push(op(BPF_JGE_K, 1, 0, 0x4000_0000)); // x32: to "refuse"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        p.push(op(BPF_JEQ_K, 0, 5, AUDIT_ARCH));
        p.push(op(BPF_LD_W_ABS, 0, 0, 0));
        p.push(op(BPF_JEQ_K, 0, 0, u32::MAX)); // keeps the offsets alike
    }
    p.push(op(BPF_JEQ_K, 1, 2, listen_nr)); // to "listen" / "allow"
    p.push(op(BPF_RET_K, 0, 0, refuse));
    p.push(op(BPF_RET_K, 0, 0, listen));
    p.push(op(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
    p
}

/// In the child, after `fork`: installs `program` and, if `channel` is
/// given, sends the notification descriptor over it and closes its own
/// copy. Single system calls only; `no_new_privs` is already set.
#[allow(unsafe_code)]
pub(crate) fn install_in_child(
    program: &[libc::sock_filter],
    channel: Option<RawFd>,
) -> std::io::Result<()> {
    let prog = libc::sock_fprog {
        len: u16::try_from(program.len()).unwrap_or(0),
        filter: program.as_ptr().cast_mut(),
    };
    let flags = if channel.is_some() {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    // SAFETY: `prog` points at `program`, which outlives the call; the
    // kernel copies the program and does not keep the pointer.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &raw const prog,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let Some(channel) = channel else {
        return Ok(());
    };
    let notify = i32::try_from(fd).map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
    // One byte, with the descriptor as SCM_RIGHTS; all on the stack.
    #[repr(C, align(8))]
    struct Control([u8; 64]);
    let mut control = Control([0; 64]);
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: every pointer is to a local of this frame that outlives the
    // calls; CMSG_* only compute offsets inside `control`, which is large
    // and aligned enough for one header and one descriptor.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as _;
        let header = libc::CMSG_FIRSTHDR(&raw const msg);
        if header.is_null() {
            libc::close(notify);
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<i32>(), notify);
        let sent = libc::sendmsg(channel, &raw const msg, 0);
        libc::close(notify);
        sent
    };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The daemon's side of one plugin's `listen()` filter: a thread that
/// answers each call, and ends when no process of the plugin is left.
#[derive(Debug)]
pub struct ListenSupervisor {
    _thread: std::thread::JoinHandle<()>,
}

impl ListenSupervisor {
    /// Takes the notification descriptor the child sent over `channel` and
    /// starts answering, listening as `account` (`(uid, gid)`, the
    /// plugin's when it runs as another user). `None` when the child sent
    /// none (it failed before `exec`).
    pub(crate) fn start(
        channel: &std::os::unix::net::UnixStream,
        account: Option<(u32, u32)>,
    ) -> Option<Self> {
        let notify = receive_fd(channel)?;
        let thread = std::thread::Builder::new()
            .name("plugin-listen".into())
            .spawn(move || serve(&notify, account))
            .ok()?;
        Some(Self { _thread: thread })
    }
}

/// This thread's effective user and group, and its supplementary groups,
/// changed for the length of one call and put back (raw system calls:
/// the C library's wrappers would change every thread of the daemon).
struct AsAccount {
    groups: Vec<libc::gid_t>,
}

impl AsAccount {
    /// Takes `(uid, gid)` as this thread's effective account; `None` if
    /// the switch failed (nothing is left half changed).
    fn take(uid: u32, gid: u32) -> Option<Self> {
        use crate::sys::{KEEP, get_groups, set_groups, set_res_gid, set_res_uid};
        let mut groups = vec![0 as libc::gid_t; 256];
        let n = get_groups(&mut groups).ok()?;
        groups.truncate(n);
        let me = Self { groups };
        // Each changes this thread only (raw system calls).
        let switched = set_groups(&[gid]).is_ok()
            && set_res_gid(KEEP, gid.into(), KEEP).is_ok()
            && set_res_uid(KEEP, uid.into(), KEEP).is_ok();
        // Dropped when half done, `me` puts back whatever was changed.
        if switched { Some(me) } else { None }
    }
}

impl Drop for AsAccount {
    fn drop(&mut self) {
        use crate::sys::{KEEP, set_groups, set_res_gid, set_res_uid};
        // The saved ids are still root's, so the effective ones come back;
        // then the groups, which need the capability that root's effective
        // id restores.
        let _ = set_res_uid(KEEP, 0, KEEP);
        let _ = set_res_gid(KEEP, 0, KEEP);
        let _ = set_groups(&self.groups);
    }
}

fn receive_fd(channel: &std::os::unix::net::UnixStream) -> Option<OwnedFd> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    recvmsg(
        channel,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    control.drain().find_map(|m| match m {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    })
}

/// Answers notifications until every process under the filter is gone.
#[allow(unsafe_code)]
fn serve(notify: &OwnedFd, account: Option<(u32, u32)>) {
    use rustix::event::{PollFd, PollFlags, poll};
    loop {
        let mut fds = [PollFd::new(notify, PollFlags::IN)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        let revents = fds[0].revents();
        if !revents.contains(PollFlags::IN) {
            // HUP: no process uses the filter any more.
            return;
        }
        // SAFETY: a zeroed seccomp_notif is what the kernel expects to fill.
        let mut request: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one seccomp_notif into `request`.
        let got = unsafe {
            libc::ioctl(
                notify.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &raw mut request,
            )
        };
        if got != 0 {
            // ENOENT: the caller died before we read it; try the next.
            continue;
        }
        // `error` is the negated errno the call fails with; 0 returns `val`.
        let error = decide(notify, &request, account)
            .err()
            .map_or(0, |errno| -errno);
        let mut response = libc::seccomp_notif_resp {
            id: request.id,
            val: 0,
            error,
            flags: 0,
        };
        // SAFETY: the ioctl reads one seccomp_notif_resp from `response`.
        // ENOENT (the caller is gone) needs no handling.
        let _ = unsafe {
            libc::ioctl(
                notify.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &raw mut response,
            )
        };
    }
}

/// The answer to one `listen(fd, backlog)`: done by the daemon on the
/// plugin's socket, or the errno to refuse it with.
#[allow(unsafe_code)]
fn decide(
    notify: &OwnedFd,
    request: &libc::seccomp_notif,
    account: Option<(u32, u32)>,
) -> Result<(), i32> {
    let fd = i32::try_from(request.data.args[0]).map_err(|_| libc::EBADF)?;
    // The backlog is an int; the kernel caps it at somaxconn.
    let backlog =
        u32::try_from(request.data.args[1] & 0xffff_ffff).map_or(i32::MAX, u32::cast_signed);
    let thread = pidfd_of_thread(request.pid).ok_or(libc::EACCES)?;
    // The thread id is pinned by the pidfd only if the call is still
    // pending: checked after pinning, so the id named the caller.
    let mut id = request.id;
    // SAFETY: the ioctl reads one u64 from `id`.
    let valid = unsafe {
        libc::ioctl(
            notify.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &raw mut id,
        )
    };
    if valid != 0 {
        return Err(libc::EACCES);
    }
    let socket =
        rustix::process::pidfd_getfd(&thread, fd, rustix::process::PidfdGetfdFlags::empty())
            .map_err(|e| {
                if e == rustix::io::Errno::BADF {
                    libc::EBADF
                } else {
                    libc::EACCES
                }
            })?;
    let domain = rustix::net::sockopt::socket_domain(&socket).map_err(|e| e.raw_os_error())?;
    if domain == rustix::net::AddressFamily::INET || domain == rustix::net::AddressFamily::INET6 {
        tracing::warn!(
            pid = request.pid,
            "refused a plugin's TCP listener (plugins are granted no bind)"
        );
        return Err(libc::EACCES);
    }
    // The listener carries the plugin's account, not the daemon's.
    let _as = match account {
        Some((uid, gid)) => Some(AsAccount::take(uid, gid).ok_or(libc::EACCES)?),
        None => None,
    };
    rustix::net::listen(socket.as_fd(), backlog).map_err(|e| e.raw_os_error())
}

/// A pidfd for the thread `tid` (Linux 6.9 `PIDFD_THREAD`), or for its
/// process on older kernels, where `pidfd_getfd` reaches the same table.
#[allow(unsafe_code)]
fn pidfd_of_thread(tid: u32) -> Option<OwnedFd> {
    const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
    let open = |pid: u32, flags: libc::c_uint| {
        // SAFETY: pidfd_open takes two integers and returns a new
        // descriptor that nothing else owns.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
        i32::try_from(fd)
            .ok()
            .filter(|fd| *fd >= 0)
            // SAFETY: see above: the descriptor is ours alone.
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
    };
    open(tid, PIDFD_THREAD).or_else(|| {
        let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
        let tgid = status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse().ok())?;
        open(tgid, 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program() {
        for supervise in [true, false] {
            let p = guard_program(supervise);
            for (i, ins) in p.iter().enumerate() {
                if ins.code == BPF_JEQ_K || ins.code == 0x35 {
                    assert!(i + 1 + usize::from(ins.jt) < p.len());
                    assert!(i + 1 + usize::from(ins.jf) < p.len());
                }
            }
            assert_eq!(p.last().map(|i| i.code), Some(BPF_RET_K));
        }
    }
}
