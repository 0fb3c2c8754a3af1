//! What runs in the child between `fork` and `exec`, and what the parent
//! prepares for it.
//!
//! After `fork` in a threaded program only single system calls are safe:
//! no allocation, no lock. So [`Prepared::new`] does everything that
//! allocates or opens in the parent (the Landlock ruleset, the cgroup,
//! the limits' values), and [`confine`] installs a closure that only makes
//! system calls, in this order:
//!
//! 1. the parent-death signal (SIGKILL when the daemon's forking thread
//!    dies, so even `kill -9 toolhost` leaves no plugin behind);
//! 2. every descriptor from 3 up marked close-on-exec (marked, not closed:
//!    the standard library's exec-error pipe must stay open until exec);
//! 3. the opens it needs (the cgroup's `cgroup.procs`, its own
//!    `/proc/self`), while the daemon's descriptor limit still holds: the
//!    child carries the daemon's descriptors until exec, and under many
//!    plugins they outnumber a plugin's limit; then resource limits, then
//!    joining the cgroup (a write to cgroupfs, which
//!    Landlock would forbid afterwards), then every capability set cleared
//!    (a root daemon's plugins would otherwise keep them all: the bounding
//!    set is emptied so that exec cannot give them back; a switch to
//!    `[sandbox] user` comes between the bounding set, which needs root's
//!    `CAP_SETPCAP`, and the other sets), then the network
//!    rule's seccomp filters (`crate::seccomp`, then `crate::listen`, which
//!    hands the notification descriptor to the parent), then `no_new_privs`, then
//!    Landlock, with a rule for the plugin's own
//!    `/proc/<pid>` added here, where "self" is the plugin.

use crate::cgroup::Jail;
use crate::kernel::kernel;
use crate::landlock::{FS_READ_DIR, FS_READ_FILE, cstring, ruleset};
use crate::policy::{Own, SandboxPolicy};
use std::ffi::CString;
use std::os::fd::OwnedFd;

/// Everything the child applies to itself, prepared in the parent.
#[derive(Debug, Default)]
pub struct Prepared {
    no_new_privs: bool,
    drop_capabilities: bool,
    /// `(uid, gid)` to switch to.
    run_as: Option<(u32, u32)>,
    /// The network rule's seccomp filter, compiled.
    seccomp: Option<seccompiler::BpfProgram>,
    /// The second filter (`crate::listen`), and the socket pair its
    /// notification descriptor crosses when `listen()` is supervised.
    guard: Option<Guard>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    cgroup_procs: Option<CString>,
    ruleset: Option<OwnedFd>,
    /// Rights on the plugin's own `/proc/<pid>`, added in the child.
    proc_self: u64,
    /// `SIGXFSZ` ignored, so a write past `RLIMIT_FSIZE` fails with
    /// `EFBIG` instead of killing the plugin.
    ignore_file_size_signal: bool,
    jail: Option<Jail>,
}

/// The `listen()` filter's program and, when the daemon answers each
/// `listen()`, the two ends of the pair the child sends its notification
/// descriptor over (parent's, child's).
struct Guard {
    program: Vec<libc::sock_filter>,
    channel: Option<(
        std::os::unix::net::UnixStream,
        std::os::unix::net::UnixStream,
    )>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("instructions", &self.program.len())
            .field("supervised", &self.channel.is_some())
            .finish()
    }
}

/// What stays with the daemon for as long as a plugin process lives.
#[derive(Debug, Default)]
pub struct Confinement {
    /// Its pids cgroup, if one was made.
    pub jail: Option<Jail>,
    /// The thread that answers its `listen()` calls, if they are supervised.
    pub listen: Option<crate::listen::ListenSupervisor>,
}

