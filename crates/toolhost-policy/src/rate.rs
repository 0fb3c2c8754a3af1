//! Rate limits: token buckets per binding and per tool, set by the operator
//! (and, per tool, by a pushed catalog, which can only tighten them).
//!
//! A binding's bucket counts every call its token makes, whatever the tool:
//! one agent in a loop cannot spend the whole daemon. A tool's bucket counts
//! every caller's calls of that tool together: a third party's API quota
//! behind one tool is spent no faster than the operator allows. A call over
//! either limit is `rate_limited`, told when to try again, and never
//! dispatched; it takes nothing from the other bucket.
//!
//! Memory is bounded whatever the number of tokens: a full bucket holds no
//! state worth keeping (a new one starts full), so when the map of binding
//! buckets reaches its cap the full ones are forgotten first, then the
//! fullest. Nothing here is allocated when no limit is set.
//!
//! What this module must not do: count anything about a call's arguments,
//! or hold a lock across an await.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use toolhost_base::Bucket;
use toolhost_pipeline::Binding;

/// Binding buckets kept at most.
const MAX_BINDING_BUCKETS: usize = 65_536;

/// Tool buckets kept at most.
const MAX_TOOL_BUCKETS: usize = 65_536;

/// One limit: `per_minute` calls a minute on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Calls a minute, refilled continuously.
    pub per_minute: f64,
    /// The most calls at once (the bucket's size).
    pub burst: f64,
}

impl Rate {
    fn per_second(self) -> f64 {
        self.per_minute / 60.0
    }

    /// The stricter of two limits, each bound taken on its own: a push
    /// cannot loosen the operator's rate by offering a bigger burst.
    #[must_use]
    pub fn stricter(self, other: Self) -> Self {
        Self {
            per_minute: self.per_minute.min(other.per_minute),
            burst: self.burst.min(other.burst),
        }
    }
}

impl From<toolhost_catalog::CallRate> for Rate {
    fn from(r: toolhost_catalog::CallRate) -> Self {
        Self {
            per_minute: f64::from(r.per_minute),
            burst: f64::from(r.burst),
        }
    }
}

/// The operator's limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RatePolicy {
    /// Each binding (token), across every tool it calls.
    pub binding: Option<Rate>,
    /// Each tool (exposed name), across every caller.
    pub tools: BTreeMap<String, Rate>,
}

impl RatePolicy {
    /// Whether any limit is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.binding.is_none() && self.tools.is_empty()
    }

    /// The limit on `tool`'s calls: the operator's, made stricter by
    /// what the catalog pushed for it.
    #[must_use]
    pub fn for_tool(&self, tool: &str, pushed: Option<Rate>) -> Option<Rate> {
        match (self.tools.get(tool).copied(), pushed) {
            (Some(a), Some(b)) => Some(a.stricter(b)),
            (a, b) => a.or(b),
        }
    }

    /// What the operator sees for `tool` in `status` and `plugins show`.
    #[must_use]
    pub fn describe(&self, tool: &str, pushed: Option<Rate>) -> Option<String> {
        let t = self.for_tool(tool, pushed)?;
        let whose = match (self.tools.contains_key(tool), pushed.is_some()) {
            (true, true) => " (the operator's and the catalog's, the stricter of each)",
            (false, true) => " (the catalog's)",
            _ => "",
        };
        Some(format!(
            "{} calls a minute, bursts of {}{whose}",
            t.per_minute, t.burst
        ))
    }
}

impl Rate {
    fn full(self, now: Instant) -> Bucket {
        Bucket::full_at(self.burst, self.per_second(), now)
    }

    /// How long until `b` has a token under this limit (zero: now).
    fn ready(self, b: &mut Bucket, now: Instant) -> Duration {
        b.ready_at(self.burst, self.per_second(), now)
    }
}

/// Which limit refused a call, and when to try again.
#[derive(Debug, Clone, PartialEq)]
pub struct Limited {
    /// `"binding"` or `"tool"`.
    pub scope: &'static str,
    /// The limit.
    pub rate: Rate,
    /// When a call would pass again.
    pub retry_after: Duration,
}

/// The buckets, shared by every call.
#[derive(Debug, Default)]
pub struct RateLimiter {
    policy: RatePolicy,
    state: Mutex<Buckets>,
}

#[derive(Debug, Default)]
struct Buckets {
    bindings: HashMap<u64, Bucket>,
    tools: HashMap<String, Bucket>,
}

