use super::*;
use crate::backoff::{Backoff, Strategy};
use crate::duration::Dur;
use crate::policy::{GrpcCode, RetryOn};
use crate::preset::Preset;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn limit(v: u64, bound: Bound) -> Limit {
    Limit { time: ms(v), bound }
}

/// Hopwise's preset retrying 503s too, with a fixed 25 ms back-off so delays are exact.
fn policy() -> Policy {
    let mut p = Preset::Hopwise.policy();
    p.retry.on.insert(RetryOn::GatewayError);
    p.retry.backoff = Backoff {
        strategy: Strategy::Fixed,
        ..Backoff::ENVOY
    };
    p.per_try_timeout = Some(Dur::from_millis(300));
    p
}

fn end(outcome: Outcome) -> TryEnd {
    TryEnd {
        attempt: 1,
        outcome,
        limit: Some(limit(300, Bound::PerTry)),
        safe: true,
        marked: false,
        replayable: true,
        left: Some(limit(1000, Bound::Route)),
    }
}

/// Records what the gate asked for, answering as `given` says.
struct Asked {
    given: Given,
    asked: Vec<&'static str>,
}

impl Spend for Asked {
    fn budget(&mut self) -> bool {
        self.asked.push("budget");
        self.given.budget
    }
    fn retry_place(&mut self) -> bool {
        self.asked.push("place");
        self.given.retry_place
    }
    fn jitter(&mut self) -> u64 {
        self.asked.push("jitter");
        self.given.jitter
    }
}

#[test]
fn the_callers_deadline_trims_the_route_timeout_only_when_shorter() {
    let route = |v| Trim::Until(limit(v, Bound::Route));
    let caller = |v| Trim::Until(limit(v, Bound::Caller));
    assert_eq!(trim(Some(ms(500)), Some(ms(200))), caller(200));
    assert_eq!(trim(Some(ms(500)), Some(ms(500))), route(500));
    assert_eq!(trim(Some(ms(500)), Some(ms(900))), route(500));
    assert_eq!(trim(None, Some(ms(900))), caller(900));
    assert_eq!(trim(Some(ms(500)), None), route(500));
    assert_eq!(trim(None, None), Trim::Unbounded);
}

#[test]
fn a_deadline_with_nothing_left_has_passed() {
    assert_eq!(trim(Some(ms(500)), Some(Duration::ZERO)), Trim::Passed);
    assert_eq!(trim(None, Some(Duration::ZERO)), Trim::Passed);
    assert_eq!(trim(Some(Duration::ZERO), None), Trim::Passed);
}

#[test]
fn a_try_is_bounded_by_the_shorter_and_a_tie_goes_to_the_request() {
    let left = Some(limit(400, Bound::Caller));
    assert_eq!(
        try_timeout(Some(ms(300)), left),
        Some(limit(300, Bound::PerTry))
    );
    assert_eq!(try_timeout(Some(ms(400)), left), left);
    assert_eq!(try_timeout(Some(ms(900)), left), left);
    assert_eq!(try_timeout(None, left), left);
    assert_eq!(
        try_timeout(Some(ms(300)), None),
        Some(limit(300, Bound::PerTry))
    );
    assert_eq!(try_timeout(None, None), None);
}

#[test]
fn successes_and_the_requests_own_deadline_end_the_request() {
    let p = policy();
    let mut all = Given::allow();
    assert_eq!(next(&p, &end(Outcome::http(200)), &mut all), Next::Done);
    assert_eq!(
        next(&p, &end(Outcome::grpc(GrpcCode::Ok)), &mut all),
        Next::Done
    );
    for bound in [Bound::Route, Bound::Caller] {
        let cut = TryEnd {
            limit: Some(limit(300, bound)),
            ..end(Outcome::Timeout)
        };
        assert_eq!(next(&p, &cut, &mut all), Next::Done, "{bound:?}");
    }
    // The try's own timeout is a failure like another (`gateway-error` retries it).
    assert!(matches!(
        next(&p, &end(Outcome::Timeout), &mut all),
        Next::Retry { .. }
    ));
}

