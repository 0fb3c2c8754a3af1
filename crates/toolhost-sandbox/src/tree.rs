//! Every process a plugin started, found and stopped, without cgroups.
//!
//! A plugin's process group is not all of it: a helper that calls
//! `setsid` (a detached grandchild, a double fork) leaves the group and the
//! session, and a kill of the group misses it; it goes on writing after its
//! plugin was stopped or made read-only. Where the daemon has cgroups it
//! kills the plugin's cgroup (`cgroup.rs`); everywhere, the process tree
//! holds it:
//!
//! - each plugin starts in a **session of its own** (`setsid`, in the
//!   child before `exec`) and is made a **child subreaper**, an attribute
//!   kept across `exec`: a process it started that loses its parent is
//!   re-parented to the plugin, never to `init`, so it stays in the
//!   plugin's tree. The sandbox's seccomp filter (when it has one) refuses
//!   the `prctl` that would turn this off;
//! - the daemon is a child subreaper too: what a plugin leader leaves when
//!   it dies comes to the daemon, not to `init`, and is a **stray**: a
//!   child of the daemon outside the daemon's own session (its helpers,
//!   `mkfs`, `mount`, a build, run in its session; a plugin's processes
//!   never can, having left it at `setsid`);
//! - a stop ([`kill_tree`]) freezes the whole tree first (`SIGSTOP`, so
//!   nothing forks meanwhile), then kills it, until none is left; and the
//!   daemon kills strays ([`sweep_strays`]) and reaps them ([`reap`]).
//!
//! What this module must not do: signal a process it has not found below
//! a plugin leader or among the daemon's strays, or reap a child the
//! daemon's runtime waits for.

use rustix::process::{Pid, Signal, WaitOptions};
use std::collections::{BTreeMap, BTreeSet};

/// `(ppid, session)` of `pid`, from `/proc/<pid>/stat`.
fn parent_and_session(pid: u32) -> Option<(u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: the
    // fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(1);
    let ppid = f.next()?.parse().ok()?;
    let _pgrp: u32 = f.next()?.parse().ok()?;
    let session = f.next()?.parse().ok()?;
    Some((ppid, session))
}

/// Every process now: pid -> (ppid, session).
fn processes() -> BTreeMap<u32, (u32, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_and_session(pid)?)))
        .collect()
}

/// The processes below `root` (not `root` itself), from one look at
/// `/proc`.
#[must_use]
pub fn descendants(root: u32) -> Vec<u32> {
    let all = processes();
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (pid, (ppid, _)) in &all {
        children.entry(*ppid).or_default().push(*pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = BTreeSet::new();
    while let Some(p) = stack.pop() {
        for c in children.get(&p).into_iter().flatten() {
            if seen.insert(*c) {
                out.push(*c);
                stack.push(*c);
            }
        }
    }
    out
}

fn signal(pid: u32, sig: Signal) {
    if let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        // ESRCH (gone already) is the outcome wanted anyway.
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Stops and kills everything below `root` (a plugin leader, alive):
/// each pass freezes what it finds and then kills it, until a look finds
/// nothing; at most `passes` looks. Returns how many processes it killed.
pub fn kill_tree(root: u32, passes: usize) -> usize {
    let mut killed = BTreeSet::new();
    for _ in 0..passes.max(1) {
        let below = descendants(root);
        if below.is_empty() {
            break;
        }
        for p in &below {
            signal(*p, Signal::STOP);
        }
        for p in &below {
            signal(*p, Signal::KILL);
            killed.insert(*p);
        }
    }
    killed.len()
}

/// Makes this process a child subreaper: what its children leave when
/// they die is re-parented here, not to `init`.
///
/// # Errors
/// The kernel refused (it cannot: this is for any process).
pub fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(std::io::Error::from)
}

/// The daemon's strays: its children outside its own session that are not
/// one of `leaders` (plugin processes whose leader died and left them).
#[must_use]
pub fn strays(leaders: &BTreeSet<u32>) -> Vec<u32> {
    strays_among(processes().into_iter(), leaders)
}

fn strays_among(
    candidates: impl Iterator<Item = (u32, (u32, u32))>,
    leaders: &BTreeSet<u32>,
) -> Vec<u32> {
    let me = std::process::id();
    let Some((_, my_session)) = parent_and_session(me) else {
        return Vec::new();
    };
    candidates
        .filter(|(pid, (ppid, session))| {
            *ppid == me && *session != my_session && !leaders.contains(pid)
        })
        .map(|(pid, _)| pid)
        .collect()
}

/// Kills every stray and what is below it; returns them, to be reaped
/// with [`reap`] (apart, so that a caller holding a lock for the finding
/// need not hold it while a dying process takes its time).
#[must_use]
pub fn sweep_strays(leaders: &BTreeSet<u32>) -> Vec<u32> {
    kill_all(strays(leaders))
}

/// [`sweep_strays`] among `pids` only (what was left in a plugin's cgroup:
/// no walk of every process).
#[must_use]
pub fn sweep_strays_among(pids: &[u32], leaders: &BTreeSet<u32>) -> Vec<u32> {
    let candidates = pids
        .iter()
        .filter_map(|p| Some((*p, parent_and_session(*p)?)));
    kill_all(strays_among(candidates, leaders))
}

fn kill_all(found: Vec<u32>) -> Vec<u32> {
    for p in &found {
        kill_tree(*p, 8);
        signal(*p, Signal::KILL);
    }
    found
}

/// Waits for each of `pids` (strays this process killed: its children,
/// whose status nothing else takes).
pub fn reap(pids: &[u32]) {
    for p in pids {
        if let Some(pid) = i32::try_from(*p).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::*;

    /// A shell that starts a detached grandchild (its own session) and
    /// waits: the grandchild is found below it and killed with it.
    #[test]
    fn a_detached_grandchild_is_below_its_plugin_and_dies_with_it() {
        let mut leader = std::process::Command::new("sh")
            .args([
                "-c",
                "setsid sleep 300 & setsid sh -c 'sleep 300 & wait' & wait",
            ])
            .spawn()
            .unwrap();
        let root = leader.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while descendants(root).len() < 3 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        let below = descendants(root);
        assert!(below.len() >= 3, "{below:?}");
        assert!(kill_tree(root, 8) >= 3);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while below.iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| !s.contains(") Z "))
        }) && std::time::Instant::now() < deadline
        {
            std::thread::yield_now();
        }
        for p in &below {
            let alive = std::fs::read_to_string(format!("/proc/{p}/stat"))
                .is_ok_and(|s| !s.contains(") Z "));
            assert!(!alive, "{p} still runs");
        }
        let _ = leader.kill();
        let _ = leader.wait();
    }
}