impl RateLimiter {
    /// Buckets for `policy`.
    #[must_use]
    pub fn new(policy: RatePolicy) -> Self {
        Self {
            policy,
            state: Mutex::default(),
        }
    }

    /// The limits.
    #[must_use]
    pub fn policy(&self) -> &RatePolicy {
        &self.policy
    }

    /// Takes one call from the binding's bucket and the tool's, or neither:
    /// which limit refused it, and when to try again. `pushed` is the
    /// catalog's limit on the tool, if it set one.
    pub fn take(&self, binding: &Binding, tool: &str, pushed: Option<Rate>) -> Result<(), Limited> {
        let tool_rate = self.policy.for_tool(tool, pushed);
        if tool_rate.is_none() && self.policy.binding.is_none() {
            // No limit: no lock, no clock.
            return Ok(());
        }
        self.take_at(binding.identity(), tool, tool_rate, Instant::now())
    }

    fn take_at(
        &self,
        binding: u64,
        tool: &str,
        tool_rate: Option<Rate>,
        now: Instant,
    ) -> Result<(), Limited> {
        let binding_rate = self.policy.binding;
        if tool_rate.is_none() && binding_rate.is_none() {
            return Ok(());
        }
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rate) = binding_rate {
            if !s.bindings.contains_key(&binding) && s.bindings.len() >= MAX_BINDING_BUCKETS {
                forget_fullest(&mut s.bindings, rate, MAX_BINDING_BUCKETS, now);
            }
            let b = s.bindings.entry(binding).or_insert_with(|| rate.full(now));
            let wait = rate.ready(b, now);
            if !wait.is_zero() {
                return Err(Limited {
                    scope: "binding",
                    rate,
                    retry_after: wait,
                });
            }
        }
        if let Some(rate) = tool_rate {
            if !s.tools.contains_key(tool) && s.tools.len() >= MAX_TOOL_BUCKETS {
                // Tools come and go with pushed revisions: the bound holds
                // whatever the catalogs pushed over a daemon's life.
                forget_fullest(&mut s.tools, rate, MAX_TOOL_BUCKETS, now);
            }
            let t = match s.tools.get_mut(tool) {
                Some(t) => t,
                None => s
                    .tools
                    .entry(tool.to_owned())
                    .or_insert_with(|| rate.full(now)),
            };
            let wait = rate.ready(t, now);
            if !wait.is_zero() {
                return Err(Limited {
                    scope: "tool",
                    rate,
                    retry_after: wait,
                });
            }
            t.spend();
        }
        if let Some(b) = s.bindings.get_mut(&binding) {
            b.spend();
        }
        Ok(())
    }

    /// Binding buckets held now (for the tests of the bound).
    #[cfg(test)]
    fn bindings_held(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bindings
            .len()
    }
}

