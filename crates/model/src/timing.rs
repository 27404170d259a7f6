//! Timeout-budget arithmetic: how long a call can take when what it calls hangs, how many tries
//! fit in a window, and the largest per-try timeout that would fit: the analyser's tables. What
//! the proxy computes for each try (deadline, try timeout, retry gate, budget) is `attempt.rs`,
//! which the analyser calls too.
//!
//! `None` as a duration means "never ends" (no timeout anywhere below a hang).

use std::time::Duration;

use crate::backoff::Backoff;

/// `d × n`, saturating: absurd retry counts must give absurd answers, not a panic.
pub fn times(d: Duration, n: u32) -> Duration {
    d.checked_mul(n).unwrap_or(Duration::MAX)
}

/// How long one try lasts when the callee takes `callee` to answer: the per-try timeout cuts it.
pub fn try_length(per_try: Option<Duration>, callee: Option<Duration>) -> Option<Duration> {
    match (per_try, callee) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (Some(t), None) => Some(t),
        (None, c) => c,
    }
}

/// The seed's worst case: `tries × try length + the back-off between tries` (upper bounds),
/// cut off by the route timeout.
pub fn worst_case(
    tries: u32,
    try_len: Option<Duration>,
    backoff: &Backoff,
    route_timeout: Option<Duration>,
) -> Option<Duration> {
    let total = try_len.map(|t| times(t, tries).saturating_add(backoff.total_upper(tries)));
    match (total, route_timeout) {
        (Some(w), Some(r)) => Some(w.min(r)),
        (Some(w), None) => Some(w),
        (None, r) => r,
    }
}

/// How many of `tries` tries, each lasting `try_len`, finish inside `window` (back-off at its
/// upper bounds): try k finishes at `k × try_len + Σ upper(1..k)`.
pub fn tries_that_fit(
    window: Option<Duration>,
    tries: u32,
    try_len: Option<Duration>,
    backoff: &Backoff,
) -> u32 {
    let Some(window) = window else { return tries };
    let Some(len) = try_len else { return 0 };
    let mut end = Duration::ZERO;
    for k in 1..=tries {
        if k > 1 {
            end = end.saturating_add(backoff.upper(k - 1));
        }
        end = end.saturating_add(len);
        if end > window {
            return k - 1;
        }
    }
    tries
}

/// How many of `tries` tries *start* inside `window` when each lasts `try_len` and back-off is
/// at its lower bounds: the most attempts that can reach the callee before the caller gives up.
pub fn tries_started(
    window: Option<Duration>,
    tries: u32,
    try_len: Option<Duration>,
    backoff: &Backoff,
) -> u32 {
    let Some(window) = window else {
        return if try_len.is_some() { tries } else { 1 };
    };
    let Some(len) = try_len else { return 1 };
    let mut start = Duration::ZERO;
    for k in 1..=tries {
        if start >= window {
            return k - 1;
        }
        let step = len.saturating_add(backoff.lower(k));
        if step.is_zero() {
            // Tries that take no time all start at once.
            return tries;
        }
        start = start.saturating_add(step);
    }
    tries
}

/// The largest per-try timeout `t` with `tries × t + Σ back-off ≤ window`, in whole ms
/// (rounded down so it always fits). `None` when the back-off alone fills the window.
pub fn largest_per_try(window: Duration, tries: u32, backoff: &Backoff) -> Option<Duration> {
    let spare = window.checked_sub(backoff.total_upper(tries))?;
    let ms = (spare.as_millis() / u128::from(tries.max(1))) as u64;
    (ms > 0).then(|| Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Strategy;

    const FIXED: Backoff = Backoff {
        strategy: Strategy::Fixed,
        base: crate::duration::Dur::from_millis(25),
        max: crate::duration::Dur::from_millis(250),
    };

    fn ms(v: u64) -> Option<Duration> {
        Some(Duration::from_millis(v))
    }

    #[test]
    fn the_seed_chain() {
        // pricing → inventory: 500 ms per try, 3 tries, inventory hangs.
        let pricing = worst_case(3, try_length(ms(500), None), &FIXED, None);
        assert_eq!(pricing, ms(1550));
        let checkout = worst_case(3, try_length(ms(1000), pricing), &FIXED, None);
        assert_eq!(checkout, ms(3050));
        let frontend = worst_case(3, try_length(None, checkout), &FIXED, None);
        assert_eq!(frontend, ms(9200));
        // Only 1 of pricing's 3 tries fits in checkout's 1.00 s per try.
        assert_eq!(tries_that_fit(ms(1000), 3, ms(500), &FIXED), 1);
        // The largest per-try timeouts that fit: 650 ms and 316 ms.
        assert_eq!(largest_per_try(Duration::from_secs(2), 3, &FIXED), ms(650));
        assert_eq!(largest_per_try(Duration::from_secs(1), 3, &FIXED), ms(316));
    }

    #[test]
    fn route_timeout_caps_worst_case() {
        assert_eq!(worst_case(3, None, &FIXED, ms(2000)), ms(2000));
        assert_eq!(worst_case(3, ms(1000), &FIXED, ms(2000)), ms(2000));
        assert_eq!(worst_case(1, None, &FIXED, None), None);
    }

    #[test]
    fn tries_started_counts_attempts_before_the_window_closes() {
        // 500 ms tries, 25 ms back-off: tries start at 0, 525, 1050.
        assert_eq!(tries_started(ms(1000), 3, ms(500), &FIXED), 2);
        assert_eq!(tries_started(ms(1051), 3, ms(500), &FIXED), 3);
        assert_eq!(tries_started(None, 3, ms(500), &FIXED), 3);
        // A try that never ends leaves room for no other.
        assert_eq!(tries_started(ms(1000), 3, None, &FIXED), 1);
    }

    #[test]
    fn nothing_fits_when_backoff_fills_the_window() {
        assert_eq!(largest_per_try(Duration::from_millis(40), 3, &FIXED), None);
    }
}
