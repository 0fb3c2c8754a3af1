//! Counted places among a plugin process's calls.
//!
//! A cap on calls in flight must be exact under any concurrency, and a
//! drain must know when a process is idle, so both are counted here with
//! one atomic each: the check and the count are one step, and a place is
//! given back when its [`CallSlot`] is dropped, on every path out of a
//! call (an answer, an error, a cancellation, a panic).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

/// The calls in flight on one plugin process, counted so that a cap on
/// them is exact: the check and the count are one atomic step. Cheap to
/// clone; clones share the count.
#[derive(Clone, Debug, Default)]
pub struct CallSlots(Arc<AtomicUsize>);

impl CallSlots {
    /// Reserves a place if fewer than `max` are taken.
    #[must_use]
    pub fn try_reserve(&self, max: usize) -> Option<CallSlot> {
        let n = &self.0;
        let mut current = n.load(SeqCst);
        loop {
            if current >= max {
                return None;
            }
            match n.compare_exchange_weak(current, current + 1, SeqCst, SeqCst) {
                Ok(_) => return Some(CallSlot(Arc::clone(n))),
                Err(now) => current = now,
            }
        }
    }

    /// Takes a place whatever the count.
    pub(crate) fn take(&self) -> CallSlot {
        self.0.fetch_add(1, SeqCst);
        CallSlot(Arc::clone(&self.0))
    }

    /// Places taken now.
    #[must_use]
    pub fn taken(&self) -> usize {
        self.0.load(SeqCst)
    }
}

/// A reserved place among a plugin's calls in flight
/// ([`CallSlots::try_reserve`]); freed when dropped.
#[derive(Debug)]
pub struct CallSlot(Arc<AtomicUsize>);

impl Drop for CallSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_on_calls_in_flight_is_exact_and_a_finished_call_frees_its_place() {
        let slots = CallSlots::default();
        let a = slots.try_reserve(2).expect("first");
        let b = slots.try_reserve(2).expect("second");
        assert!(slots.try_reserve(2).is_none(), "never past the cap");
        assert_eq!(slots.taken(), 2);
        drop(a);
        assert_eq!(slots.taken(), 1);
        let _c = slots.try_reserve(2).expect("a freed place is taken again");
        drop(b);
        assert!(slots.try_reserve(0).is_none(), "a cap of 0 takes nothing");
    }

    #[test]
    fn racing_reservations_never_overshoot() {
        let slots = CallSlots::default();
        let max = 7;
        let kept: Vec<CallSlot> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let slots = slots.clone();
                    scope.spawn(move || {
                        (0..100)
                            .filter_map(|_| slots.try_reserve(max))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        assert_eq!(kept.len(), max, "exactly the cap, whatever the race");
        assert_eq!(slots.taken(), max);
        drop(kept);
        assert_eq!(slots.taken(), 0);
    }
}
