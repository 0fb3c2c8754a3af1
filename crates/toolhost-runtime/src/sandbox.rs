//! The sandbox each plugin process runs in (Linux): what the kernel, not the
//! plugin's good manners, keeps it from doing.
//!
//! Four mechanisms, each applied in the child between `fork` and `exec`, so
//! the plugin's first instruction already runs inside them:
//!
//! - **`no_new_privs`**: no set-uid program or file capability can give the
//!   plugin (or anything it runs) more rights than it has.
//! - **Resource limits** (`setrlimit`): address space (`RLIMIT_AS`) and open
//!   files (`RLIMIT_NOFILE`).
//! - **A pids cgroup** per process, with `pids.max`: a fork bomb stops at the
//!   limit, whatever the user (root ignores `RLIMIT_NPROC`, and that limit
//!   counts every process of the user anyway). The cgroup also lets toolhost
//!   kill every process the plugin started, even one that left its process
//!   group. Used where a pids cgroup can be made (cgroup v1's `pids`
//!   hierarchy, or v2 with the controller delegated); otherwise
//!   `RLIMIT_NPROC` for a non-root user, and "not enforced" for root.
//! - **Landlock** (kernel 5.13+): the file system beyond the plugin's own
//!   directories, the system's read-only paths and what was granted is out
//!   of reach; with ABI 4 (6.7+), so are TCP connections to ports not
//!   granted and every TCP bind; with ABI 6 (6.12+), signals to processes
//!   outside the sandbox and abstract Unix sockets.
//!
//! The ruleset is built in the parent (it opens paths and allocates); the
//! child only makes single system calls, which is all that is safe after
//! `fork` in a threaded program.
//!
//! Where the kernel lacks a mechanism, [`enforcement`] says so for each
//! rule, and the daemon logs it once: nothing fails silently.

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a plugin may do under a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsAccess {
    /// Read files, list directories, execute.
    ReadExec,
    /// Everything: read, write, create, remove, execute.
    ReadWrite,
}

/// One path and what may be done beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRule {
    /// A file or directory (a directory covers everything beneath it).
    pub path: PathBuf,
    /// What may be done there.
    pub access: FsAccess,
}

/// TCP access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetPolicy {
    /// No TCP connection, no TCP bind.
    Deny,
    /// Connections to these ports only; no bind.
    Connect(Vec<u16>),
    /// Connections anywhere; no bind.
    Any,
}

/// The sandbox of one plugin: each rule `None` (or `false`) is off.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxPolicy {
    /// Set `no_new_privs`.
    pub no_new_privs: bool,
    /// Address-space limit in bytes.
    pub memory_bytes: Option<u64>,
    /// Open-file limit.
    pub open_files: Option<u64>,
    /// Limit on processes and threads together.
    pub processes: Option<u64>,
    /// The file system rule: the paths allowed besides the plugin's own
    /// directories (added by the runtime) and the system's read-only ones.
    /// `None`: the rule is off and the plugin sees what the daemon sees.
    pub filesystem: Option<Vec<FsRule>>,
    /// The network rule; `None`: off.
    pub network: Option<NetPolicy>,
}

/// Whether one rule holds for a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleState {
    /// The kernel enforces it.
    Enforced,
    /// The operator turned it off for this plugin.
    Off,
    /// This kernel (or this daemon's rights) cannot enforce it.
    NotEnforced,
}

impl RuleState {
    /// `enforced`, `off` or `not enforced`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforced => "enforced",
            Self::Off => "off",
            Self::NotEnforced => "not enforced",
        }
    }
}

/// One rule of a plugin's sandbox and whether it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleStatus {
    /// `no_new_privs`, `memory`, `open_files`, `processes`, `filesystem`,
    /// `network`, `signals`, `cpu_per_call`.
    pub rule: &'static str,
    /// Whether it holds.
    pub state: RuleState,
    /// What exactly, in words for the operator.
    pub detail: String,
}

// Landlock's ABI (include/uapi/linux/landlock.h).
const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;
const RULE_NET_PORT: libc::c_int = 2;
const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

#[repr(C)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

