//! A token bucket: the one rate limit of toolhost's own making.

/// A token bucket: `burst` at once, refilled at `per_second`. What bounds
/// a plugin's output lines (the runtime) and its log messages to a caller
/// (the pipeline).
#[derive(Debug, Clone)]
pub struct Bucket {
    burst: f64,
    per_second: f64,
    tokens: f64,
    at: std::time::Instant,
}

impl Bucket {
    /// A full bucket.
    #[must_use]
    pub fn new(burst: f64, per_second: f64) -> Self {
        Self {
            burst,
            per_second,
            tokens: burst,
            at: std::time::Instant::now(),
        }
    }

    /// Takes one token, if there is one.
    pub fn take(&mut self) -> bool {
        self.take_at(std::time::Instant::now())
    }

    /// Takes one token at `now`, if there is one: the clock is a parameter
    /// so the rule can be checked without waiting for it.
    pub fn take_at(&mut self, now: std::time::Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
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
        let later = start + std::time::Duration::from_millis(20);
        assert!(b.take_at(later) && b.take_at(later), "refilled");
        assert!(!b.take_at(later), "never past the burst");
    }

    #[test]
    fn a_clock_that_goes_backwards_refills_nothing() {
        let mut b = Bucket::new(1.0, 1000.0);
        let start = b.at;
        assert!(b.take_at(start + std::time::Duration::from_millis(5)));
        assert!(!b.take_at(start), "an earlier instant adds no tokens");
    }
}
