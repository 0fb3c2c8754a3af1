//! A token bucket: the one rate limit of toolhost's own making.

use std::time::{Duration, Instant};

/// A token bucket: `burst` at once, refilled at `per_second`. What bounds
/// a plugin's output lines (the runtime), its log messages to a caller
/// (the pipeline), and the operator's rate limits per token and per tool
/// (the policy), whose limits may change between two takes (a pushed
/// catalog tightens a tool's): [`Bucket::ready_at`] takes the limits it
/// refills under.
#[derive(Debug, Clone)]
pub struct Bucket {
    burst: f64,
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    #[must_use]
    pub fn new(burst: f64, per_second: f64) -> Self {
        Self {
            burst,
            per_second,
            tokens: burst,
            at: Instant::now(),
        }
    }

    /// A full bucket at `now`.
    #[must_use]
    pub fn full_at(burst: f64, per_second: f64, now: Instant) -> Self {
        Self {
            burst,
            per_second,
            tokens: burst,
            at: now,
        }
    }

    /// Refills the bucket to `now` under these limits (which may differ
    /// from the last ones), and says how long until a token is there:
    /// zero when one is. Takes nothing: [`Bucket::spend`] does, so two
    /// buckets can be checked before either is taken from.
    pub fn ready_at(&mut self, burst: f64, per_second: f64, now: Instant) -> Duration {
        self.burst = burst;
        self.per_second = per_second;
        self.refill(now);
        if self.tokens >= 1.0 {
            return Duration::ZERO;
        }
        let missing = 1.0 - self.tokens;
        Duration::from_secs_f64(missing / self.per_second.max(f64::MIN_POSITIVE))
    }

    /// Takes the token [`Bucket::ready_at`] said is there.
    pub fn spend(&mut self) {
        self.tokens -= 1.0;
    }

    /// Whether the bucket is full at `now` (a new one would be the same,
    /// so a map of buckets may forget it).
    pub fn is_full_at(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.burst
    }

    /// Tokens in the bucket as last refilled.
    #[must_use]
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.at = now;
    }

    /// Takes one token, if there is one.
    pub fn take(&mut self) -> bool {
        self.take_at(std::time::Instant::now())
    }

    /// Takes one token at `now`, if there is one: the clock is a parameter
    /// so the rule can be checked without waiting for it.
    pub fn take_at(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_nothing_until_the_refill() {
        let mut b = Bucket::new(3.0, 0.0);
        assert!(b.take() && b.take() && b.take());
        assert!(!b.take(), "empty, and nothing refills it");
    }

    #[test]
    fn it_refills_at_its_rate_up_to_its_burst() {
        let mut b = Bucket::new(2.0, 1000.0);
        let start = b.at;
        assert!(b.take_at(start) && b.take_at(start));
        assert!(!b.take_at(start), "empty at once");
        let later = start + Duration::from_millis(20);
        assert!(b.take_at(later) && b.take_at(later), "refilled");
        assert!(!b.take_at(later), "never past the burst");
    }

    #[test]
    fn ready_at_says_when_and_takes_nothing_until_spent() {
        let start = Instant::now();
        let mut b = Bucket::full_at(1.0, 1.0, start);
        assert_eq!(b.ready_at(1.0, 1.0, start), Duration::ZERO);
        assert_eq!(b.ready_at(1.0, 1.0, start), Duration::ZERO, "nothing taken");
        b.spend();
        assert_eq!(b.ready_at(1.0, 1.0, start), Duration::from_secs(1));
        assert_eq!(
            b.ready_at(1.0, 2.0, start),
            Duration::from_millis(500),
            "new limits"
        );
        assert!(!b.is_full_at(start));
        assert!(b.is_full_at(start + Duration::from_secs(1)));
    }

    #[test]
    fn a_clock_that_goes_backwards_refills_nothing() {
        let mut b = Bucket::new(1.0, 1000.0);
        let start = b.at;
        assert!(b.take_at(start + Duration::from_millis(5)));
        assert!(!b.take_at(start), "an earlier instant adds no tokens");
    }
}
