//! The process-group leaders of a daemon's plugins: every plugin process
//! it spawned, from spawn until reaped. The registry owns the set; the
//! spawner enters each process into it ([`Leaders::enter`]), and the admin
//! socket asks it whether a peer is a plugin's process.
//!
//! A mutex, written at each spawn and reap and read by the rare admin
//! connection; nothing on the call path touches it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

/// The process-group leaders of a daemon's plugins: every plugin process
/// it spawned, from spawn until reaped. Cheap to clone; clones share the
/// set.
#[derive(Debug, Clone, Default)]
pub struct Leaders(Arc<Mutex<BTreeSet<u32>>>);

impl Leaders {
    /// Records `pid` until the returned guard is dropped.
    pub(crate) fn enter(&self, pid: u32) -> Leader {
        EVERY
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pid);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pid);
        Leader {
            leaders: self.clone(),
            pid,
        }
    }

    /// Whether `pid` is one of these plugins' processes or one they
    /// started ([`toolhost_sandbox::is_plugin_process`]).
    #[must_use]
    pub fn is_plugin_process(&self, pid: u32) -> bool {
        let set = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        toolhost_sandbox::is_plugin_process(pid, &set)
    }
}

/// The leaders of every registry in this process, for the sweep of
/// strays: a process may hold several (a daemon and a preview, a test's
/// many), and a leader of any of them is no stray.
static EVERY: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Held (shared) from a plugin's spawn to its entry among the leaders, and
/// (alone) by the sweep of strays: a plugin just started is outside the
/// daemon's session and not yet a leader, which is what a stray looks like.
pub(crate) static SPAWNING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Kills and reaps the daemon's strays: what a plugin leader that died
/// left behind, re-parented to the daemon (`toolhost_sandbox::tree`).
/// Among `among` only when given (what was left in a plugin's cgroup),
/// else among every process.
pub(crate) fn sweep_strays(among: Option<&[u32]>) {
    let killed = {
        // No spawn between its fork and its entry among the leaders, when
        // it would look like a stray. Held to find and kill, not to reap:
        // a killed child keeps its pid until reaped, so none is mistaken.
        let _no_spawn = SPAWNING.write().unwrap_or_else(PoisonError::into_inner);
        let leaders = EVERY.lock().unwrap_or_else(PoisonError::into_inner).clone();
        match among {
            Some(pids) => toolhost_sandbox::tree::sweep_strays_among(pids, &leaders),
            None => toolhost_sandbox::tree::sweep_strays(&leaders),
        }
    };
    toolhost_sandbox::tree::reap(&killed);
    if !killed.is_empty() {
        tracing::warn!(
            processes = killed.len(),
            "killed processes a plugin left behind when it exited (detached from it, still running)"
        );
    }
}

/// One plugin process's place among the [`Leaders`], held while it runs.
#[derive(Debug)]
pub(crate) struct Leader {
    leaders: Leaders,
    pid: u32,
}

impl Drop for Leader {
    fn drop(&mut self) {
        EVERY
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.pid);
        self.leaders
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_counts_while_its_place_is_held() {
        let leaders = Leaders::default();
        let me = std::process::id();
        assert!(!leaders.is_plugin_process(me));
        let place = leaders.enter(me);
        assert!(leaders.is_plugin_process(me));
        // A clone shares the set: the registry and the spawner see one.
        assert!(leaders.clone().is_plugin_process(me));
        drop(place);
        assert!(!leaders.is_plugin_process(me));
    }
}
