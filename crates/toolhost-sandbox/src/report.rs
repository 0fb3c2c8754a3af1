//! The enforcement report: what the sandbox does for a policy on this
//! kernel, rule by rule, in words for the operator. A rule the kernel
//! cannot enforce is reported as `not enforced`, and the daemon logs each
//! missing mechanism once ([`log_kernel_gaps`]): nothing fails silently.

use crate::kernel::{Kernel, kernel};
use crate::policy::{NetPolicy, Rule, SandboxPolicy};
use std::sync::OnceLock;

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
    /// The rule.
    pub rule: Rule,
    /// Whether it holds.
    pub state: RuleState,
    /// What exactly, in words for the operator.
    pub detail: String,
}

/// What the sandbox does for `policy` on this kernel, rule by rule.
#[must_use]
pub fn enforcement(policy: &SandboxPolicy) -> Vec<RuleStatus> {
    let k = kernel();
    let linux = cfg!(target_os = "linux");
    let facts = Facts {
        linux,
        uses_landlock: policy.filesystem.is_some() || policy.network.is_some(),
        landlock_for_fs: linux && k.landlock_abi >= 1,
    };
    let rules: [(Rule, Judged); 10] = [
        (Rule::NoNewPrivs, no_new_privs(policy, &facts)),
        (Rule::Capabilities, capabilities(policy, k, &facts)),
        (Rule::User, user(policy, k)),
        (
            Rule::Memory,
            limit(policy.memory_bytes.map(|b| b >> 20), "address space (MiB)"),
        ),
        (Rule::OpenFiles, limit(policy.open_files, "open files")),
        (Rule::Processes, processes(policy, k)),
        (Rule::Disk, disk(policy)),
        (Rule::Filesystem, filesystem(policy, k, &facts)),
        (Rule::Network, network(policy, k, &facts)),
        (Rule::Signals, signals(k, &facts)),
    ];
    let mut out: Vec<RuleStatus> = rules
        .into_iter()
        .map(|(rule, (state, detail))| RuleStatus {
            rule,
            state,
            detail,
        })
        .collect();
    out.push(RuleStatus {
        rule: Rule::CpuPerCall,
        state: RuleState::NotEnforced,
        detail:
            "a long-lived process has no per-call CPU limit; each call is bounded by its deadline"
                .into(),
    });
    out
}

/// A rule's state on this kernel, and the words for the operator.
type Judged = (RuleState, String);

/// What more than one rule's judgement turns on.
struct Facts {
    linux: bool,
    /// The policy asks for a Landlock rule (files or network).
    uses_landlock: bool,
    /// This kernel has Landlock for files.
    landlock_for_fs: bool,
}

fn off() -> Judged {
    (RuleState::Off, "turned off".into())
}

fn no_new_privs(policy: &SandboxPolicy, f: &Facts) -> Judged {
    match (policy.no_new_privs, f.linux) {
        (true, true) => (RuleState::Enforced, "set".into()),
        (false, true) if f.uses_landlock && f.landlock_for_fs => {
            (RuleState::Enforced, "set anyway: Landlock needs it".into())
        }
        (false, _) => off(),
        (true, false) => (RuleState::NotEnforced, "not on this OS".into()),
    }
}

fn capabilities(policy: &SandboxPolicy, k: &Kernel, f: &Facts) -> Judged {
    let nnp = policy.no_new_privs || (f.uses_landlock && f.landlock_for_fs);
    match (policy.drop_capabilities, f.linux) {
        (false, _) => off(),
        (true, false) => (RuleState::NotEnforced, "not on this OS".into()),
        (true, true) if k.root => (
            RuleState::Enforced,
            "every set cleared before exec (bounding, permitted, effective, inheritable, ambient); no device nodes".into(),
        ),
        (true, true) if nnp => (
            RuleState::Enforced,
            "permitted, effective, inheritable and ambient cleared; the daemon's user has no bounding set to give, and no_new_privs keeps set-uid programs from granting any".into(),
        ),
        (true, true) => (
            RuleState::NotEnforced,
            "cleared at start, but with no_new_privs off a set-uid program the plugin runs can grant capabilities".into(),
        ),
    }
}

fn user(policy: &SandboxPolicy, k: &Kernel) -> Judged {
    match (&policy.run_as, k.root) {
        (Some(u), _) => (
            RuleState::Enforced,
            format!(
                "runs as {:?} (uid {}, gid {}), no other group; it owns only its data and socket directories",
                u.name, u.uid, u.gid
            ),
        ),
        (None, true) => (
            RuleState::NotEnforced,
            "runs as root, without capabilities: root's own files are closed to it only where the filesystem rule holds; set [sandbox] user to run plugins as an unprivileged account".into(),
        ),
        (None, false) => (
            RuleState::Enforced,
            format!(
                "runs as the daemon's user (uid {}), not root",
                rustix::process::geteuid().as_raw()
            ),
        ),
    }
}

fn limit(value: Option<u64>, what: &str) -> Judged {
    match value {
        Some(n) => (RuleState::Enforced, format!("{what} {n}")),
        None => off(),
    }
}

