//! The capabilities a plugin declared that the operator granted, and the
//! sandbox policy that follows: limits from the manifest capped by the
//! operator's `[sandbox]`, paths and network as declared *and* granted,
//! and rules the operator turned off left out. Only the operator turns a
//! rule off.

use std::path::PathBuf;
use toolhost_manifest::Manifest;
use toolhost_manifest::grants::{Access, Network};
use toolhost_sandbox::{FsAccess, FsRule, NetPolicy, Rule, RunAs, SandboxPolicy};

use super::sources::{Grant, Operator};

/// The sandbox's daemon-wide settings (`[sandbox]`).
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Off for every plugin (the operator's choice; status says so).
    pub enabled: bool,
    /// Address space when a manifest asks for none, MiB.
    pub default_memory_mb: u64,
    /// The most any plugin gets, MiB.
    pub max_memory_mb: u64,
    /// Open files when a manifest asks for none.
    pub default_open_files: u64,
    /// The most any plugin gets.
    pub max_open_files: u64,
    /// Processes and threads when a manifest asks for none.
    pub default_processes: u64,
    /// The most any plugin gets.
    pub max_processes: u64,
    /// A data directory's quota when a manifest asks for none, MiB.
    pub default_disk_mb: u64,
    /// The most files and folders a plugin's data directory holds.
    pub disk_files: u64,
    /// The most any plugin gets, MiB.
    pub max_disk_mb: u64,
    /// Each data directory on an ext4 image of its own, the size of its
    /// quota (`[sandbox] disk_quota = "image"`, a root daemon): the kernel
    /// holds the quota on any file system.
    pub disk_images: bool,
    /// How often each plugin's disk use is read (`[sandbox] disk_check_ms`).
    pub disk_check: std::time::Duration,
    /// Paths every plugin may read and execute: interpreters and libraries
    /// outside the system paths.
    pub read: Vec<PathBuf>,
    /// The account plugins run as (a root daemon only); `None`: the
    /// daemon's own.
    pub user: Option<RunAs>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            default_memory_mb: 4096,
            max_memory_mb: 16_384,
            default_open_files: 1024,
            max_open_files: 65_536,
            default_processes: 256,
            max_processes: 4096,
            default_disk_mb: 1024,
            disk_files: 100_000,
            max_disk_mb: 65_536,
            disk_images: false,
            disk_check: std::time::Duration::from_secs(10),
            read: Vec::new(),
            user: None,
        }
    }
}

/// The environment names a plugin gets from the daemon: the operator's
/// `pass_env`, plus its declared `env` capability when granted.
#[must_use]
pub fn pass_env(m: &Manifest, op: &Operator) -> Vec<String> {
    let mut names = op.pass_env.clone();
    if op.grant.contains(&Grant::Env) {
        names.extend(m.capabilities.env.iter().cloned());
    }
    names.sort();
    names.dedup();
    names
}

