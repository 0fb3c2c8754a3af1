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
//! plugin's data, and its writes come from a reserve of spare files when
//! the disk is full (`toolhost_base::reserve`). And a disk a plugin fills
//! is noticed as such, whatever its quota: when the file system holding
//! the state runs short of bytes or inodes (under [`short_of`]'s low
//! water), every plugin that can write to it is switched to a read-only
//! data directory too, until there is room again.
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
    /// Plugins whose data directory is read-only because the file system
    /// holding the daemon's state is short of room.
    pub(crate) short: BTreeSet<String>,
    /// What each plugin's data directory held at the last check.
    pub(crate) used: BTreeMap<String, toolhost_sandbox::disk::Usage>,
}

/// A plugin's disk, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskInfo {
    /// Bytes its data directory held at the last check (`None`: not yet
    /// measured).
    pub used: Option<u64>,
    /// Files and folders it held at the last check.
    pub used_files: Option<u64>,
    /// Its quota, bytes.
    pub limit: u64,
    /// Its quota, files and folders.
    pub limit_files: u64,
    /// How the quota holds.
    pub enforcement: Enforcement,
    /// Over quota: its data directory is read-only until it is under.
    pub over: bool,
    /// Held read-only because the disk holding the daemon's state is
    /// short of room.
    pub short: bool,
    /// The running process's data directory is read-only. It follows
    /// `over` and `short` once the process that replaces it is ready: a
    /// plugin let go still writes nothing until then.
    pub read_only: bool,
    /// How often it is read.
    pub every: Duration,
}

/// Room left on a file system: bytes and inodes an unprivileged writer
/// may still take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Room {
    pub(crate) bytes: u64,
    pub(crate) inodes: u64,
}

/// The room on the file system holding `path`.
pub(crate) fn room(path: &std::path::Path) -> Option<Room> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(Room {
        bytes: st.f_bavail.saturating_mul(st.f_frsize),
        inodes: st.f_favail,
    })
}

/// Whether `room` is short (`holding`: the plugins are held already, and
/// the bar to let them go is twice as high, so they do not flap): under
/// a quarter of the reserve's bytes (at least 8 MiB), or twice its spare
/// files in inodes (at least 128).
pub(crate) fn short_of(room: Room, reserve_bytes: u64, reserve_files: u64, holding: bool) -> bool {
    let low_bytes = (reserve_bytes / 4).max(8 << 20);
    let low_inodes = reserve_files.saturating_mul(2).max(128);
    let k = if holding { 2 } else { 1 };
    room.bytes < low_bytes * k || room.inodes < low_inodes * k
}

/// The disk rule's row of a running plugin's sandbox report, as its quota
/// holds: the kernel's, or measured (and why).
pub(super) fn describe_rule(rules: &mut [toolhost_sandbox::RuleStatus], d: &DiskInfo) {
    use toolhost_sandbox::{Rule, RuleState};
    let Some(row) = rules.iter_mut().find(|r| r.rule == Rule::Disk) else {
        return;
    };
    let mib = d.limit >> 20;
    let files = d.limit_files;
    match &d.enforcement {
        Enforcement::Kernel(how) => {
            row.state = RuleState::Enforced;
            row.detail = format!(
                "data directory {mib} MiB and {files} files (its $TMPDIR in it), held by {how}: the kernel refuses a write past it; no file larger"
            );
        }
        Enforcement::Measured(why) => {
            row.state = RuleState::NotEnforced;
            row.detail = format!(
                "not held by the kernel ({why}); measured every {:.1}s (its $TMPDIR in it, each file once, by its blocks on disk): over {mib} MiB or {files} files the plugin is restarted with its data read-only (it may delete) until under {}%; no file larger than {mib} MiB (RLIMIT_FSIZE)",
                d.every.as_secs_f64(),
                (RESUME_AT * 100.0) as u32
            );
        }
    }
}
