//! Per-call counters and the duration histogram, for `/metrics`.
//!
//! Keyed by tool, then by the outcome's static word, so a call to a tool
//! already counted finds its slot with a borrowed `&str` and allocates
//! nothing. An unknown name is the agent's text: it is counted under `""`,
//! never as a label of its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Upper bounds (seconds) of the call duration histogram's buckets.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// Calls by (exposed tool, outcome), and a duration histogram.
#[derive(Debug, Clone, Default)]
pub struct CallStats {
    /// (tool, outcome) -> calls. The tool is `""` for unknown names.
    pub calls: BTreeMap<(String, &'static str), u64>,
    /// Cumulative counts per bucket of [`DURATION_BUCKETS`].
    pub buckets: [u64; 12],
    /// All calls.
    pub count: u64,
    /// Total seconds.
    pub sum_seconds: f64,
}

#[derive(Debug, Default)]
struct Inner {
    by_tool: HashMap<String, BTreeMap<&'static str, u64>>,
    buckets: [u64; 12],
    count: u64,
    sum_seconds: f64,
}

/// The counters, shared by every call.
#[derive(Debug, Default)]
pub(crate) struct Counters(Mutex<Inner>);

impl Counters {
    /// Counts one call of `tool` that ended as `outcome` after `took`.
    pub(crate) fn count(&self, tool: &str, outcome: &'static str, took: Duration) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let outcomes = match s.by_tool.get_mut(tool) {
            Some(o) => o,
            None => s.by_tool.entry(tool.to_owned()).or_default(),
        };
        *outcomes.entry(outcome).or_default() += 1;
        let secs = took.as_secs_f64();
        for (i, le) in DURATION_BUCKETS.iter().enumerate() {
            if secs <= *le {
                s.buckets[i] += 1;
            }
        }
        s.count += 1;
        s.sum_seconds += secs;
    }

    /// A copy of the counts so far.
    pub(crate) fn snapshot(&self) -> CallStats {
        let c = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        CallStats {
            calls: c
                .by_tool
                .iter()
                .flat_map(|(tool, outcomes)| outcomes.iter().map(|(o, n)| ((tool.clone(), *o), *n)))
                .collect(),
            buckets: c.buckets,
            count: c.count,
            sum_seconds: c.sum_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_counted_under_its_tool_and_outcome_and_in_every_bucket_above_it() {
        let c = Counters::default();
        c.count("kandev_x_y", "ok", Duration::from_millis(3));
        c.count("kandev_x_y", "ok", Duration::from_millis(3));
        c.count("", "unknown_tool", Duration::from_millis(40));
        let s = c.snapshot();
        assert_eq!(s.calls.get(&("kandev_x_y".to_owned(), "ok")), Some(&2));
        assert_eq!(s.calls.get(&(String::new(), "unknown_tool")), Some(&1));
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[1], 0, "3 ms is over 2.5 ms");
        assert_eq!(s.buckets[2], 2, "3 ms is under 5 ms");
        assert_eq!(s.buckets[11], 3);
    }
}