impl Prepared {
    /// Prepares `policy` for one process: the Landlock ruleset (opening
    /// every allowed path), the cgroup, the limits.
    pub fn new(policy: &SandboxPolicy, own: &Own<'_>) -> std::io::Result<Self> {
        if !cfg!(target_os = "linux") {
            return Ok(Self::default());
        }
        let k = kernel();
        let mut p = Self {
            no_new_privs: policy.no_new_privs,
            drop_capabilities: policy.drop_capabilities,
            run_as: policy.run_as.as_ref().map(|r| (r.uid, r.gid)),
            // Where no filter can be made, the report says what is open.
            seccomp: crate::seccomp::filter(policy.network.as_ref(), policy.disk_bytes.is_some())
                .ok()
                .flatten(),
            ignore_file_size_signal: policy.disk_bytes.is_some(),
            ..Self::default()
        };
        if p.seccomp.is_some() && policy.network.is_some() {
            // Granted network means TCP sockets exist, and one could
            // listen unbound: the daemon answers each listen().
            let supervise = policy
                .network
                .as_ref()
                .is_some_and(|n| *n != crate::policy::NetPolicy::Deny);
            p.guard = Some(Guard {
                program: crate::listen::guard_program(supervise),
                channel: if supervise {
                    Some(std::os::unix::net::UnixStream::pair()?)
                } else {
                    None
                },
            });
        }
        if let Some(b) = policy.memory_bytes {
            p.rlimits.push((libc::RLIMIT_AS, b));
        }
        if let Some(n) = policy.open_files {
            p.rlimits.push((libc::RLIMIT_NOFILE, n));
        }
        if let Some(b) = policy.disk_bytes {
            p.rlimits.push((libc::RLIMIT_FSIZE, b));
        }
        if let Some(n) = policy.processes {
            match &k.pids {
                Ok(root) => {
                    let jail = Jail::create(root, n)?;
                    p.cgroup_procs = Some(cstring(&jail.dir.join("cgroup.procs"))?);
                    p.jail = Some(jail);
                }
                // The limit counts every task of the user, the daemon's and
                // the other plugins' included: the plugin's allowance is on
                // top of what the user runs now.
                Err(_) if !k.root => p
                    .rlimits
                    .push((libc::RLIMIT_NPROC, n.saturating_add(tasks_of_this_user()))),
                Err(_) => {}
            }
        }
        let fs = policy.filesystem.as_ref().filter(|_| k.landlock_abi >= 1);
        let net = policy.network.as_ref().filter(|_| k.landlock_abi >= 4);
        if fs.is_some() || net.is_some() {
            p.ruleset = Some(ruleset(k.landlock_abi, fs.map(|extra| (extra, own)), net)?);
            p.no_new_privs = true;
        }
        if fs.is_some() {
            p.proc_self = FS_READ_FILE | FS_READ_DIR;
        }
        Ok(p)
    }

    /// Installs the child's side on `cmd`: the parent-death signal, every
    /// inherited descriptor marked close-on-exec, then this sandbox.
    pub fn confine(&self, cmd: &mut std::process::Command) {
        confine(cmd, self.in_child());
    }

    /// Once the child is spawned: what the daemon keeps while it lives (its
    /// cgroup, the thread answering its `listen()` calls). The rest is
    /// dropped here (the ruleset's descriptor is the child's now: it kept
    /// its own copy).
    #[must_use]
    pub fn into_confinement(self) -> Confinement {
        let listen = self
            .guard
            .as_ref()
            .and_then(|g| g.channel.as_ref())
            .and_then(|(parent, _)| crate::listen::ListenSupervisor::start(parent, self.run_as));
        Confinement {
            jail: self.jail,
            listen,
        }
    }

    /// The closure the child runs before `exec`: single system calls only.
    fn in_child(&self) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
        let rlimits = self.rlimits.clone();
        let procs = self.cgroup_procs.clone();
        let ruleset = self.ruleset.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
        let no_new_privs = self.no_new_privs;
        let drop_capabilities = self.drop_capabilities;
        let run_as = self.run_as;
        let seccomp = self.seccomp.clone();
        let guard = self.guard.as_ref().map(|g| {
            (
                g.program.clone(),
                g.channel
                    .as_ref()
                    .map(|(_, child)| std::os::fd::AsRawFd::as_raw_fd(child)),
            )
        });
        let proc_self = self.proc_self;
        let ignore_file_size_signal = self.ignore_file_size_signal;
        move || {
            if ignore_file_size_signal {
                ignore_sigxfsz()?;
            }
            // Every open first, while the daemon's own limit holds: the
            // child still has the daemon's descriptors (marked
            // close-on-exec, gone at exec), and under a thousand plugins
            // they number more than the plugin's limit.
            let procs_fd = open_in_child(procs.as_ref(), libc::O_WRONLY)?;
            let proc_self_fd = if ruleset.is_some() && proc_self != 0 {
                open_in_child(Some(c"/proc/self"), libc::O_PATH | libc::O_DIRECTORY)?
            } else {
                None
            };
            apply(&rlimits, procs_fd)?;
            if drop_capabilities {
                // Needs CAP_SETPCAP, which the switch of user gives up.
                drop_bounding_set()?;
            }
            if let Some((uid, gid)) = run_as {
                crate::account::switch_in_child(uid, gid)?;
            }
            if drop_capabilities {
                clear_capability_sets()?;
            }
            if let Some(program) = &seccomp
                && seccompiler::apply_filter(program).is_err()
            {
                // No allocation here, after fork: the error is errno's.
                return Err(std::io::Error::last_os_error());
            }
            if let Some((program, channel)) = &guard {
                crate::listen::install_in_child(program, *channel)?;
            }
            confine_self(no_new_privs, ruleset, proc_self, proc_self_fd)
        }
    }
}

/// Threads of every process of this daemon's real user (what
/// `RLIMIT_NPROC` counts), from `/proc`.
fn tasks_of_this_user() -> u64 {
    let me = rustix::process::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|status| {
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
            };
            (field("Uid:")? == u64::from(me)).then(|| field("Threads:").unwrap_or(1))
        })
        .sum()
}

