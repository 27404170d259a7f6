//! The bucket on a clock the test moves: a burst at once, then the rate; the wait it names is
//! the wait that works; a quiet spell never banks more than a burst; and, as a property, no
//! window lets through more than `burst + rate × length` requests.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_burst_at_once_then_the_rate() {
    let limit = Limit { rate: 10, burst: 3 };
    let mut b = Bucket::default();
    let t0 = Duration::from_secs(100);
    for _ in 0..3 {
        assert_eq!(b.take(limit, t0), Verdict::Allow);
    }
    let refused = b.take(limit, t0);
    assert_eq!(
        refused,
        Verdict::Deny {
            retry_after: 100 * MS
        }
    );
    assert_eq!(refused.retry_after_secs(), Some(1));
    // Just before the token is back: still refused, and told how little is left.
    assert_eq!(
        b.take(limit, t0 + 99 * MS),
        Verdict::Deny { retry_after: MS }
    );
    // The wait it named is the wait that works, and then one per 100 ms.
    assert_eq!(b.take(limit, t0 + 100 * MS), Verdict::Allow);
    assert!(matches!(b.take(limit, t0 + 100 * MS), Verdict::Deny { .. }));
    assert_eq!(b.take(limit, t0 + 200 * MS), Verdict::Allow);
}

#[test]
fn a_quiet_spell_banks_one_burst_only() {
    let limit = Limit { rate: 1, burst: 2 };
    let mut b = Bucket::default();
    assert_eq!(b.take(limit, Duration::ZERO), Verdict::Allow);
    let later = Duration::from_secs(3600);
    assert_eq!(b.take(limit, later), Verdict::Allow);
    assert_eq!(b.take(limit, later), Verdict::Allow);
    let refused = b.take(limit, later);
    assert_eq!(refused.retry_after_secs(), Some(1));
}

#[test]
fn retry_after_is_whole_seconds_rounded_up() {
    let deny = |ms| Verdict::Deny {
        retry_after: ms * MS,
    };
    assert_eq!(deny(1).retry_after_secs(), Some(1));
    assert_eq!(deny(1000).retry_after_secs(), Some(1));
    assert_eq!(deny(1001).retry_after_secs(), Some(2));
    assert_eq!(Verdict::Allow.retry_after_secs(), None);
    // A rate below one a second: a token comes back after 1 s at most (rate is at least 1).
    let limit = Limit { rate: 1, burst: 1 };
    let mut b = Bucket::default();
    assert_eq!(b.take(limit, Duration::ZERO), Verdict::Allow);
    assert_eq!(b.take(limit, Duration::ZERO).retry_after_secs(), Some(1));
}

proptest! {
    /// Over any run of requests, those let through in `[start, start + w]` are at most
    /// `burst + rate × w` (plus one for the token that comes back at the window's end).
    #[test]
    fn no_window_lets_through_more_than_burst_plus_rate(
        rate in 1u32..50,
        burst in 1u32..10,
        gaps in prop::collection::vec(0u64..200, 1..300),
    ) {
        let limit = Limit { rate, burst };
        let mut b = Bucket::default();
        let mut now = Duration::ZERO;
        let mut allowed = Vec::new();
        for g in gaps {
            now += Duration::from_millis(g);
            if b.take(limit, now) == Verdict::Allow {
                allowed.push(now);
            }
        }
        for (i, start) in allowed.iter().enumerate() {
            for (j, end) in allowed.iter().enumerate().skip(i) {
                let w = (*end - *start).as_secs_f64();
                let bound = f64::from(burst) + f64::from(rate) * w + 1e-9;
                prop_assert!(((j - i + 1) as f64) <= bound, "{} in {w} s", j - i + 1);
            }
        }
    }
}