/// An answer below 500 ends the request, unless the rule names it: `retriable-4xx` (409)
/// and a code in `status_codes` (a 429 from a rate limit) are retried, as Envoy does.
#[test]
fn a_4xx_is_retried_only_when_the_rule_names_it() {
    let mut all = Given::allow();
    let p = policy();
    for status in [404, 409, 429] {
        assert_eq!(next(&p, &end(Outcome::http(status)), &mut all), Next::Done);
    }
    let mut named = policy();
    named.retry.on.insert(RetryOn::Retriable4xx);
    named.retry.on.insert(RetryOn::RetriableStatusCodes);
    named.retry.status_codes = [429].into();
    for status in [409, 429] {
        let n = next(&named, &end(Outcome::http(status)), &mut all);
        assert!(matches!(n, Next::Retry { .. }), "{status}: {n:?}");
    }
    assert_eq!(next(&named, &end(Outcome::http(404)), &mut all), Next::Done);
}

#[test]
fn a_retry_waits_its_back_off_and_is_bounded_by_what_will_be_left() {
    let p = policy();
    let mut all = Given::allow();
    assert_eq!(
        next(&p, &end(Outcome::http(503)), &mut all),
        Next::Retry {
            delay: ms(25),
            timeout: Some(limit(300, Bound::PerTry)),
        }
    );
    let short = TryEnd {
        left: Some(limit(125, Bound::Caller)),
        ..end(Outcome::http(503))
    };
    assert_eq!(
        next(&p, &short, &mut all),
        Next::Retry {
            delay: ms(25),
            timeout: Some(limit(100, Bound::Caller)),
        }
    );
    let unbounded = TryEnd {
        left: None,
        ..end(Outcome::http(503))
    };
    assert!(matches!(
        next(&p, &unbounded, &mut all),
        Next::Retry { delay, .. } if delay == ms(25)
    ));
}

#[test]
fn each_check_refuses_in_the_documented_order() {
    let p = policy();
    let allow = Given::allow();
    let cases: [(TryEnd, Given, Skip); 8] = [
        (end(Outcome::http(500)), allow, Skip::NotListed),
        (
            TryEnd {
                safe: false,
                ..end(Outcome::http(503))
            },
            allow,
            Skip::Unsafe,
        ),
        (
            TryEnd {
                marked: true,
                ..end(Outcome::http(503))
            },
            allow,
            Skip::RetriedBelow,
        ),
        (
            TryEnd {
                attempt: 3,
                ..end(Outcome::http(503))
            },
            allow,
            Skip::Count,
        ),
        (
            TryEnd {
                replayable: false,
                ..end(Outcome::http(503))
            },
            allow,
            Skip::Replay,
        ),
        (
            end(Outcome::http(503)),
            Given {
                budget: false,
                ..allow
            },
            Skip::Budget,
        ),
        (
            end(Outcome::http(503)),
            Given {
                retry_place: false,
                ..allow
            },
            Skip::MaxRetries,
        ),
        (
            TryEnd {
                left: Some(limit(25, Bound::Route)),
                ..end(Outcome::http(503))
            },
            allow,
            Skip::Deadline,
        ),
    ];
    for (t, mut given, want) in cases {
        assert_eq!(next(&p, &t, &mut given), Next::Skip(want), "{t:?}");
    }
    // No retries configured counts as none left.
    let mut none = policy();
    none.retry.count = 0;
    assert_eq!(
        next(&none, &end(Outcome::http(503)), &mut Given::allow()),
        Next::Skip(Skip::Count)
    );
}

