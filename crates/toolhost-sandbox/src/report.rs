//! The enforcement report: what the sandbox does for a policy on this
//! kernel, rule by rule, in words for the operator. A rule the kernel
//! cannot enforce is reported as `not enforced`, and the daemon logs each
//! missing mechanism once ([`log_kernel_gaps`]): nothing fails silently.

use crate::kernel::kernel;
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
        (true, true) => push(Rule::NoNewPrivs, RuleState::Enforced, "set".into()),
        (false, true) if uses_landlock && landlock_for_fs => push(
            Rule::NoNewPrivs,
            RuleState::Enforced,
            "set anyway: Landlock needs it".into(),
        ),
        (false, _) => push(Rule::NoNewPrivs, RuleState::Off, "turned off".into()),
        (true, false) => push(
            Rule::NoNewPrivs,
            RuleState::NotEnforced,
            "not on this OS".into(),
        ),
    }
    let nnp = policy.no_new_privs || (uses_landlock && landlock_for_fs);
    match (policy.drop_capabilities, linux) {
        (false, _) => push(Rule::Capabilities, RuleState::Off, "turned off".into()),
        (true, false) => push(
            Rule::Capabilities,
            RuleState::NotEnforced,
            "not on this OS".into(),
        ),
        (true, true) if k.root => push(
            Rule::Capabilities,
            RuleState::Enforced,
            "every set cleared before exec (bounding, permitted, effective, inheritable, ambient); no device nodes".into(),
        ),
        (true, true) if nnp => push(
            Rule::Capabilities,
            RuleState::Enforced,
            "permitted, effective, inheritable and ambient cleared; the daemon's user has no bounding set to give, and no_new_privs keeps set-uid programs from granting any".into(),
        ),
        (true, true) => push(
            Rule::Capabilities,
            RuleState::NotEnforced,
            "cleared at start, but with no_new_privs off a set-uid program the plugin runs can grant capabilities".into(),
        ),
    }
    match (&policy.run_as, k.root) {
        (Some(u), _) => push(
            Rule::User,
            RuleState::Enforced,
            format!(
                "runs as {:?} (uid {}, gid {}), no other group; it owns only its data and socket directories",
                u.name, u.uid, u.gid
            ),
        ),
        (None, true) => push(
            Rule::User,
            RuleState::NotEnforced,
            "runs as root, without capabilities: root's own files are closed to it only where the filesystem rule holds; set [sandbox] user to run plugins as an unprivileged account".into(),
        ),
        (None, false) => push(
            Rule::User,
            RuleState::Enforced,
            format!(
                "runs as the daemon's user (uid {}), not root",
                rustix::process::geteuid().as_raw()
            ),
        ),
    }
    let limit = |v: Option<u64>, what: &str| match v {
        Some(n) => (RuleState::Enforced, format!("{what} {n}")),
        None => (RuleState::Off, "turned off".into()),
    };
    let (s, d) = limit(policy.memory_bytes.map(|b| b >> 20), "address space (MiB)");
    push(Rule::Memory, s, d);
    let (s, d) = limit(policy.open_files, "open files");
    push(Rule::OpenFiles, s, d);
    match (policy.processes, &k.pids) {
        (None, _) => push(Rule::Processes, RuleState::Off, "turned off".into()),
        (Some(n), Ok(_)) => push(
            Rule::Processes,
            RuleState::Enforced,
            format!("{n} processes and threads (pids cgroup)"),
        ),
        (Some(n), Err(why)) if !k.root => push(
            Rule::Processes,
            RuleState::Enforced,
            format!(
                "{n} more than the user runs at the plugin's start (RLIMIT_NPROC counts every process of the daemon's user; no pids cgroup: {why})"
            ),
        ),
        (Some(_), Err(why)) => push(
            Rule::Processes,
            RuleState::NotEnforced,
            format!("no pids cgroup ({why}), and RLIMIT_NPROC does not bind root"),
        ),
    }
    match policy.disk_bytes {
        None => push(Rule::Disk, RuleState::Off, "turned off".into()),
        // Which of the two holds is known once the data directory is
        // (`crate::disk::Quota::apply`); the runtime says so per process.
        Some(b) => push(
            Rule::Disk,
            RuleState::Enforced,
            format!(
                "data directory {} MiB (a project quota where its file system has them, else measured), and no file larger",
                b >> 20
            ),
        ),
    }
    match (&policy.filesystem, landlock_for_fs) {
        (None, _) => push(Rule::Filesystem, RuleState::Off, "turned off".into()),
        (Some(_), true) => push(
            Rule::Filesystem,
            RuleState::Enforced,
            format!(
                "Landlock ABI {}: own, data and socket directories, system paths, grants",
                k.landlock_abi
            ),
        ),
        (Some(_), false) => push(
            Rule::Filesystem,
            RuleState::NotEnforced,
            "this kernel has no Landlock: every path the daemon can reach is open".into(),
        ),
    }
    let filter = linux && crate::seccomp::target().is_ok();
    let landlock_net = linux && k.landlock_abi >= 4;
    let ports = |ports: &[u16]| {
        ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (&policy.network, landlock_net, filter) {
        (None, _, _) => push(Rule::Network, RuleState::Off, "turned off".into()),
        // The filter alone refuses every IPv4 and IPv6 socket.
        (Some(NetPolicy::Deny), _, true) => push(
            Rule::Network,
            RuleState::Enforced,
            "no IPv4 or IPv6 socket at all (no TCP, no UDP, no listener); no raw or packet socket, no MPTCP, no io_uring (seccomp)".into(),
        ),
        (Some(n), true, true) => push(
            Rule::Network,
            RuleState::Enforced,
            match n {
                NetPolicy::Connect(p) => format!(
                    "TCP connect to port(s) {} only, no bind (Landlock); no MPTCP, no TCP Fast Open, no raw or packet socket, no io_uring (seccomp); no TCP listener, bound or not (the daemon answers each listen()); UDP (for DNS) remains",
                    ports(p)
                ),
                _ => "TCP connect anywhere, no bind (Landlock); no MPTCP, no TCP Fast Open, no raw or packet socket, no io_uring (seccomp); no TCP listener, bound or not (the daemon answers each listen()); UDP remains".into(),
            },
        ),
        (Some(NetPolicy::Deny), true, false) => push(
            Rule::Network,
            RuleState::NotEnforced,
            "no TCP connect or bind (Landlock), but no seccomp filter on this machine: UDP, MPTCP and TCP Fast Open are open".into(),
        ),
        (Some(_), true, false) => push(
            Rule::Network,
            RuleState::NotEnforced,
            "TCP connect limited and bind refused (Landlock), but no seccomp filter on this machine: MPTCP and TCP Fast Open get around it".into(),
        ),
        (Some(_), false, _) => push(
            Rule::Network,
            RuleState::NotEnforced,
            "this kernel has no Landlock network rules (ABI < 4): granted TCP is not limited to its ports".into(),
        ),
    }
    if uses_landlock && linux && k.landlock_abi >= 6 {
        push(
            Rule::Signals,
            RuleState::Enforced,
            "no signal to, and no abstract Unix socket of, a process outside the sandbox".into(),
        );
    } else if uses_landlock {
        push(
            Rule::Signals,
            RuleState::NotEnforced,
            "the plugin may signal any process of the daemon's user (Landlock ABI < 6)".into(),
        );
    } else {
        push(Rule::Signals, RuleState::Off, "Landlock is off".into());
    }
    push(
        Rule::CpuPerCall,
        RuleState::NotEnforced,
        "a long-lived process has no per-call CPU limit; each call is bounded by its deadline"
            .into(),
    );
    out
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
