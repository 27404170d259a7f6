//! The limiter on tokio's paused clock: which buckets a request draws from, that a refused
//! request takes nothing, the longest wait wins, and the per-caller table stays bounded.

use std::time::Duration;

use super::*;

const A: &str = "spiffe://m/service/a";
const B: &str = "spiffe://m/service/b";
const AUDIT: &str = "spiffe://m/service/audit";

fn limit(rate: u32, burst: u32) -> Limit {
    Limit { rate, burst }
}

fn limiter(limits: RateLimits) -> Arc<RateLimiter> {
    RateLimiter::of(limits, ["read", "write", "read"].into_iter()).expect("limits set")
}

fn key(id: &str) -> Option<CallerKey> {
    Some(CallerKey::of(id))
}

#[test]
fn no_limit_no_limiter() {
    assert!(RateLimiter::of(RateLimits::default(), std::iter::empty()).is_none());
}

#[tokio::test(start_paused = true)]
async fn each_caller_has_its_own_bucket_and_a_named_caller_its_own_limit() {
    let r = limiter(RateLimits {
        per_caller: Some(limit(1, 2)),
        callers: vec![(AUDIT.into(), limit(1, 5))],
        ..RateLimits::default()
    });
    for _ in 0..2 {
        assert_eq!(r.admit(key(A), None), Ok(()));
    }
    let refused = r.admit(key(A), None).unwrap_err();
    assert_eq!(refused.limit, PER_CALLER);
    assert_eq!(refused.retry_after_secs, 1);
    // Another caller is not touched by a's spending; the named one has its own burst.
    assert_eq!(r.admit(key(B), None), Ok(()));
    for _ in 0..5 {
        assert_eq!(r.admit(key(AUDIT), None), Ok(()));
    }
    assert_eq!(r.admit(key(AUDIT), None).unwrap_err().limit, CALLER);
    // Without an identity (plaintext) nothing per caller applies.
    for _ in 0..100 {
        assert_eq!(r.admit(None, None), Ok(()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_request_takes_nothing_and_waits_for_the_slowest_limit() {
    let r = limiter(RateLimits {
        total: Some(limit(10, 3)),
        routes: vec![("write".into(), limit(1, 1))],
        ..RateLimits::default()
    });
    // Route index 1 is `write`: its one token goes, then the route refuses, with its 1 s wait.
    assert_eq!(r.admit(key(A), Some(1)), Ok(()));
    let refused = r.admit(key(A), Some(1)).unwrap_err();
    assert_eq!((refused.limit, refused.retry_after_secs), (ROUTE, 1));
    // The refusals took nothing from the total: two tokens of its burst of 3 are left.
    assert_eq!(r.admit(key(A), Some(0)), Ok(()));
    assert_eq!(r.admit(key(A), Some(2)), Ok(()));
    assert_eq!(r.admit(key(A), Some(0)).unwrap_err().limit, TOTAL);
    // Both refuse: the answer names the one that needs longer (the route's 1 s, not the
    // total's 100 ms), so a caller that waits as told passes every limit.
    assert_eq!(r.admit(key(A), Some(1)).unwrap_err().limit, ROUTE);
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(
        r.admit(key(A), Some(0)),
        Ok(()),
        "a token of the total is back"
    );
    assert_eq!(r.admit(key(A), Some(1)).unwrap_err().limit, ROUTE);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(r.admit(key(A), Some(1)), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn the_per_caller_table_stays_bounded() {
    let r = limiter(RateLimits {
        per_caller: Some(limit(1, 1)),
        ..RateLimits::default()
    });
    let id = |i: usize| format!("spiffe://m/service/c{i}");
    for i in 0..MAX_CALLERS {
        assert_eq!(r.admit(key(&id(i)), None), Ok(()));
    }
    assert_eq!(r.callers_remembered(), MAX_CALLERS);
    // The table is full of refilling buckets: newcomers share one, stricter, never looser.
    assert_eq!(r.admit(key(&id(MAX_CALLERS)), None), Ok(()));
    let refused = r.admit(key(&id(MAX_CALLERS + 1)), None).unwrap_err();
    assert_eq!(refused.limit, PER_CALLER);
    assert_eq!(r.callers_remembered(), MAX_CALLERS);
    // Once their buckets are full again they are forgotten, and a newcomer has its own.
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(r.admit(key(&id(MAX_CALLERS + 1)), None), Ok(()));
    assert_eq!(r.callers_remembered(), 1);
}
