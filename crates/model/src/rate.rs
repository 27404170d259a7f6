//! The arithmetic of a local rate limit (issue 29: per service, per route, per calling
//! identity, on the callee's inbound side): a token bucket of `burst` requests refilled at `rate`
//! a second, kept as one number — the time the bucket will be full again, GCRA's "theoretical
//! arrival time" — so a check is a comparison and an add, with no float drift. A request the
//! bucket refuses learns when one would be let through (`Retry-After`, whole seconds up).
//!
//! Pure, no clock: the time is the caller's, a [`Duration`] since any fixed start (the proxy's
//! clock, which a test pauses). Which bucket a request draws from, and the 429, are the proxy's.

use std::time::Duration;

/// A limit as written: `rate` requests a second on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// At least 1.
    pub rate: u32,
    /// At least 1: the requests let through at once after a quiet spell.
    pub burst: u32,
}

impl Limit {
    /// The time one request's token takes to come back (1 s / rate).
    fn interval(self) -> u128 {
        NANOS_PER_SEC / u128::from(self.rate.max(1))
    }
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// One bucket's state: empty at first use means full (a new bucket lets a burst through).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bucket {
    /// When the bucket is full again, in nanoseconds on the caller's clock.
    full_at: u128,
}

/// What the bucket says to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refused; one request would be let through after this long.
    Deny {
        retry_after: Duration,
    },
}

impl Verdict {
    /// `Retry-After` in whole seconds, rounded up, at least 1 (the header has no fractions).
    pub fn retry_after_secs(self) -> Option<u64> {
        match self {
            Verdict::Allow => None,
            Verdict::Deny { retry_after } => {
                let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                Some(secs.max(1))
            }
        }
    }
}

impl Bucket {
    /// One request at `now`: let through (a token taken) or refused (nothing taken).
    pub fn take(&mut self, limit: Limit, now: Duration) -> Verdict {
        let now = now.as_nanos();
        let t = limit.interval();
        // Room for `burst` tokens: the bucket may run up to `burst - 1` intervals ahead of now.
        let tolerance = t * u128::from(limit.burst.max(1) - 1);
        let from = self.full_at.max(now);
        let ahead = from - now;
        if ahead > tolerance {
            let wait = ahead - tolerance;
            return Verdict::Deny {
                retry_after: Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX)),
            };
        }
        self.full_at = from + t;
        Verdict::Allow
    }
}

#[cfg(test)]
mod tests;
