//! Each plugin's disk use against its quota, every `[sandbox]
//! disk_check_ms` ([`DISK_CHECK`] by default).
//!
//! Where the kernel holds the quota (a project quota,
//! `toolhost_sandbox::disk`), this only reads the use for `plugins show`.
//! Where it cannot, this is the quota: a plugin found over it is replaced,
//! the way a configuration change replaces it (the new process ready
//! first, calls on the old one finishing), by one whose data directory is
//! read-only: it may read, delete and truncate, so it can get itself back
//! under, but every write fails. Once it is under [`RESUME_AT`] of its
//! quota it is replaced by a writable one again. Between two checks a
//! plugin may overshoot by what it writes in that time, each file still
//! held to the quota by `RLIMIT_FSIZE`; the status says so.
//!
//! The daemon's own state is never at stake: it lives outside every
//! plugin's data, and keeps a reserve of space (`toolhost_base::files`).
//!
//! This module holds what is known of each plugin's disk; `quota` does
//! the checking and the switching.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use toolhost_sandbox::disk::Enforcement;

/// How often use is read, by default.
pub const DISK_CHECK: Duration = Duration::from_secs(10);

/// Over its quota, a plugin writes again once under this share of it.
pub const RESUME_AT: f64 = 0.9;

/// What the watcher last found.
#[derive(Debug, Default)]
pub(crate) struct DiskBook {
    /// Plugins whose data directory is read-only for being over quota.
    pub(crate) over: BTreeSet<String>,
    /// Bytes each plugin's data directory held at the last check.
    pub(crate) used: BTreeMap<String, u64>,
}

/// A plugin's disk, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskInfo {
    /// Bytes its data directory held at the last check (`None`: not yet
    /// measured).
    pub used: Option<u64>,
    /// Its quota, bytes.
    pub limit: u64,
    /// How the quota holds.
    pub enforcement: Enforcement,
    /// Over quota: its data directory is read-only until it is under.
    pub over: bool,
    /// How often it is read.
    pub every: Duration,
}

/// The disk rule's row of a running plugin's sandbox report, as its quota
/// holds: the kernel's, or measured (and why).
pub(super) fn describe_rule(rules: &mut [toolhost_sandbox::RuleStatus], d: &DiskInfo) {
    use toolhost_sandbox::{Rule, RuleState};
    let Some(row) = rules.iter_mut().find(|r| r.rule == Rule::Disk) else {
        return;
    };
    let mib = d.limit >> 20;
    match &d.enforcement {
        Enforcement::Kernel(how) => {
            row.state = RuleState::Enforced;
            row.detail = format!(
                "data directory {mib} MiB, held by {how}: the kernel refuses a write past it; no file larger"
            );
        }
        Enforcement::Measured(why) => {
            row.state = RuleState::NotEnforced;
            row.detail = format!(
                "not held by the kernel ({why}); measured every {:.1}s: over {mib} MiB the plugin is restarted with its data read-only (it may delete) until under {}%; no file larger than {mib} MiB (RLIMIT_FSIZE)",
                d.every.as_secs_f64(),
                (RESUME_AT * 100.0) as u32
            );
        }
    }
}
