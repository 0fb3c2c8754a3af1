//! What each session last listed, so that a tool whose contract changed
//! since is refused once before it runs under the new contract.
//!
//! The "rug pull" is a tool listed with a harmless description whose
//! upgrade (or a pushed revision) rewrites what it says or accepts. The
//! session is told `tools/list_changed`, but a model already holding the
//! old listing may call the tool before its client lists again. So the
//! first call of such a tool in that session is answered
//! `contract_changed` and does not run; the model is told to list the
//! tools again. A second call runs: the session has been told, and a
//! client that cannot list again is not locked out.
//!
//! A session here is a binding (a token's `{surface, task_id,
//! session_id}`), as for "approve for this session": it is the same in
//! both protocol eras, where a 2026-07-28 client has no MCP session at
//! all. It listed at the catalog's change sequence of its first page
//! (later pages of the same pass keep that mark, so nothing a first page
//! showed is taken as seen anew); the catalog marks each tool with the
//! change at which its contract last changed under its name
//! ([`toolhost_catalog::Catalog::contract_changed_at`]).
//!
//! What this module must not do: hold unbounded state (bindings and
//! refusals are capped), or cost a call anything while no tool has ever
//! changed its contract (the catalog's mark is checked first).

use crate::binding::Binding;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Most sessions whose listing is remembered. Beyond it the session that
/// listed longest ago is forgotten (its next changed call runs unrefused,
/// as a session that never listed would).
const MAX_SESSIONS: usize = 65_536;

/// Most tools refused once per session before its refusals are forgotten.
const MAX_REFUSED: usize = 1024;

#[derive(Debug, Default)]
struct Listed {
    /// The change sequence of the catalog it last listed from the start.
    at: u64,
    /// tool -> the contract change it was refused for.
    refused: HashMap<String, u64>,
}

/// What each session listed last.
#[derive(Debug, Default)]
pub struct Pins {
    sessions: Mutex<HashMap<u64, Listed>>,
}

impl Pins {
    /// `binding` listed the tools from a catalog at change sequence `seq`:
    /// `from_start` for a listing's first page, which starts a new pass.
    pub fn listed(&self, binding: &Binding, seq: u64, from_start: bool) {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let id = binding.identity();
        if let Some(l) = sessions.get_mut(&id) {
            if from_start {
                l.at = seq;
                l.refused.clear();
            }
            return;
        }
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions.iter().min_by_key(|(_, l)| l.at).map(|(k, _)| *k)
        {
            sessions.remove(&oldest);
        }
        sessions.insert(
            id,
            Listed {
                at: seq,
                refused: HashMap::new(),
            },
        );
    }

    /// Whether the call of `tool`, whose contract changed at `changed_at`,
    /// is refused: the session listed before that change and has not been
    /// refused for it yet. A refusal is remembered, so it happens once.
    pub(crate) fn refuse_once(&self, binding: &Binding, tool: &str, changed_at: u64) -> bool {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(l) = sessions.get_mut(&binding.identity()) else {
            return false;
        };
        if l.at >= changed_at || l.refused.get(tool).is_some_and(|at| *at >= changed_at) {
            return false;
        }
        if l.refused.len() >= MAX_REFUSED {
            l.refused.clear();
        }
        l.refused.insert(tool.to_owned(), changed_at);
        true
    }

    /// How many sessions are remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_that_listed_before_a_change_is_refused_once() {
        let pins = Pins::default();
        let b = Binding::new("chat", "t", "s", None);
        pins.listed(&b, 3, true);
        assert!(!pins.refuse_once(&b, "x", 3), "listed at the change");
        assert!(pins.refuse_once(&b, "x", 5));
        assert!(!pins.refuse_once(&b, "x", 5), "once");
        assert!(pins.refuse_once(&b, "y", 5), "per tool");
        assert!(pins.refuse_once(&b, "x", 7), "a later change refuses again");
    }

    #[test]
    fn listing_again_sees_the_change_and_later_pages_do_not() {
        let pins = Pins::default();
        let b = Binding::new("chat", "t", "s", None);
        pins.listed(&b, 3, true);
        pins.listed(&b, 5, false);
        assert!(pins.refuse_once(&b, "x", 5), "a later page is the old pass");
        pins.listed(&b, 5, true);
        assert!(!pins.refuse_once(&b, "x", 5));
    }

    #[test]
    fn a_session_that_never_listed_and_other_bindings_are_not_refused() {
        let pins = Pins::default();
        let (a, b) = (
            Binding::new("chat", "t", "s", None),
            Binding::new("chat", "t", "s", None),
        );
        pins.listed(&a, 1, true);
        assert!(!pins.refuse_once(&b, "x", 5));
        assert!(
            pins.refuse_once(&a.clone(), "x", 5),
            "clones are one binding"
        );
    }

    #[test]
    fn the_state_is_bounded() {
        let pins = Pins::default();
        let bindings: Vec<Binding> = (0..MAX_SESSIONS + 10)
            .map(|_| Binding::new("chat", "t", "s", None))
            .collect();
        for (i, b) in bindings.iter().enumerate() {
            pins.listed(b, i as u64, true);
        }
        assert_eq!(pins.len(), MAX_SESSIONS);
        let last = bindings.last().map(|b| pins.refuse_once(b, "x", u64::MAX));
        assert_eq!(last, Some(true), "the newest is kept");
    }
}