fn processes(policy: &SandboxPolicy, k: &Kernel) -> Judged {
    match (policy.processes, &k.pids) {
        (None, _) => off(),
        (Some(n), Ok(_)) => (
            RuleState::Enforced,
            format!("{n} processes and threads (pids cgroup)"),
        ),
        (Some(n), Err(why)) if !k.root => (
            RuleState::Enforced,
            format!(
                "{n} more than the user runs at the plugin's start (RLIMIT_NPROC counts every process of the daemon's user; no pids cgroup: {why})"
            ),
        ),
        (Some(_), Err(why)) => (
            RuleState::NotEnforced,
            format!("no pids cgroup ({why}), and RLIMIT_NPROC does not bind root"),
        ),
    }
}

fn disk(policy: &SandboxPolicy) -> Judged {
    match policy.disk_bytes {
        None => off(),
        // Which of the two holds is known once the data directory is
        // (`crate::disk::Quota::apply`); the runtime says so per process.
        Some(b) => (
            RuleState::Enforced,
            format!(
                "data directory {} MiB (a project quota where its file system has them, else measured), and no file larger",
                b >> 20
            ),
        ),
    }
}

fn filesystem(policy: &SandboxPolicy, k: &Kernel, f: &Facts) -> Judged {
    match (&policy.filesystem, f.landlock_for_fs) {
        (None, _) => off(),
        (Some(_), true) => (
            RuleState::Enforced,
            format!(
                "Landlock ABI {}: own, data and socket directories, system paths, grants",
                k.landlock_abi
            ),
        ),
        (Some(_), false) => (
            RuleState::NotEnforced,
            "this kernel has no Landlock: every path the daemon can reach is open".into(),
        ),
    }
}

fn network(policy: &SandboxPolicy, k: &Kernel, f: &Facts) -> Judged {
    let filter = f.linux && crate::seccomp::target().is_ok();
    let landlock_net = f.linux && k.landlock_abi >= 4;
    match (&policy.network, landlock_net, filter) {
        (None, _, _) => off(),
        // The filter alone refuses every IPv4 and IPv6 socket.
        (Some(NetPolicy::Deny), _, true) => (
            RuleState::Enforced,
            "no IPv4 or IPv6 socket at all (no TCP, no UDP, no listener); no raw or packet socket, no MPTCP, no io_uring (seccomp)".into(),
        ),
        (Some(NetPolicy::Connect(p)), true, true) => (
            RuleState::Enforced,
            format!(
                "TCP connect to port(s) {} only, no bind (Landlock); no MPTCP, no TCP Fast Open, no raw or packet socket, no io_uring (seccomp); no TCP listener, bound or not (the daemon answers each listen()); UDP (for DNS) remains",
                p.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
            ),
        ),
        (Some(_), true, true) => (
            RuleState::Enforced,
            "TCP connect anywhere, no bind (Landlock); no MPTCP, no TCP Fast Open, no raw or packet socket, no io_uring (seccomp); no TCP listener, bound or not (the daemon answers each listen()); UDP remains".into(),
        ),
        (Some(NetPolicy::Deny), true, false) => (
            RuleState::NotEnforced,
            "no TCP connect or bind (Landlock), but no seccomp filter on this machine: UDP, MPTCP and TCP Fast Open are open".into(),
        ),
        (Some(_), true, false) => (
            RuleState::NotEnforced,
            "TCP connect limited and bind refused (Landlock), but no seccomp filter on this machine: MPTCP and TCP Fast Open get around it".into(),
        ),
        (Some(_), false, _) => (
            RuleState::NotEnforced,
            "this kernel has no Landlock network rules (ABI < 4): granted TCP is not limited to its ports".into(),
        ),
    }
}

fn signals(k: &Kernel, f: &Facts) -> Judged {
    if f.uses_landlock && f.linux && k.landlock_abi >= 6 {
        (
            RuleState::Enforced,
            "no signal to, and no abstract Unix socket of, a process outside the sandbox".into(),
        )
    } else if f.uses_landlock {
        (
            RuleState::NotEnforced,
            "the plugin may signal any process of the daemon's user (Landlock ABI < 6)".into(),
        )
    } else {
        (RuleState::Off, "Landlock is off".into())
    }
}

/// Logs, once per daemon, each mechanism this kernel lacks, and a root
/// daemon whose plugins run as root (judged on the first policy started).
pub fn log_kernel_gaps(policy: &SandboxPolicy) {
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
        if k.root && policy.run_as.is_none() && *policy != SandboxPolicy::default() {
            tracing::warn!(
                "toolhost runs as root and [sandbox] user is not set: plugins run as root (without capabilities); name an unprivileged account for them"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_reported_whatever_the_kernel() {
        let on = SandboxPolicy {
            no_new_privs: true,
            drop_capabilities: true,
            memory_bytes: Some(512 << 20),
            open_files: Some(256),
            processes: Some(32),
            disk_bytes: Some(64 << 20),
            disk_files: Some(4096),
            filesystem: Some(Vec::new()),
            network: Some(NetPolicy::Deny),
            run_as: None,
        };
        let rules: Vec<Rule> = enforcement(&on).iter().map(|r| r.rule).collect();
        assert_eq!(rules, Rule::ALL);
        let off = enforcement(&SandboxPolicy::default());
        assert!(
            off.iter()
                .filter(|r| r.rule != Rule::CpuPerCall && r.rule != Rule::User)
                .all(|r| r.state == RuleState::Off)
        );
    }
}