/// The sandbox for `m`: limits from the manifest capped by the operator,
/// paths and network as declared *and* granted, rules the operator turned
/// off left out.
///
/// Kept whole on purpose: it maps each manifest grant and operator key onto the
/// policy field by field, in the order of `SandboxPolicy`, so a field left out
/// shows.
#[must_use]
pub fn sandbox_policy(m: &Manifest, op: &Operator, cfg: &SandboxConfig) -> SandboxPolicy {
    if !cfg.enabled {
        return SandboxPolicy::default();
    }
    let on = |rule: Rule| !op.sandbox_off.contains(&rule);
    let caps = &m.capabilities;
    let limit = |rule: Rule, asked: Option<u64>, default: u64, max: u64| {
        on(rule).then(|| asked.unwrap_or(default).min(max))
    };
    let filesystem = on(Rule::Filesystem).then(|| {
        let mut rules: Vec<FsRule> = cfg
            .read
            .iter()
            .chain(&op.read)
            .map(|p| FsRule {
                path: p.clone(),
                access: FsAccess::ReadExec,
            })
            .collect();
        if op.grant.contains(&Grant::Filesystem) {
            rules.extend(caps.filesystem.iter().map(|g| FsRule {
                path: g.path.clone(),
                access: match g.access {
                    Access::Read => FsAccess::ReadExec,
                    Access::Write => FsAccess::ReadWrite,
                },
            }));
        }
        rules
    });
    let network = on(Rule::Network).then(|| {
        let granted = if op.grant.contains(&Grant::Network) {
            match &caps.network {
                Network::None => NetPolicy::Deny,
                Network::Connect(ports) => NetPolicy::Connect(ports.clone()),
                Network::Any => NetPolicy::Any,
            }
        } else {
            NetPolicy::Deny
        };
        // The collector's port, and only it, for a plugin that exports.
        match (granted, &op.telemetry) {
            (NetPolicy::Deny, Some(t)) => NetPolicy::Connect(vec![t.port]),
            (NetPolicy::Connect(mut ports), Some(t)) => {
                if !ports.contains(&t.port) {
                    ports.push(t.port);
                }
                NetPolicy::Connect(ports)
            }
            (granted, _) => granted,
        }
    });
    SandboxPolicy {
        no_new_privs: on(Rule::NoNewPrivs),
        drop_capabilities: on(Rule::Capabilities),
        memory_bytes: limit(
            Rule::Memory,
            caps.memory_mb,
            cfg.default_memory_mb,
            cfg.max_memory_mb,
        )
        .map(|mb| mb.saturating_mul(1 << 20)),
        open_files: limit(
            Rule::OpenFiles,
            caps.open_files,
            cfg.default_open_files,
            cfg.max_open_files,
        ),
        processes: limit(
            Rule::Processes,
            caps.processes,
            cfg.default_processes,
            cfg.max_processes,
        ),
        disk_bytes: limit(
            Rule::Disk,
            caps.disk_mb,
            cfg.default_disk_mb,
            cfg.max_disk_mb,
        )
        .map(|mb| mb.saturating_mul(1 << 20)),
        disk_files: Some(cfg.disk_files),
        filesystem,
        network,
        run_as: cfg.user.clone(),
    }
}

/// Which declared capabilities were asked for and not granted, in words.
#[must_use]
pub fn ungranted(m: &Manifest, op: &Operator) -> Vec<String> {
    let caps = &m.capabilities;
    let mut out = Vec::new();
    if !caps.filesystem.is_empty() && !op.grant.contains(&Grant::Filesystem) {
        out.push("filesystem".to_owned());
    }
    if caps.network != Network::None && !op.grant.contains(&Grant::Network) {
        out.push("network".to_owned());
    }
    if !caps.env.is_empty() && !op.grant.contains(&Grant::Env) {
        out.push("env".to_owned());
    }
    if !caps.credentials.is_empty() && !op.grant.contains(&Grant::Credentials) {
        out.push("credentials".to_owned());
    }
    out
}

/// The audiences a plugin gets tokens for: those it declared, if the
/// operator granted `credentials`.
#[must_use]
pub fn granted_audiences(m: &Manifest, op: &Operator) -> Vec<String> {
    if op.grant.contains(&Grant::Credentials) {
        m.capabilities.credentials.clone()
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::sample::manifest;

    #[test]
    fn capabilities_apply_only_when_granted_and_limits_are_capped() {
        let m = manifest();
        let cfg = SandboxConfig::default();
        let none = sandbox_policy(&m, &Operator::default(), &cfg);
        assert_eq!(none.network, Some(NetPolicy::Deny));
        assert_eq!(none.filesystem, Some(Vec::new()));
        assert_eq!(none.memory_bytes, Some(cfg.max_memory_mb << 20));
        assert_eq!(pass_env(&m, &Operator::default()), Vec::<String>::new());
        let op = Operator {
            grant: [Grant::Network, Grant::Filesystem, Grant::Env].into(),
            sandbox_off: [Rule::Processes].into(),
            ..Operator::default()
        };
        let granted = sandbox_policy(&m, &op, &cfg);
        assert_eq!(granted.network, Some(NetPolicy::Connect(vec![443])));
        assert_eq!(
            granted.filesystem.map(|f| f.len()),
            Some(1),
            "the declared path"
        );
        assert_eq!(granted.processes, None);
        assert_eq!(pass_env(&m, &op), ["HTTPS_PROXY"]);
        assert_eq!(ungranted(&m, &Operator::default()).len(), 3);
    }
}
