//! What each session was shown of each tool, so that a tool whose contract
//! is not the one the session was shown is refused once before it runs.
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
//! What is compared is what the session *was shown*, not what the catalog
//! last changed: each listing (a `tools/list` page, or the tools the
//! built-in find tool answered) is kept as a [`Shown`], each tool's exposed
//! name with its contract digest, shared by every session that was shown
//! the same listing. A call looks its tool up in the session's listings,
//! newest first, and compares the contract it was last shown with the one
//! it has now. So whatever happened in between is caught: a tool removed
//! and re-added with new words, a name that now belongs to another plugin,
//! two pushes in a row. A name the session was never shown is not refused
//! (it learned it elsewhere, and nothing it holds is stale).
//!
//! A session here is a binding (a token's `{surface, task_id,
//! session_id}`), as for "approve for this session": it is the same in
//! both protocol eras, where a 2026-07-28 client has no MCP session at
//! all.
//!
//! What this module must not do: hold unbounded state (bindings, the
//! listings each keeps, and refusals are capped), or cost a call more than
//! a lookup while nobody has listed anything.

use crate::binding::Binding;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use toolhost_catalog::Entry;

/// Most sessions whose listings are remembered. Beyond it the session that
/// listed longest ago is forgotten (its next call runs unrefused, as a
/// session that never listed would).
const MAX_SESSIONS: usize = 65_536;

/// Most distinct listings kept per session. A name shown only in a listing
/// older than these is forgotten.
const MAX_LISTINGS: usize = 4;

/// Most tools refused once per session before its refusals are forgotten.
const MAX_REFUSED: usize = 1024;

/// A tool's name as a key: a keyed hash (the key is the process's own, so
/// a plugin cannot choose names that collide).
fn key(name: &str) -> u64 {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new).hash_one(name)
}

/// What one listing showed: each tool by name with its contract digest,
/// sorted by key. 24 bytes a tool; shared by every session shown it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Shown {
    tools: Vec<(u64, [u8; 16])>,
}

impl Shown {
    /// The listing of these entries.
    pub fn of<'a>(entries: impl IntoIterator<Item = &'a Arc<Entry>>) -> Self {
        let mut tools: Vec<(u64, [u8; 16])> = entries
            .into_iter()
            .map(|e| (key(&e.descriptor.exposed_name), e.contract_digest()))
            .collect();
        tools.sort_unstable_by_key(|(k, _)| *k);
        Self { tools }
    }

    fn get(&self, key: u64) -> Option<[u8; 16]> {
        self.tools
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .and_then(|i| self.tools.get(i))
            .map(|(_, c)| *c)
    }

    /// How many tools it showed.
    #[must_use]
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether it showed none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[derive(Debug, Default)]
struct Listed {
    /// The listings it was shown, oldest first, at most [`MAX_LISTINGS`].
    listings: VecDeque<Arc<Shown>>,
    /// tool -> the contract it was refused for (once is enough).
    refused: HashMap<u64, [u8; 16]>,
    /// When it last listed, in [`Pins::clock`] ticks (for eviction).
    last: u64,
}

/// What each session was shown.
#[derive(Debug, Default)]
pub struct Pins {
    sessions: Mutex<Sessions>,
    /// Sessions remembered, read without the lock: zero means no call
    /// needs to look.
    remembered: AtomicUsize,
}

#[derive(Debug, Default)]
struct Sessions {
    by_binding: HashMap<u64, Listed>,
    clock: u64,
}

