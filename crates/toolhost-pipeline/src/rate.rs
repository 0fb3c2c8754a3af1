//! Rate limits: token buckets per binding and per tool, set by the operator.
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

use crate::binding::Binding;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Binding buckets kept at most.
const MAX_BINDING_BUCKETS: usize = 65_536;

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

    /// What the operator sees for `tool` in `status` and `plugins show`.
    #[must_use]
    pub fn describe(&self, tool: &str) -> Option<String> {
        let t = self.tools.get(tool)?;
        Some(format!(
            "{} calls a minute, bursts of {}",
            t.per_minute, t.burst
        ))
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Self {
        Self {
            tokens: rate.burst,
            at: now,
        }
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second()).min(rate.burst);
        self.at = now;
    }

    /// How long until one token is there (zero when it is).
    fn wait(&self, rate: Rate) -> Duration {
        if self.tokens >= 1.0 {
            return Duration::ZERO;
        }
        let missing = 1.0 - self.tokens;
        Duration::from_secs_f64(missing / rate.per_second().max(f64::MIN_POSITIVE))
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
    /// which limit refused it, and when to try again.
    pub fn take(&self, binding: &Binding, tool: &str) -> Result<(), Limited> {
        self.take_at(binding.identity(), tool, Instant::now())
    }

    fn take_at(&self, binding: u64, tool: &str, now: Instant) -> Result<(), Limited> {
        let tool_rate = self.policy.tools.get(tool).copied();
        let binding_rate = self.policy.binding;
        if tool_rate.is_none() && binding_rate.is_none() {
            return Ok(());
        }
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rate) = binding_rate {
            if !s.bindings.contains_key(&binding) && s.bindings.len() >= MAX_BINDING_BUCKETS {
                forget_fullest(&mut s.bindings, rate, now);
            }
            let b = s
                .bindings
                .entry(binding)
                .or_insert_with(|| Bucket::full(rate, now));
            b.refill(rate, now);
            if b.tokens < 1.0 {
                return Err(Limited {
                    scope: "binding",
                    rate,
                    retry_after: b.wait(rate),
                });
            }
        }
        if let Some(rate) = tool_rate {
            let t = match s.tools.get_mut(tool) {
                Some(t) => t,
                None => s
                    .tools
                    .entry(tool.to_owned())
                    .or_insert_with(|| Bucket::full(rate, now)),
            };
            t.refill(rate, now);
            if t.tokens < 1.0 {
                return Err(Limited {
                    scope: "tool",
                    rate,
                    retry_after: t.wait(rate),
                });
            }
            t.tokens -= 1.0;
        }
        if let Some(b) = s.bindings.get_mut(&binding) {
            b.tokens -= 1.0;
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
fn forget_fullest(buckets: &mut HashMap<u64, Bucket>, rate: Rate, now: Instant) {
    buckets.retain(|_, b| {
        b.refill(rate, now);
        b.tokens < rate.burst
    });
    if buckets.len() >= MAX_BINDING_BUCKETS
        && let Some(k) = buckets
            .iter()
            .max_by(|a, b| a.1.tokens.total_cmp(&b.1.tokens))
            .map(|(k, _)| *k)
    {
        buckets.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
            assert!(l.take_at(1, "kandev_x_t", now).is_ok());
        }
        let refused = l.take_at(2, "kandev_x_t", now).unwrap_err();
        assert_eq!(
            refused.scope, "tool",
            "every caller shares the tool's bucket"
        );
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        assert!(
            l.take_at(1, "kandev_x_other", now).is_ok(),
            "other tools are free"
        );
        assert!(
            l.take_at(1, "kandev_x_t", now + Duration::from_secs(1))
                .is_ok()
        );
    }

    #[test]
    fn a_bindings_bucket_is_its_own_and_a_refusal_takes_from_neither() {
        let l = limiter(Some((60.0, 2.0)), Some((60.0, 3.0)));
        let now = Instant::now();
        assert!(l.take_at(1, "kandev_x_t", now).is_ok());
        assert!(l.take_at(1, "kandev_x_t", now).is_ok());
        assert_eq!(
            l.take_at(1, "kandev_x_t", now).unwrap_err().scope,
            "binding"
        );
        // Binding 2 has its own bucket; the tool's has one call left.
        assert!(l.take_at(2, "kandev_x_t", now).is_ok());
        assert_eq!(l.take_at(2, "kandev_x_t", now).unwrap_err().scope, "tool");
    }

    #[test]
    fn no_policy_keeps_no_state() {
        let l = limiter(None, None);
        for b in 0..1000 {
            assert!(l.take_at(b, "kandev_x_t", Instant::now()).is_ok());
        }
        assert_eq!(l.bindings_held(), 0);
    }

    #[test]
    fn the_binding_buckets_are_bounded_whatever_the_number_of_tokens() {
        let l = limiter(Some((60.0, 5.0)), None);
        let now = Instant::now();
        for b in 0..(MAX_BINDING_BUCKETS as u64 + 100) {
            assert!(l.take_at(b, "t", now).is_ok());
        }
        assert!(l.bindings_held() <= MAX_BINDING_BUCKETS);
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
                if l.take_at(1, "kandev_x_t", now).is_ok() {
                    passed += 1;
                }
            }
            let window = now.duration_since(start).as_secs_f64();
            let allowed = burst + window * per_minute / 60.0;
            prop_assert!(f64::from(passed) <= allowed + 1e-9, "{passed} > {allowed}");
        }
    }
}