/// The file-system rights this ABI knows (all of them are handled, so
/// whatever is not allowed is denied).
fn fs_rights(abi: u32) -> u64 {
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

/// What this kernel offers, probed once.
#[derive(Debug)]
struct Kernel {
    /// Landlock's ABI version; 0 when absent or disabled.
    landlock_abi: u32,
    /// This daemon's pids cgroup directory, or why there is none.
    pids: Result<PathBuf, String>,
    root: bool,
}

fn kernel() -> &'static Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    KERNEL.get_or_init(|| Kernel {
        landlock_abi: landlock_abi(),
        pids: pids_root(),
        root: rustix::process::geteuid().is_root(),
    })
}

#[allow(unsafe_code)]
fn landlock_abi() -> u32 {
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

/// Makes `<own pids cgroup>/toolhost-<pid>`, where each plugin process gets
/// a cgroup of its own. Stale directories of daemons that are gone are
/// removed on the way.
fn pids_root() -> Result<PathBuf, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let v1 = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "pids")
            .then(|| Path::new("/sys/fs/cgroup/pids").join(path.trim_start_matches('/')))
    });
    let base = match v1 {
        Some(dir) if dir.join("cgroup.procs").exists() => dir,
        _ => {
            let path = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .ok_or("no pids cgroup (neither cgroup v1's pids nor cgroup v2)")?;
            let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            let controllers =
                std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            if !controllers.split_whitespace().any(|c| c == "pids") {
                return Err("the pids controller is not available to this daemon's cgroup".into());
            }
            dir
        }
    };
    remove_stale_cgroups(&base);
    let mine = base.join(format!("toolhost-{}", std::process::id()));
    match std::fs::create_dir(&mine) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", mine.display())),
    }
    if !mine.join("pids.max").exists() {
        // cgroup v2: the controller must be enabled for the children.
        let _ = std::fs::write(mine.join("cgroup.subtree_control"), "+pids");
    }
    // v1 has pids.max in every directory; v2 only in the children once
    // enabled: try one.
    let probe = mine.join("probe");
    let _ = std::fs::create_dir(&probe);
    let works = probe.join("pids.max").exists();
    let _ = std::fs::remove_dir(&probe);
    if works {
        Ok(mine)
    } else {
        let _ = std::fs::remove_dir(&mine);
        Err("the pids controller cannot be enabled below this daemon's cgroup".into())
    }
}