impl Pins {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `binding` was shown `shown` (a page of `tools/list`, or what the
    /// find tool answered).
    pub fn listed(&self, binding: &Binding, shown: Arc<Shown>) {
        let mut s = self.lock();
        s.clock += 1;
        let now = s.clock;
        let id = binding.identity();
        if !s.by_binding.contains_key(&id)
            && s.by_binding.len() >= MAX_SESSIONS
            && let Some(oldest) = s
                .by_binding
                .iter()
                .min_by_key(|(_, l)| l.last)
                .map(|(k, _)| *k)
        {
            s.by_binding.remove(&oldest);
        }
        let l = s.by_binding.entry(id).or_default();
        l.last = now;
        if l.listings.back().is_some_and(|b| Arc::ptr_eq(b, &shown)) {
            return;
        }
        l.listings.retain(|b| !Arc::ptr_eq(b, &shown));
        if l.listings.len() >= MAX_LISTINGS {
            l.listings.pop_front();
        }
        l.listings.push_back(shown);
        let n = s.by_binding.len();
        self.remembered.store(n, Ordering::Relaxed);
    }

    /// Whether the call of `tool`, whose contract is `now`, is refused: the
    /// session was last shown another contract under that name, and has
    /// not been refused for this one yet. A refusal is remembered, so it
    /// happens once.
    pub fn refuse_once(&self, binding: &Binding, tool: &str, now: [u8; 16]) -> bool {
        if self.is_empty_fast() {
            return false;
        }
        let k = key(tool);
        let mut s = self.lock();
        let Some(l) = s.by_binding.get_mut(&binding.identity()) else {
            return false;
        };
        let Some(shown) = l.listings.iter().rev().find_map(|b| b.get(k)) else {
            return false;
        };
        if shown == now || l.refused.get(&k) == Some(&now) {
            return false;
        }
        if l.refused.len() >= MAX_REFUSED {
            l.refused.clear();
        }
        l.refused.insert(k, now);
        true
    }

    /// Whether no session was ever shown a listing (no lock taken): a call
    /// has nothing to compare then.
    #[must_use]
    pub fn is_empty_fast(&self) -> bool {
        self.remembered.load(Ordering::Relaxed) == 0
    }

    /// How many sessions are remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().by_binding.len()
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

    fn shown(tools: &[(&str, u8)]) -> Arc<Shown> {
        let mut tools: Vec<(u64, [u8; 16])> =
            tools.iter().map(|(n, c)| (key(n), [*c; 16])).collect();
        tools.sort_unstable_by_key(|(k, _)| *k);
        Arc::new(Shown { tools })
    }

    #[test]
    fn a_session_shown_another_contract_is_refused_once() {
        let pins = Pins::default();
        let b = Binding::new("chat", "t", "s", None);
        pins.listed(&b, shown(&[("x", 1), ("y", 1)]));
        assert!(!pins.refuse_once(&b, "x", [1; 16]), "as shown");
        assert!(pins.refuse_once(&b, "x", [2; 16]));
        assert!(!pins.refuse_once(&b, "x", [2; 16]), "once");
        assert!(pins.refuse_once(&b, "y", [2; 16]), "per tool");
        assert!(
            pins.refuse_once(&b, "x", [3; 16]),
            "another change refuses again"
        );
        assert!(
            !pins.refuse_once(&b, "z", [9; 16]),
            "never shown: not refused"
        );
    }

    #[test]
    fn listing_again_shows_the_new_contract() {
        let pins = Pins::default();
        let b = Binding::new("chat", "t", "s", None);
        pins.listed(&b, shown(&[("x", 1)]));
        pins.listed(&b, shown(&[("x", 2)]));
        assert!(!pins.refuse_once(&b, "x", [2; 16]));
        assert!(
            pins.refuse_once(&b, "x", [1; 16]),
            "the newest listing counts"
        );
    }

    /// Removed (a listing without it), then back with other words: the
    /// session was last shown the old words, so the call is refused.
    #[test]
    fn a_tool_removed_and_re_added_is_refused_once() {
        let pins = Pins::default();
        let b = Binding::new("chat", "t", "s", None);
        pins.listed(&b, shown(&[("echo", 1), ("other", 1)]));
        pins.listed(&b, shown(&[("other", 1)]));
        assert!(pins.refuse_once(&b, "echo", [2; 16]));
        assert!(!pins.refuse_once(&b, "echo", [2; 16]));
        // Back as it was: nothing to refuse.
        let c = Binding::new("chat", "t", "s", None);
        pins.listed(&c, shown(&[("echo", 1)]));
        pins.listed(&c, shown(&[]));
        assert!(!pins.refuse_once(&c, "echo", [1; 16]));
    }

    #[test]
    fn a_session_that_never_listed_and_other_bindings_are_not_refused() {
        let pins = Pins::default();
        let (a, b) = (
            Binding::new("chat", "t", "s", None),
            Binding::new("chat", "t", "s", None),
        );
        pins.listed(&a, shown(&[("x", 1)]));
        assert!(!pins.refuse_once(&b, "x", [5; 16]));
        assert!(
            pins.refuse_once(&a.clone(), "x", [5; 16]),
            "clones are one binding"
        );
    }

    #[test]
    fn the_state_is_bounded() {
        let pins = Pins::default();
        let bindings: Vec<Binding> = (0..MAX_SESSIONS + 10)
            .map(|_| Binding::new("chat", "t", "s", None))
            .collect();
        let one = shown(&[("x", 1)]);
        for b in &bindings {
            pins.listed(b, Arc::clone(&one));
        }
        assert_eq!(pins.len(), MAX_SESSIONS);
        let last = bindings.last().map(|b| pins.refuse_once(b, "x", [2; 16]));
        assert_eq!(last, Some(true), "the newest is kept");
        let b = Binding::new("chat", "t", "s", None);
        for i in 0..10u8 {
            pins.listed(&b, shown(&[("x", i)]));
        }
        let s = pins.lock();
        assert_eq!(s.by_binding[&b.identity()].listings.len(), MAX_LISTINGS);
    }
}