/// Makes room in a map at its cap: forgets every bucket that has refilled
/// (a new one would start the same), and if none has, the fullest one.
fn forget_fullest<K: Clone + Eq + std::hash::Hash>(
    buckets: &mut HashMap<K, Bucket>,
    rate: Rate,
    cap: usize,
    now: Instant,
) {
    buckets.retain(|_, b| {
        rate.ready(b, now);
        !b.is_full_at(now)
    });
    if buckets.len() >= cap
        && let Some(k) = buckets
            .iter()
            .max_by(|a, b| a.1.tokens().total_cmp(&b.1.tokens()))
            .map(|(k, _)| k.clone())
    {
        buckets.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn take(l: &RateLimiter, binding: u64, tool: &str, now: Instant) -> Result<(), Limited> {
        l.take_at(binding, tool, l.policy.for_tool(tool, None), now)
    }

    fn limiter(binding: Option<(f64, f64)>, tool: Option<(f64, f64)>) -> RateLimiter {
        let rate = |(per_minute, burst)| Rate { per_minute, burst };
        RateLimiter::new(RatePolicy {
            binding: binding.map(rate),
            tools: tool
                .map(|t| ("kandev_x_t".to_owned(), rate(t)))
                .into_iter()
                .collect(),
        })
    }

    #[test]
    fn a_burst_passes_then_the_call_is_told_when_to_retry() {
        let l = limiter(None, Some((60.0, 3.0)));
        let now = Instant::now();
        for _ in 0..3 {
            assert!(take(&l, 1, "kandev_x_t", now).is_ok());
        }
        let refused = take(&l, 2, "kandev_x_t", now).unwrap_err();
        assert_eq!(
            refused.scope, "tool",
            "every caller shares the tool's bucket"
        );
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        assert!(
            take(&l, 1, "kandev_x_other", now).is_ok(),
            "other tools are free"
        );
        assert!(take(&l, 1, "kandev_x_t", now + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_bindings_bucket_is_its_own_and_a_refusal_takes_from_neither() {
        let l = limiter(Some((60.0, 2.0)), Some((60.0, 3.0)));
        let now = Instant::now();
        assert!(take(&l, 1, "kandev_x_t", now).is_ok());
        assert!(take(&l, 1, "kandev_x_t", now).is_ok());
        assert_eq!(take(&l, 1, "kandev_x_t", now).unwrap_err().scope, "binding");
        // Binding 2 has its own bucket; the tool's has one call left.
        assert!(take(&l, 2, "kandev_x_t", now).is_ok());
        assert_eq!(take(&l, 2, "kandev_x_t", now).unwrap_err().scope, "tool");
    }

    #[test]
    fn no_policy_keeps_no_state() {
        let l = limiter(None, None);
        for b in 0..1000 {
            assert!(take(&l, b, "kandev_x_t", Instant::now()).is_ok());
        }
        assert_eq!(l.bindings_held(), 0);
    }

    #[test]
    fn the_binding_buckets_are_bounded_whatever_the_number_of_tokens() {
        let l = limiter(Some((60.0, 5.0)), None);
        let now = Instant::now();
        for b in 0..(MAX_BINDING_BUCKETS as u64 + 100) {
            assert!(take(&l, b, "t", now).is_ok());
        }
        assert!(l.bindings_held() <= MAX_BINDING_BUCKETS);
    }

    #[test]
    fn a_pushed_rate_only_tightens_the_operators() {
        let l = limiter(None, Some((60.0, 5.0)));
        let rate = |per_minute, burst| Rate { per_minute, burst };
        // A looser push changes nothing; a tighter one wins, bound by bound.
        assert_eq!(
            l.policy.for_tool("kandev_x_t", Some(rate(600.0, 50.0))),
            Some(rate(60.0, 5.0))
        );
        assert_eq!(
            l.policy.for_tool("kandev_x_t", Some(rate(600.0, 1.0))),
            Some(rate(60.0, 1.0))
        );
        // A push alone limits a tool the operator did not name.
        assert_eq!(
            l.policy.for_tool("kandev_x_other", Some(rate(6.0, 2.0))),
            Some(rate(6.0, 2.0))
        );
        let now = Instant::now();
        let pushed = l.policy.for_tool("kandev_x_other", Some(rate(6.0, 2.0)));
        assert!(l.take_at(1, "kandev_x_other", pushed, now).is_ok());
        assert!(l.take_at(1, "kandev_x_other", pushed, now).is_ok());
        assert_eq!(
            l.take_at(1, "kandev_x_other", pushed, now)
                .unwrap_err()
                .scope,
            "tool"
        );
    }

    #[test]
    fn the_tool_buckets_are_bounded_whatever_the_catalogs_pushed() {
        let l = limiter(None, None);
        let pushed = Some(Rate {
            per_minute: 60.0,
            burst: 5.0,
        });
        let now = Instant::now();
        for t in 0..(MAX_TOOL_BUCKETS + 100) {
            assert!(l.take_at(1, &format!("t{t}"), pushed, now).is_ok());
        }
        let held = l
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tools
            .len();
        assert!(held <= MAX_TOOL_BUCKETS);
    }

    proptest! {
        /// Over any window, a bucket lets through at most its burst plus
        /// what the rate refills in that window.
        #[test]
        fn no_more_pass_than_the_burst_and_the_refill(
            per_minute in 1.0f64..600.0,
            burst in 1.0f64..20.0,
            gaps_ms in proptest::collection::vec(0u64..500, 1..200),
        ) {
            let l = limiter(None, Some((per_minute, burst)));
            let start = Instant::now();
            let mut now = start;
            let mut passed = 0u32;
            for gap in gaps_ms {
                now += Duration::from_millis(gap);
                if take(&l, 1, "kandev_x_t", now).is_ok() {
                    passed += 1;
                }
            }
            let window = now.duration_since(start).as_secs_f64();
            let allowed = burst + window * per_minute / 60.0;
            prop_assert!(f64::from(passed) <= allowed + 1e-9, "{passed} > {allowed}");
        }
    }
}