fn remove_stale_cgroups(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolhost-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        if !alive {
            if let Ok(children) = std::fs::read_dir(e.path()) {
                for c in children.filter_map(Result::ok) {
                    if c.path().is_dir() {
                        kill_all(&c.path());
                        let _ = std::fs::remove_dir(c.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// SIGKILL to every process in a cgroup.
fn kill_all(dir: &Path) {
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
}

/// Process-group leaders of this daemon's plugins, for [`is_plugin_process`].
static PLUGIN_LEADERS: std::sync::Mutex<std::collections::BTreeSet<u32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

pub(crate) fn register_leader(pid: u32) {
    if let Ok(mut set) = PLUGIN_LEADERS.lock() {
        set.insert(pid);
    }
}

pub(crate) fn forget_leader(pid: u32) {
    if let Ok(mut set) = PLUGIN_LEADERS.lock() {
        set.remove(&pid);
    }
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

/// Whether `pid` is one of this daemon's plugins or a process one started:
/// a member of one of its pids cgroups (which no sandboxed process can
/// leave), or, without cgroups, a descendant of a plugin, or in a plugin's
/// process group or session. The admin socket refuses such peers: a
/// plugin must not reconfigure the daemon that confines it.
#[must_use]
pub fn is_plugin_process(pid: u32) -> bool {
    if let Ok(root) = &kernel().pids
        && let Some(name) = root.file_name().and_then(|n| n.to_str())
        && std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|c| c.contains(&format!("/{name}/")))
    {
        return true;
    }
    let Ok(leaders) = PLUGIN_LEADERS.lock().map(|s| s.clone()) else {
        return false;
    };
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
        if ppid <= 1 || ppid == me {
            return false;
        }
        at = ppid;
    }
    false
}

/// Removes this daemon's cgroup directory (at shutdown, once plugins are
/// stopped).
pub fn remove_cgroup_root() {
    if let Ok(dir) = &kernel().pids {
        let _ = std::fs::remove_dir(dir);
    }
}

/// What the sandbox does for `policy` on this kernel, rule by rule.
#[must_use]
pub fn enforcement(policy: &SandboxPolicy) -> Vec<RuleStatus> {
    let k = kernel();
    let mut out = Vec::new();
    let mut push = |rule, state, detail: String| {
        out.push(RuleStatus {
            rule,
            state,
            detail,
        });
    };
    let linux = cfg!(target_os = "linux");
    let landlock_for_fs = linux && k.landlock_abi >= 1;
    let uses_landlock = policy.filesystem.is_some() || policy.network.is_some();
    match (policy.no_new_privs, linux) {
        (true, true) => push("no_new_privs", RuleState::Enforced, "set".into()),
        (false, true) if uses_landlock && landlock_for_fs => push(
            "no_new_privs",
            RuleState::Enforced,
            "set anyway: Landlock needs it".into(),
        ),
        (false, _) => push("no_new_privs", RuleState::Off, "turned off".into()),
        (true, false) => push(
            "no_new_privs",
            RuleState::NotEnforced,
            "not on this OS".into(),
        ),
    }
    let limit = |v: Option<u64>, what: &str| match v {
        Some(n) => (RuleState::Enforced, format!("{what} {n}")),
        None => (RuleState::Off, "turned off".into()),
    };
    let (s, d) = limit(policy.memory_bytes.map(|b| b >> 20), "address space (MiB)");
    push("memory", s, d);
    let (s, d) = limit(policy.open_files, "open files");
    push("open_files", s, d);
    match (policy.processes, &k.pids) {
        (None, _) => push("processes", RuleState::Off, "turned off".into()),
        (Some(n), Ok(_)) => push(
            "processes",
            RuleState::Enforced,
            format!("{n} processes and threads (pids cgroup)"),
        ),
        (Some(n), Err(why)) if !k.root => push(
            "processes",
            RuleState::Enforced,
            format!(
                "{n} more than the user runs at the plugin's start (RLIMIT_NPROC counts every process of the daemon's user; no pids cgroup: {why})"
            ),
        ),
        (Some(_), Err(why)) => push(
            "processes",
            RuleState::NotEnforced,
            format!("no pids cgroup ({why}), and RLIMIT_NPROC does not bind root"),
        ),
    }
    match (&policy.filesystem, landlock_for_fs) {
        (None, _) => push("filesystem", RuleState::Off, "turned off".into()),
        (Some(_), true) => push(
            "filesystem",
            RuleState::Enforced,
            format!(
                "Landlock ABI {}: own, data and socket directories, system paths, grants",
                k.landlock_abi
            ),
        ),
        (Some(_), false) => push(
            "filesystem",
            RuleState::NotEnforced,
            "this kernel has no Landlock: every path the daemon can reach is open".into(),
        ),
    }
    match (&policy.network, linux && k.landlock_abi >= 4) {
        (None, _) => push("network", RuleState::Off, "turned off".into()),
        (Some(n), true) => push(
            "network",
            RuleState::Enforced,
            match n {
                NetPolicy::Deny => "no TCP connect or bind (UDP is not covered)".into(),
                NetPolicy::Connect(ports) => format!(
                    "TCP connect to port(s) {} only, no bind (UDP is not covered)",
                    ports
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                NetPolicy::Any => "TCP connect anywhere, no bind".into(),
            },
        ),
        (Some(NetPolicy::Any), false) => push(
            "network",
            RuleState::NotEnforced,
            "granted; TCP bind is not blocked (Landlock ABI < 4)".into(),
        ),
        (Some(_), false) => push(
            "network",
            RuleState::NotEnforced,
            "this kernel has no Landlock network rules (ABI < 4): TCP is open".into(),
        ),
    }
    if uses_landlock && linux && k.landlock_abi >= 6 {
        push(
            "signals",
            RuleState::Enforced,
            "no signal to, and no abstract Unix socket of, a process outside the sandbox".into(),
        );
    } else if uses_landlock {
        push(
            "signals",
            RuleState::NotEnforced,
            "the plugin may signal any process of the daemon's user (Landlock ABI < 6)".into(),
        );
    } else {
        push("signals", RuleState::Off, "Landlock is off".into());
    }
    push(
        "cpu_per_call",
        RuleState::NotEnforced,
        "a long-lived process has no per-call CPU limit; each call is bounded by its deadline"
            .into(),
    );
    out
}

/// Logs, once per daemon, each mechanism this kernel lacks.
pub fn log_kernel_gaps() {
    static LOGGED: OnceLock<()> = OnceLock::new();
    LOGGED.get_or_init(|| {
        let k = kernel();
        if k.landlock_abi == 0 {
            tracing::warn!(
                "this kernel has no Landlock: plugins' file system and network access are NOT restricted"
            );
        } else if k.landlock_abi < 4 {
            tracing::warn!(
                abi = k.landlock_abi,
                "this kernel's Landlock has no network rules: plugins' TCP access is NOT restricted"
            );
        }
        if let Err(why) = &k.pids {
            if k.root {
                tracing::warn!(
                    "no pids cgroup ({why}): plugins' process counts are NOT limited (root ignores RLIMIT_NPROC)"
                );
            } else {
                tracing::info!("no pids cgroup ({why}): plugins' process counts use RLIMIT_NPROC");
            }
        }
    });
}

/// One process's pids cgroup; its processes are killed and the directory
/// removed when dropped.
#[derive(Debug)]
pub(crate) struct Jail {
    dir: PathBuf,
}

impl Jail {
    fn create(root: &Path, max: u64) -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let dir = root.join(NEXT.fetch_add(1, Ordering::Relaxed).to_string());
        std::fs::create_dir(&dir)?;
        let jail = Self { dir };
        std::fs::write(jail.dir.join("pids.max"), max.to_string())?;
        Ok(jail)
    }

    /// Whether any process is still in it.
    pub(crate) fn is_empty(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs")).map_or(true, |s| s.trim().is_empty())
    }

    /// SIGKILL to every process still in it: helpers that left the process
    /// group, the remains of a fork bomb.
    pub(crate) fn kill_all(&self) {
        kill_all(&self.dir);
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        self.kill_all();
        if std::fs::remove_dir(&self.dir).is_ok() {
            return;
        }
        // Killed processes leave the cgroup once reaped, a moment later.
        let dir = self.dir.clone();
        let _ = std::thread::Builder::new()
            .name("toolhost-cgroup-cleanup".into())
            .spawn(move || {
                for _ in 0..200 {
                    kill_all(&dir);
                    if std::fs::remove_dir(&dir).is_ok() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            });
    }
}

/// Everything the child applies to itself, prepared in the parent.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    no_new_privs: bool,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    cgroup_procs: Option<CString>,
    ruleset: Option<OwnedFd>,
    /// Rights on the plugin's own `/proc/<pid>`, added in the child.
    proc_self: u64,
    pub(crate) jail: Option<Jail>,
}

/// What a plugin gets besides the policy's own paths: its directory, its
/// command, its data and socket directories.
pub(crate) struct Own<'a> {
    pub dir: &'a Path,
    pub command: &'a Path,
    pub data_dir: &'a Path,
    pub socket_dir: &'a Path,
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

impl Prepared {
    /// Prepares `policy` for one process: the Landlock ruleset (opening
    /// every allowed path), the cgroup, the limits.
    pub(crate) fn new(policy: &SandboxPolicy, own: &Own<'_>) -> std::io::Result<Self> {
        if !cfg!(target_os = "linux") {
            return Ok(Self::default());
        }
        let k = kernel();
        let mut p = Self {
            no_new_privs: policy.no_new_privs,
            ..Self::default()
        };
        if let Some(b) = policy.memory_bytes {
            p.rlimits.push((libc::RLIMIT_AS, b));
        }
        if let Some(n) = policy.open_files {
            p.rlimits.push((libc::RLIMIT_NOFILE, n));
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

    /// The closure the child runs before `exec`: single system calls only.
    pub(crate) fn in_child(&self) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
        let rlimits = self.rlimits.clone();
        let procs = self.cgroup_procs.clone();
        let ruleset = self.ruleset.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
        let no_new_privs = self.no_new_privs;
        let proc_self = self.proc_self;
        move || apply(&rlimits, procs.as_ref(), no_new_privs, ruleset, proc_self)
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

fn cstring(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

/// In the child: limits, cgroup, `no_new_privs`, Landlock, in that order
/// (joining the cgroup writes to cgroupfs, which Landlock would forbid).
#[allow(unsafe_code)]
fn apply(
    rlimits: &[(libc::__rlimit_resource_t, u64)],
    procs: Option<&CString>,
    no_new_privs: bool,
    ruleset: Option<libc::c_int>,
    proc_self: u64,
) -> std::io::Result<()> {
    let fail = || Err(std::io::Error::last_os_error());
    // SAFETY: each block is one system call on memory owned by this frame
    // or by the closure (which outlives the call); none allocates or takes
    // a lock, so each is safe between fork and exec.
    unsafe {
        for &(resource, value) in rlimits {
            let mut current = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(resource, &raw mut current) != 0 {
                return fail();
            }
            let v = value.min(current.rlim_max);
            let new = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            if libc::setrlimit(resource, &raw const new) != 0 {
                return fail();
            }
        }
        if let Some(path) = procs {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return fail();
            }
            // "0" moves the writer itself.
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if written != 1 {
                return fail();
            }
        }
        if no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return fail();
        }
        if let Some(fd) = ruleset
            && proc_self != 0
        {
            // Here "self" is this process, which exec keeps: the plugin.
            let own = libc::open(
                c"/proc/self".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if own < 0 {
                return fail();
            }
            let rule = PathBeneathAttr {
                allowed_access: proc_self,
                parent_fd: own,
            };
            let added = libc::syscall(
                libc::SYS_landlock_add_rule,
                fd,
                RULE_PATH_BENEATH,
                &raw const rule,
                0u32,
            );
            libc::close(own);
            if added != 0 {
                return fail();
            }
        }
        if let Some(fd) = ruleset
            && libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
        {
            return fail();
        }
    }
    Ok(())
}

/// Builds the Landlock ruleset: every file-system right this ABI knows is
/// handled (so denied unless allowed), TCP connect and bind when a network
/// policy applies, and (ABI 6) signal and abstract-socket scoping.
#[allow(unsafe_code)]
fn ruleset(
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
        let mut rules: Vec<(PathBuf, u64)> = Vec::new();
        rules.extend(SYSTEM_READ.iter().map(|p| (PathBuf::from(p), read)));
        let device = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
        rules.extend(DEVICES.iter().map(|p| (PathBuf::from(p), device)));
        rules.push((own.dir.to_path_buf(), read));
        rules.push((own.command.to_path_buf(), read));
        rules.push((own.data_dir.to_path_buf(), all));
        rules.push((own.socket_dir.to_path_buf(), all));
        for r in extra {
            let access = match r.access {
                FsAccess::ReadExec => read,
                FsAccess::ReadWrite => all,
            };
            rules.push((r.path.clone(), access));
        }
        for (path, access) in rules {
            add_path_rule(&ruleset, &path, access & all, abi)?;
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
/// (it cannot be reached either way).
#[allow(unsafe_code)]
fn add_path_rule(ruleset: &OwnedFd, path: &Path, access: u64, abi: u32) -> std::io::Result<()> {
    let Ok(c) = cstring(path) else {
        return Ok(());
    };
    // SAFETY: a valid C string; O_PATH opens for reference only.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: the kernel just returned this descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
    let allowed = if is_dir {
        access
    } else {
        access & file_rights(abi)
    };
    if allowed == 0 {
        return Ok(());
    }
    let rule = PathBeneathAttr {
        allowed_access: allowed,
        parent_fd: fd.as_raw_fd(),
    };
    // SAFETY: live descriptors and a live, initialized attribute.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &raw const rule,
            0u32,
        )
    };
    if r != 0 {
        return Err(std::io::Error::other(format!(
            "cannot allow {} in the sandbox: {}",
            path.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_reported_whatever_the_kernel() {
        let on = SandboxPolicy {
            no_new_privs: true,
            memory_bytes: Some(512 << 20),
            open_files: Some(256),
            processes: Some(32),
            filesystem: Some(Vec::new()),
            network: Some(NetPolicy::Deny),
        };
        let rules: Vec<&str> = enforcement(&on).iter().map(|r| r.rule).collect();
        assert_eq!(
            rules,
            [
                "no_new_privs",
                "memory",
                "open_files",
                "processes",
                "filesystem",
                "network",
                "signals",
                "cpu_per_call"
            ]
        );
        let off = enforcement(&SandboxPolicy::default());
        assert!(
            off.iter()
                .filter(|r| r.rule != "cpu_per_call")
                .all(|r| r.state == RuleState::Off)
        );
    }

    #[test]
    fn this_user_runs_at_least_this_test() {
        assert!(tasks_of_this_user() >= 1);
    }

    #[test]
    fn file_rules_never_carry_directory_rights() {
        for abi in 1..=7 {
            assert_eq!(file_rights(abi) & FS_READ_DIR, 0);
            assert_eq!(fs_rights(abi) & file_rights(abi), file_rights(abi));
        }
    }
}