#[test]
fn run_time_state_is_asked_only_once_the_checks_before_it_pass() {
    let p = policy();
    let ask = |t: TryEnd, given: Given| {
        let mut a = Asked {
            given,
            asked: Vec::new(),
        };
        next(&p, &t, &mut a);
        a.asked
    };
    let allow = Given::allow();
    let no_replay = TryEnd {
        replayable: false,
        ..end(Outcome::http(503))
    };
    assert!(ask(no_replay, allow).is_empty());
    let spent = Given {
        budget: false,
        ..allow
    };
    assert_eq!(ask(end(Outcome::http(503)), spent), ["budget"]);
    let full = Given {
        retry_place: false,
        ..allow
    };
    assert_eq!(ask(end(Outcome::http(503)), full), ["budget", "place"]);
    assert_eq!(
        ask(end(Outcome::http(503)), allow),
        ["budget", "place", "jitter"]
    );
}

#[test]
fn skip_labels_are_the_metrics_reasons() {
    let labels: Vec<_> = [
        Skip::NotListed,
        Skip::Unsafe,
        Skip::RetriedBelow,
        Skip::Count,
        Skip::Replay,
        Skip::Budget,
        Skip::MaxRetries,
        Skip::Deadline,
    ]
    .iter()
    .map(|s| s.label())
    .collect();
    assert_eq!(
        labels,
        [
            None,
            Some("unsafe"),
            Some("retried-below"),
            None,
            Some("body-too-large"),
            Some("budget"),
            Some("limit"),
            Some("deadline"),
        ]
    );
    assert!(Skip::Budget.sheds() && Skip::MaxRetries.sheds() && !Skip::Deadline.sheds());
}

fn budget(ratio: f64, min_per_second: u32) -> Budget {
    Budget {
        ratio,
        min_per_second,
        window: Dur::from_millis(10_000),
    }
}

#[test]
fn the_budget_allows_a_share_of_requests_plus_a_floor() {
    let window = Duration::from_secs(10);
    let b = budget(0.2, 0);
    assert!(b.allows(100, 19, window));
    assert!(!b.allows(100, 20, window));
    // 10 per second over 10 s: 100 retries even for one request.
    let floor = budget(0.2, 10);
    assert!(floor.allows(1, 99, window));
    assert!(!floor.allows(1, 100, window));
}

#[test]
fn at_steady_load_a_budget_lets_through_one_plus_its_ratio() {
    let b = budget(0.2, 10);
    assert_eq!(b.tries_per_request(3), 1.2);
    assert_eq!(b.tries_per_request(1), 1.0);
}

proptest::proptest! {
    /// A retry's timeout never outlives what the request has left, and no retry is made when the
    /// back-off would use all of it.
    #[test]
    fn a_retry_never_outlives_the_deadline(
        per_try in proptest::option::of(1u64..2_000),
        left in 0u64..2_000,
        jitter in proptest::num::u64::ANY,
        attempt in 1u32..3,
    ) {
        let mut p = policy();
        p.retry.backoff = Backoff::ENVOY;
        p.per_try_timeout = per_try.map(Dur::from_millis);
        let t = TryEnd {
            attempt,
            left: Some(limit(left, Bound::Caller)),
            ..end(Outcome::ConnectFailure)
        };
        let mut given = Given { jitter, ..Given::allow() };
        match next(&p, &t, &mut given) {
            Next::Retry { delay, timeout } => {
                proptest::prop_assert!(delay < ms(left));
                let timeout = timeout.map(|l| l.time);
                proptest::prop_assert_eq!(timeout.map(|d| d + delay <= ms(left)), Some(true));
            }
            other => proptest::prop_assert_eq!(other, Next::Skip(Skip::Deadline)),
        }
    }

    /// The budget never allows more retries than its ratio of requests plus its floor.
    #[test]
    fn the_budget_never_allows_past_its_ceiling(
        ratio in 0.0f64..1.0,
        min in 0u32..20,
        requests in 0u64..10_000,
        retries in 0u64..10_000,
    ) {
        let b = budget(ratio, min);
        let window = Duration::from_secs(10);
        if b.allows(requests, retries, window) {
            proptest::prop_assert!((retries + 1) as f64 <= ratio * requests as f64 + f64::from(min) * 10.0 + 1e-9);
        }
    }
}
