//! Who counts as a plugin process, for the admin socket's peer check: a
//! plugin must not reconfigure the daemon that confines it.
//!
//! The answer is read from `/proc` and from the set of process-group
//! leaders the caller keeps (the runtime's plugin registry owns that set;
//! nothing here is global).
//!
//! A pid alone is not an identity: the process that connected may exit
//! (after handing its connection to a plugin) and its pid may be given to
//! someone else before the check reads `/proc`. So the peer is pinned
//! first ([`PeerProcess::of_socket`], with `SO_PEERPIDFD`: a pidfd the
//! kernel took when the peer connected), its pid is checked, and then
//! [`PeerProcess::still_running`] says whether that pid still meant the
//! same process when the check was done. A peer that has exited is refused
//! whatever its pid now names.

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};

/// Why the process at the other end of a socket cannot be vouched for.
#[derive(Debug, thiserror::Error)]
pub enum PeerUnknown {
    /// The kernel would not say (no `SO_PEERPIDFD` and no pid).
    #[error("the kernel does not say which process connected: {0}")]
    Unidentified(std::io::Error),
    /// It exited (and its pid may already name another process).
    #[error("the process that connected has exited")]
    Gone,
}

/// The process at the other end of a Unix socket, pinned by a pidfd so
/// that its pid cannot silently come to mean another process.
#[derive(Debug)]
pub struct PeerProcess {
    pidfd: OwnedFd,
    pid: u32,
}

impl PeerProcess {
    /// Pins the process that connected `socket`. On kernels before 6.5
    /// (no `SO_PEERPIDFD`) the pid from `SO_PEERCRED` is pinned with
    /// `pidfd_open` instead, which narrows the pid-reuse window to the
    /// time between the two calls rather than closing it.
    ///
    /// # Errors
    /// [`PeerUnknown`] when no process can be pinned, or it has exited.
    pub fn of_socket(socket: BorrowedFd<'_>) -> Result<Self, PeerUnknown> {
        let pidfd = match peer_pidfd(socket) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {
                let pid = rustix::net::sockopt::socket_peercred(socket)
                    .map_err(|e| PeerUnknown::Unidentified(e.into()))?
                    .pid;
                let pid = rustix::process::Pid::from_raw(pid.as_raw_nonzero().get())
                    .ok_or(PeerUnknown::Gone)?;
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                    .map_err(|_| PeerUnknown::Gone)?
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(PeerUnknown::Gone),
            Err(e) => return Err(PeerUnknown::Unidentified(e)),
        };
        let pid = pid_of(&pidfd).ok_or(PeerUnknown::Gone)?;
        let peer = Self { pidfd, pid };
        if peer.still_running() {
            Ok(peer)
        } else {
            Err(PeerUnknown::Gone)
        }
    }

    /// The peer's pid, valid for as long as [`Self::still_running`] says so.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the pinned process has not exited: while it runs, its pid is
    /// its own, so whatever was read under that pid was read about it.
    /// Ask this *after* looking the pid up.
    #[must_use]
    pub fn still_running(&self) -> bool {
        // A pidfd becomes readable when its process exits (a zombie
        // included, before anyone reaps it).
        let mut fds = [rustix::event::PollFd::new(
            &self.pidfd,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(0))
    }
}

/// `SO_PEERPIDFD` (Linux 6.5): a pidfd of the process that connected.
#[allow(unsafe_code)]
fn peer_pidfd(socket: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
        .map_err(std::io::Error::other)?;
    // SAFETY: `fd` and `len` are live locals of the sizes the kernel
    // expects for this option; `socket` is a valid descriptor for the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            std::ptr::from_mut(&mut fd).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: the kernel just created this descriptor for us; nothing else
    // owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The pid a pidfd refers to, from `/proc/self/fdinfo` (`Pid: -1` once
/// the process has been reaped).
fn pid_of(pidfd: &OwnedFd) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| *p > 0)
}

/// `(ppid, pgrp, session)` from `/proc/<pid>/stat`.
fn parents(pid: u32) -> Option<(u32, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: the fields
    // start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(1);
    Some((
        f.next()?.parse().ok()?,
        f.next()?.parse().ok()?,
        f.next()?.parse().ok()?,
    ))
}

