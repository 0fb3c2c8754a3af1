//! Grace periods: knowing when no call still acts on a catalog version
//! that has been replaced.
//!
//! A call reads the current catalog as it starts and, a little later,
//! takes hold of the plugin process that version names. Between the two,
//! nothing on the process shows the call: if an upgrade publishes a new
//! catalog and stops the old process in that gap, the call is sent to a
//! process that is going away. The gap is microseconds, unless the OS
//! takes the call's thread away for a while, as it does on a busy machine.
//!
//! This is the read-copy-update problem, solved the way RCU solves it: each
//! call counts itself as a [`Reading`] of the current epoch *before* it
//! reads the catalog, and ends the reading once it holds its process (or
//! has ended). Whoever replaces a version and then wants to retire what the
//! old version used calls [`Grace::advance`] *after* publishing, and waits
//! while [`Grace::readers_since`] that epoch are left. A reading that began
//! after the advance read the new catalog, because the advance followed the
//! publish; one that began before is counted until it holds what it read.
//!
//! The counts live behind one short mutex: two uncontended lock operations
//! a call, against a call path of tens of microseconds, and exact, which a
//! pair of alternating counters is not when two replacements overlap. They
//! are a short queue of (epoch, open) in epoch order, which keeps its
//! memory: a call allocates nothing here (BENCHMARKS.md has the cost).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Epochs of catalog reading, and how many readings of each are open.
#[derive(Debug, Default)]
pub struct Grace {
    inner: Mutex<Epochs>,
}

#[derive(Debug, Default)]
struct Epochs {
    current: u64,
    /// Open readings by the epoch they began in, oldest first. Only the
    /// newest entry may be at zero (kept so that the next reading does
    /// not push again).
    open: VecDeque<(u64, usize)>,
}

/// The epoch before an advance: readings that began in it or earlier may
/// still act on the version the advance followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

impl Grace {
    fn epochs(&self) -> std::sync::MutexGuard<'_, Epochs> {
        // The counts stay consistent whatever panicked: each change is one
        // map operation.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Begins a reading in the current epoch. Take it before reading the
    /// catalog.
    #[must_use]
    pub fn begin(self: &Arc<Self>) -> Reading {
        let mut e = self.epochs();
        let epoch = e.current;
        match e.open.back_mut() {
            Some((newest, n)) if *newest == epoch => *n += 1,
            _ => e.open.push_back((epoch, 1)),
        }
        drop(e);
        Reading {
            grace: Arc::clone(self),
            epoch,
            ended: AtomicBool::new(false),
        }
    }

    /// Starts a new epoch. Call it after publishing the catalog that
    /// replaces a version; the epoch returned is the one readings of the
    /// old catalog began in.
    #[must_use]
    pub fn advance(&self) -> Epoch {
        let mut e = self.epochs();
        let before = e.current;
        e.current += 1;
        Epoch(before)
    }

    /// Readings still open that began in `epoch` or before it.
    #[must_use]
    pub fn readers_since(&self, epoch: Epoch) -> usize {
        self.epochs()
            .open
            .iter()
            .take_while(|(e, _)| *e <= epoch.0)
            .map(|(_, n)| n)
            .sum()
    }

    fn end(&self, epoch: u64) {
        let mut e = self.epochs();
        // Nearly always the newest entry: search from the back.
        if let Some((_, n)) = e.open.iter_mut().rev().find(|(at, _)| *at == epoch) {
            *n = n.saturating_sub(1);
        }
        // Finished epochs leave the queue; the newest entry stays.
        while e.open.len() > 1 && e.open.front().is_some_and(|(_, n)| *n == 0) {
            e.open.pop_front();
        }
    }
}

/// One open reading of the catalog ([`Grace::begin`]): ended by
/// [`Reading::end`] or when dropped.
#[derive(Debug)]
pub struct Reading {
    grace: Arc<Grace>,
    epoch: u64,
    ended: AtomicBool,
}

impl Reading {
    /// Ends the reading: whoever read the catalog holds what it needed of
    /// it now (or needs nothing more). Only the first end counts.
    pub fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.grace.end(self.epoch);
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_begun_before_an_advance_is_waited_for_and_one_after_is_not() {
        let grace = Arc::new(Grace::default());
        let before = grace.begin();
        let epoch = grace.advance();
        let after = grace.begin();
        assert_eq!(grace.readers_since(epoch), 1);
        before.end();
        assert_eq!(grace.readers_since(epoch), 0);
        drop(after);
    }

    #[test]
    fn overlapping_advances_each_wait_only_for_their_own_past() {
        let grace = Arc::new(Grace::default());
        let first = grace.begin();
        let a = grace.advance();
        let second = grace.begin();
        let b = grace.advance();
        let third = grace.begin();
        assert_eq!(grace.readers_since(a), 1);
        assert_eq!(grace.readers_since(b), 2);
        drop(first);
        assert_eq!(grace.readers_since(a), 0);
        assert_eq!(grace.readers_since(b), 1);
        drop(second);
        assert_eq!(grace.readers_since(b), 0);
        // Readings of the newest epoch never hold up an advance before it.
        drop(third);
    }

    #[test]
    fn a_reading_ends_once_however_often_it_is_ended() {
        let grace = Arc::new(Grace::default());
        let kept = grace.begin();
        let r = grace.begin();
        r.end();
        r.end();
        drop(r);
        let epoch = grace.advance();
        assert_eq!(grace.readers_since(epoch), 1);
        drop(kept);
        assert_eq!(grace.readers_since(epoch), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Begin,
        End(usize),
        Advance,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            3 => Just(Op::Begin),
            3 => any::<usize>().prop_map(Op::End),
            1 => Just(Op::Advance),
        ]
    }

    proptest::proptest! {
        /// Against a plain model (every open reading with the epoch it
        /// began in), after any sequence of readings begun and ended and
        /// epochs advanced, every advance sees exactly the readings begun
        /// at or before it that are still open.
        #[test]
        fn the_counts_match_a_model_whatever_the_order(ops in proptest::collection::vec(op(), 0..200)) {
            let grace = Arc::new(Grace::default());
            let mut open: Vec<(u64, Reading)> = Vec::new();
            let mut advances: Vec<Epoch> = Vec::new();
            let mut current = 0u64;
            for op in ops {
                match op {
                    Op::Begin => open.push((current, grace.begin())),
                    Op::End(i) if !open.is_empty() => {
                        let (_, r) = open.swap_remove(i % open.len());
                        r.end();
                    }
                    Op::End(_) => {}
                    Op::Advance => {
                        advances.push(grace.advance());
                        current += 1;
                    }
                }
                for a in &advances {
                    let expected = open.iter().filter(|(e, _)| *e <= a.0).count();
                    proptest::prop_assert_eq!(grace.readers_since(*a), expected);
                }
            }
        }
    }

    #[test]
    fn readings_from_many_threads_all_end() {
        let grace = Arc::new(Grace::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let g = Arc::clone(&grace);
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        let r = g.begin();
                        if i % 7 == 0 {
                            let _ = g.advance();
                        }
                        drop(r);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let epoch = grace.advance();
        assert_eq!(grace.readers_since(epoch), 0);
    }
}
