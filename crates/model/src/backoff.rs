//! Back-off between tries. One type serves both the analyser (which needs each retry's bounds)
//! and the proxy (which draws the delay), so the two cannot disagree.
//!
//! Three strategies (`../shared/semantics.md` §2):
//! - `envoy`: what Envoy's code has done since 2020 — retry k waits `U[0, interval_k)` ms, the
//!   interval doubling from `base` and jumping to `max` once doubling would pass `max/2`
//!   (0–24, 0–49, 0–99, 0–199, 0–249 ms with 25 ms / 250 ms);
//! - `envoy-documented`: what Envoy's docs still say — `U[0, (2^k − 1)·base)` capped at `max`
//!   (0–24, 0–74, 0–174 ms); the seed's 773 ms uses it;
//! - `fixed`: the same `base` before every retry (the seed checker's 25 ms).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;

use crate::duration::Dur;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Envoy's jittered exponential back-off as its code does it today.
    Envoy,
    /// Envoy's jittered exponential back-off as its documentation states it.
    EnvoyDocumented,
    /// Exactly `base` before every retry.
    Fixed,
}

impl Strategy {
    pub const ALL: [(&'static str, Strategy); 3] = [
        ("envoy", Strategy::Envoy),
        ("envoy-documented", Strategy::EnvoyDocumented),
        ("fixed", Strategy::Fixed),
    ];
}

/// A back-off strategy with its intervals. Envoy works in whole milliseconds; so do we.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Backoff {
    pub strategy: Strategy,
    pub base: Dur,
    pub max: Dur,
}

impl Backoff {
    /// Envoy's defaults: 25 ms base, 10 × base max.
    pub const ENVOY: Backoff = Backoff {
        strategy: Strategy::Envoy,
        base: Dur::from_millis(25),
        max: Dur::from_millis(250),
    };

    fn base_ms(&self) -> u64 {
        // Envoy rounds a base below 1 ms up to 1 ms.
        (self.base.0.as_millis() as u64).max(1)
    }

    fn max_ms(&self) -> u64 {
        (self.max.0.as_millis() as u64).max(self.base_ms())
    }

    /// The exclusive upper end of the random draw before retry `k` (1-based), in ms.
    fn interval_ms(&self, k: u32) -> u64 {
        let (base, max) = (self.base_ms(), self.max_ms());
        match self.strategy {
            Strategy::Fixed => base,
            Strategy::Envoy => {
                let mut interval = base;
                // At most log2(max / base) doublings before the interval reaches max.
                for _ in 1..k {
                    if interval >= max {
                        break;
                    }
                    interval = if interval < max / 2 {
                        interval * 2
                    } else {
                        max
                    };
                }
                interval
            }
            Strategy::EnvoyDocumented => {
                let multiplier = (1u64 << k.clamp(1, 40)) - 1;
                multiplier.saturating_mul(base)
            }
        }
    }

    /// The longest wait before retry `k` (1-based).
    pub fn upper(&self, k: u32) -> Duration {
        let ms = match self.strategy {
            Strategy::Fixed => self.base_ms(),
            Strategy::Envoy => self.interval_ms(k) - 1,
            Strategy::EnvoyDocumented => (self.interval_ms(k) - 1).min(self.max_ms()),
        };
        Duration::from_millis(ms)
    }

    /// The shortest wait before retry `k` (1-based).
    pub fn lower(&self, _k: u32) -> Duration {
        match self.strategy {
            Strategy::Fixed => Duration::from_millis(self.base_ms()),
            Strategy::Envoy | Strategy::EnvoyDocumented => Duration::ZERO,
        }
    }

    /// The wait before retry `k`, given a uniformly random number (the proxy supplies it).
    pub fn delay(&self, k: u32, random: u64) -> Duration {
        let ms = match self.strategy {
            Strategy::Fixed => self.base_ms(),
            Strategy::Envoy => random % self.interval_ms(k),
            Strategy::EnvoyDocumented => (random % self.interval_ms(k)).min(self.max_ms()),
        };
        Duration::from_millis(ms)
    }

    /// The longest total wait before the retries of `tries` tries (there are `tries − 1`).
    pub fn total_upper(&self, tries: u32) -> Duration {
        // Past ~64 retries every strategy is at its cap: add the rest by multiplication.
        let head = tries.saturating_sub(1).min(64);
        let mut total: Duration = (1..=head).map(|k| self.upper(k)).sum();
        let rest = tries.saturating_sub(1) - head;
        if rest > 0 {
            total = total.saturating_add(crate::timing::times(self.upper(head + 1), rest));
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(strategy: Strategy) -> Backoff {
        Backoff {
            strategy,
            ..Backoff::ENVOY
        }
    }

    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    #[test]
    fn envoy_code_bounds_and_semantics_test_vector() {
        let e = b(Strategy::Envoy);
        let uppers: Vec<u64> = (1..=6).map(|k| ms(e.upper(k))).collect();
        assert_eq!(uppers, [24, 49, 99, 199, 249, 249]);
        // semantics.md §2.3: r = 999 gives 24, 49, 99, 199, 249.
        let draws: Vec<u64> = (1..=5).map(|k| ms(e.delay(k, 999))).collect();
        assert_eq!(draws, [24, 49, 99, 199, 249]);
    }

    #[test]
    fn envoy_documented_bounds() {
        let e = b(Strategy::EnvoyDocumented);
        let uppers: Vec<u64> = (1..=5).map(|k| ms(e.upper(k))).collect();
        assert_eq!(uppers, [24, 74, 174, 250, 250]);
        // The seed's 773 ms: three 225 ms tries and the two waits between them.
        assert_eq!(ms(e.total_upper(3)) + 3 * 225, 773);
    }

    #[test]
    fn fixed_is_fixed() {
        let f = b(Strategy::Fixed);
        assert_eq!(ms(f.total_upper(3)), 50);
        assert_eq!(f.lower(2), f.upper(2));
        assert_eq!(ms(f.total_upper(1)), 0);
    }

    #[test]
    fn huge_retry_numbers_do_not_overflow() {
        for s in [Strategy::Envoy, Strategy::EnvoyDocumented, Strategy::Fixed] {
            assert!(ms(b(s).upper(1000)) <= 250);
            assert!(ms(b(s).delay(1000, u64::MAX)) <= 250);
        }
    }
}