/// How a plugin's process is told apart on this machine, in words for the
/// operator, with what gets past it.
#[must_use]
pub fn how_plugins_are_recognized() -> &'static str {
    let k = crate::kernel::kernel();
    match (k.pids.is_ok(), k.landlock_abi >= 1) {
        (true, true) => {
            "its token (which Landlock keeps plugins from reading), and a peer check: the connecting process, pinned by a pidfd, must be running and outside every plugin's pids cgroup, which no plugin process can leave"
        }
        (false, true) => {
            "its token (which Landlock keeps plugins from reading), and a peer check: the connecting process, pinned by a pidfd, must be running and no plugin's by ancestry, process group or session (a plugin that double-forks out of its session passes this check, not the token)"
        }
        (true, false) => {
            "a peer check: the connecting process, pinned by a pidfd, must be running and outside every plugin's pids cgroup, which no plugin process can leave; its token is readable by plugins on this kernel (no Landlock)"
        }
        (false, false) => {
            "NOT reliably: its token is readable by plugins (no Landlock), and the peer check goes by ancestry, process group and session, which a plugin that double-forks out of its session passes"
        }
    }
}

/// Whether `pid` is one of this daemon's plugins or a process one started:
/// a member of one of its pids cgroups (which no sandboxed process can
/// leave), or, without cgroups, a descendant of a plugin, or in a plugin's
/// process group or session, or a stray a dead plugin left to the daemon
/// (`leaders` are the plugins' process-group leaders).
#[must_use]
pub fn is_plugin_process(pid: u32, leaders: &BTreeSet<u32>) -> bool {
    if crate::kernel::in_plugin_cgroup(pid) {
        return true;
    }
    let me = std::process::id();
    let mut at = pid;
    for _ in 0..64 {
        if leaders.contains(&at) {
            return true;
        }
        let Some((ppid, pgrp, session)) = parents(at) else {
            return false;
        };
        if leaders.contains(&pgrp) || leaders.contains(&session) {
            return true;
        }
        if ppid == me {
            // A child of the daemon that left its session is a plugin's
            // process whose leader died (`crate::tree`): its stray.
            return parents(me).is_some_and(|(_, _, mine)| mine != session);
        }
        if ppid <= 1 {
            return false;
        }
        at = ppid;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd as _;

    #[test]
    fn a_running_peer_is_pinned_and_an_exited_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("peers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();

        // This process connects: it is pinned, under its own pid.
        let _me = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let peer = PeerProcess::of_socket(accepted.as_fd()).unwrap();
        assert_eq!(peer.pid(), std::process::id());
        assert!(peer.still_running());

        // A child connects, hands nothing over, exits and is reaped: its
        // connection stays, and it is refused as gone.
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect({:?}); sys.stdout.write('x'); sys.stdout.flush(); import os; os._exit(0)",
                path.display().to_string()
            ))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (accepted, _) = listener.accept().unwrap();
        // Pinned while it may still run; after the reap it must say gone.
        let pinned = PeerProcess::of_socket(accepted.as_fd());
        child.wait().unwrap();
        match pinned {
            Ok(p) => assert!(!p.still_running(), "a reaped peer still counts as running"),
            Err(e) => assert!(matches!(e, PeerUnknown::Gone), "{e}"),
        }
        assert!(matches!(
            PeerProcess::of_socket(accepted.as_fd()),
            Err(PeerUnknown::Gone)
        ));

        // Its pid given to another process (root can steer the next pid):
        // the connection still belongs to nobody.
        let gone = child.id();
        if let Some(mut reuser) = spawn_with_pid(gone) {
            assert!(std::path::Path::new(&format!("/proc/{gone}")).exists());
            assert!(matches!(
                PeerProcess::of_socket(accepted.as_fd()),
                Err(PeerUnknown::Gone)
            ));
            let _ = reuser.kill();
            let _ = reuser.wait();
        } else {
            println!("pid reuse not exercised (needs root and a quiet machine)");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A sleeping process with pid `pid`, made by setting the pid
    /// namespace's last pid (root only; retried, since any fork on the
    /// machine can take the pid first).
    fn spawn_with_pid(pid: u32) -> Option<std::process::Child> {
        for _ in 0..20 {
            std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
            let child = std::process::Command::new("sleep").arg("30").spawn().ok()?;
            if child.id() == pid {
                return Some(child);
            }
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        None
    }

    #[test]
    fn this_process_is_no_plugin_and_a_leader_is() {
        let me = std::process::id();
        assert!(!is_plugin_process(me, &BTreeSet::new()));
        assert!(is_plugin_process(me, &BTreeSet::from([me])));
        let (_, pgrp, _) = parents(me).unwrap_or_default();
        assert!(is_plugin_process(me, &BTreeSet::from([pgrp])));
    }
}