/// In the child: opens `path` (close-on-exec), or nothing for `None`.
fn open_in_child(
    path: Option<&(impl AsRef<std::ffi::CStr> + ?Sized)>,
    flags: libc::c_int,
) -> std::io::Result<Option<libc::c_int>> {
    path.map(|p| crate::sys::open(p.as_ref(), flags))
        .transpose()
}

/// In the child: limits, then the cgroup (joining it writes to cgroupfs,
/// which Landlock would forbid), through `procs`, opened before the limits.
fn apply(
    rlimits: &[(libc::__rlimit_resource_t, u64)],
    procs: Option<libc::c_int>,
) -> std::io::Result<()> {
    for &(resource, value) in rlimits {
        let current = crate::sys::getrlimit(resource)?;
        crate::sys::setrlimit(resource, value.min(current.rlim_max))?;
    }
    if let Some(fd) = procs {
        // "0" moves the writer itself.
        let written = crate::sys::write_all_once(fd, b"0");
        crate::sys::close(fd);
        written?;
    }
    Ok(())
}

/// In the child: `SIGXFSZ` ignored (an ignored signal stays ignored across
/// exec).
fn ignore_sigxfsz() -> std::io::Result<()> {
    crate::sys::ignore_signal(libc::SIGXFSZ)
}

/// In the child: the bounding set emptied, first of the capability steps
/// (it needs `CAP_SETPCAP`, which the next steps give up; a daemon without
/// it has nothing in it to pass on, so `EPERM` is not an error). With an
/// empty bounding set and inheritable set, exec gives even a root process
/// no capability back.
fn drop_bounding_set() -> std::io::Result<()> {
    for cap in 0..64 {
        if let Err(e) = crate::sys::prctl(libc::PR_CAPBSET_DROP, cap) {
            return match e.raw_os_error() {
                // Past the kernel's last capability, or nothing this
                // process may drop.
                Some(libc::EINVAL | libc::EPERM) => Ok(()),
                _ => Err(e),
            };
        }
    }
    Ok(())
}

/// In the child: the ambient set, then permitted, effective and
/// inheritable at once.
fn clear_capability_sets() -> std::io::Result<()> {
    #[allow(clippy::cast_sign_loss)] // a small positive constant
    let clear_all = libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong;
    match crate::sys::prctl(libc::PR_CAP_AMBIENT, clear_all) {
        // Kernels before 4.3 have no ambient set: nothing to clear.
        Err(e) if e.raw_os_error() != Some(libc::EINVAL) => return Err(e),
        _ => {}
    }
    crate::sys::clear_capabilities()
}

/// In the child: `no_new_privs`, then Landlock, with the rule for the
/// plugin's own `/proc/<pid>` (`own`, opened before the limits).
fn confine_self(
    no_new_privs: bool,
    ruleset: Option<libc::c_int>,
    proc_self: u64,
    own: Option<libc::c_int>,
) -> std::io::Result<()> {
    if no_new_privs {
        crate::sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1)?;
    }
    if let (Some(fd), Some(own)) = (ruleset, own) {
        // "self" was this process, which exec keeps: the plugin.
        let added = crate::landlock::add_path_beneath(fd, proc_self, own);
        crate::sys::close(own);
        added?;
    }
    if let Some(fd) = ruleset {
        crate::landlock::restrict_self(fd)?;
    }
    Ok(())
}

/// In the child: every descriptor but 0, 1 and 2 marked close-on-exec,
/// so the plugin holds nothing it inherited.
fn cloexec_inherited() {
    if crate::sys::cloexec_from(3).is_ok() {
        return;
    }
    // Kernels before 5.11: one fcntl per possible descriptor.
    let limit = crate::sys::open_max().clamp(3, 65_536);
    for fd in 3..limit {
        #[allow(clippy::cast_possible_truncation)] // at most 65,536
        let fd = fd as libc::c_int;
        if let Some(flags) = crate::sys::fd_flags(fd) {
            crate::sys::set_fd_flags(fd, flags | libc::FD_CLOEXEC);
        }
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn confine(
    cmd: &mut std::process::Command,
    mut sandbox: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) {
    use std::os::unix::process::CommandExt as _;
    let in_child = move || {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
            .map_err(std::io::Error::from)?;
        // A session (and process group) of its own, and every process it
        // starts kept in its tree: one that loses its parent comes back to
        // it, never to init (`crate::tree`). Kept across exec.
        rustix::process::setsid().map_err(std::io::Error::from)?;
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(std::io::Error::from)?;
        cloexec_inherited();
        sandbox()
    };
    // SAFETY: `in_child` runs between fork and exec, where only
    // async-signal-safe calls are allowed: it makes single system calls
    // (`crate::sys`, rustix's prctl) that allocate nothing and take no lock.
    unsafe {
        cmd.pre_exec(in_child);
    }
}

#[cfg(not(target_os = "linux"))]
fn confine(
    _: &mut std::process::Command,
    _: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) {
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_user_runs_at_least_this_test() {
        assert!(tasks_of_this_user() >= 1);
    }
}
