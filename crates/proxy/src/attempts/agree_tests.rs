//! What `hopwise check` assumes a proxy does after a try is what the proxy decides: for random
//! policies, outcomes, marks, bodies, budget and cap states and times left, the proxy's
//! [`decide`] and the analyser's `assume::next_try` give the same answer (retry after what delay
//! and within what timeout, or the reason not to) and ask the run-time state the same things in
//! the same order (taking from the budget spends it).

use std::time::Duration;

use hopwise_analyze::assume;
use hopwise_model::attempt::{Bound, Limit, Next, Spend, TryEnd};
use hopwise_model::{Backoff, Budget, Dur, GrpcCode, Outcome, Policy, Preset, RetryOn};
use proptest::prelude::*;

use super::decide;

/// Answers fixed in advance, and a record of what was asked.
#[derive(Debug, Clone)]
struct Recorded {
    budget: bool,
    retry_place: bool,
    jitter: u64,
    asked: Vec<&'static str>,
}

impl Spend for Recorded {
    fn budget(&mut self) -> bool {
        self.asked.push("budget");
        self.budget
    }
    fn retry_place(&mut self) -> bool {
        self.asked.push("retry_place");
        self.retry_place
    }
    fn jitter(&mut self) -> u64 {
        self.asked.push("jitter");
        self.jitter
    }
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::ConnectFailure),
        Just(Outcome::RefusedStream),
        Just(Outcome::ResetBeforeRequest),
        Just(Outcome::Reset),
        Just(Outcome::Timeout),
        prop::sample::select(vec![200u16, 404, 409, 500, 502, 503, 504]).prop_map(Outcome::http),
        prop::sample::select(vec![
            GrpcCode::Ok,
            GrpcCode::Cancelled,
            GrpcCode::Unknown,
            GrpcCode::DeadlineExceeded,
            GrpcCode::ResourceExhausted,
            GrpcCode::Internal,
            GrpcCode::Unavailable,
        ])
        .prop_map(Outcome::grpc),
    ]
}

fn bound() -> impl Strategy<Value = Bound> {
    prop::sample::select(vec![Bound::PerTry, Bound::Route, Bound::Caller])
}

fn limit() -> impl Strategy<Value = Option<Limit>> {
    prop::option::of((0u64..3_000, bound()).prop_map(|(t, bound)| Limit { time: ms(t), bound }))
}

fn policy() -> impl Strategy<Value = Policy> {
    let presets = prop::sample::select(vec![
        Preset::Hopwise,
        Preset::Istio,
        Preset::Envoy,
        Preset::Linkerd,
    ]);
    let backoff = (
        prop::sample::select(vec![
            hopwise_model::Strategy::Envoy,
            hopwise_model::Strategy::EnvoyDocumented,
            hopwise_model::Strategy::Fixed,
        ]),
        1u64..200,
        1u64..2_000,
    )
        .prop_map(|(strategy, base, max)| Backoff {
            strategy,
            base: Dur::from_millis(base),
            max: Dur::from_millis(max),
        });
    let on = prop::sample::subsequence(
        RetryOn::ALL.iter().map(|(_, c)| *c).collect::<Vec<_>>(),
        0..6,
    );
    let codes = prop::sample::subsequence(vec![409u16, 500, 503], 0..3);
    (
        presets,
        (0u32..5, on, codes, backoff),
        (any::<bool>(), any::<bool>()),
        prop::option::of(1u64..3_000),
        prop::option::of(0.0f64..1.0),
    )
        .prop_map(
            |(preset, (count, on, codes, backoff), (safe_only, single_hop), per_try, ratio)| {
                let mut p = preset.policy();
                p.retry.count = count;
                p.retry.on = on.into_iter().collect();
                p.retry.status_codes = codes.into_iter().collect();
                p.retry.backoff = backoff;
                p.retry.only_if_safe = safe_only;
                p.retry.single_hop = single_hop;
                p.per_try_timeout = per_try.map(Dur::from_millis);
                p.budget = ratio.map(|ratio| Budget {
                    ratio,
                    min_per_second: 10,
                    window: Dur::from_millis(10_000),
                });
                p
            },
        )
}

fn try_end() -> impl Strategy<Value = TryEnd> {
    (
        1u32..7,
        outcome(),
        limit(),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        limit(),
    )
        .prop_map(
            |(attempt, outcome, limit, (safe, marked, replayable), left)| TryEnd {
                attempt,
                outcome,
                limit,
                safe,
                marked,
                replayable,
                left,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn check_assumes_what_the_proxy_decides(
        p in policy(),
        t in try_end(),
        budget in any::<bool>(),
        retry_place in any::<bool>(),
        jitter in any::<u64>(),
    ) {
        let state = Recorded { budget, retry_place, jitter, asked: Vec::new() };
        let (mut proxy, mut check) = (state.clone(), state);
        let decided = decide(&p, &t, &mut proxy);
        let assumed = assume::next_try(&p, &t, &mut check);
        prop_assert_eq!(decided, assumed);
        prop_assert_eq!(proxy.asked, check.asked);
        // And what a retry's timeout leaves the request: never more than it had.
        if let (Next::Retry { delay, timeout: Some(next) }, Some(left)) = (decided, t.left) {
            prop_assert!(next.time + delay <= left.time);
        }
    }
}
