//! Who counts as a plugin process, for the admin socket's peer check: a
//! plugin must not reconfigure the daemon that confines it.
//!
//! The answer is read from `/proc` and from the set of process-group
//! leaders the caller keeps (the runtime's plugin registry owns that set;
//! nothing here is global).

use std::collections::BTreeSet;

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
            "its token (which Landlock keeps plugins from reading) and the peer's pids cgroup, which no plugin process can leave"
        }
        (false, true) => {
            "its token (which Landlock keeps plugins from reading); the peer check goes by ancestry, process group and session, which a plugin that double-forks out of its session passes"
        }
        (true, false) => {
            "the peer's pids cgroup, which no plugin process can leave; its token is readable by plugins on this kernel (no Landlock)"
        }
        (false, false) => {
            "NOT reliably: its token is readable by plugins (no Landlock), and the peer check goes by ancestry, process group and session, which a plugin that double-forks out of its session passes"
        }
    }
}

/// Whether `pid` is one of this daemon's plugins or a process one started:
/// a member of one of its pids cgroups (which no sandboxed process can
/// leave), or, without cgroups, a descendant of a plugin, or in a plugin's
/// process group or session (`leaders` are the plugins' process-group
/// leaders).
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
        if ppid <= 1 || ppid == me {
            return false;
        }
        at = ppid;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_no_plugin_and_a_leader_is() {
        let me = std::process::id();
        assert!(!is_plugin_process(me, &BTreeSet::new()));
        assert!(is_plugin_process(me, &BTreeSet::from([me])));
        let (_, pgrp, _) = parents(me).unwrap_or_default();
        assert!(is_plugin_process(me, &BTreeSet::from([pgrp])));
    }
}
