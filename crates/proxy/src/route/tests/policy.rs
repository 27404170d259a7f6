//! A rule's `timeouts` and `retry` in the decision: the rule a request takes carries its policy,
//! and the policy the request is sent with is the rule's over the call's (`RulePolicy::over`),
//! as `outbound` applies it; a rule without either leaves the call's policy alone.

use std::time::Duration;

use hopwise_model::{Dur, Policy, Preset, RetryOn};

use super::{NONE, get, table};
use crate::route::{Decision, decide};

/// What the caller's call to the backend says, before any rule.
fn call() -> Policy {
    let mut p = Preset::Hopwise.policy();
    p.timeout = Some(Dur::from_millis(10_000));
    p.per_try_timeout = None;
    p.retry.count = 1;
    p.retry.on = [RetryOn::ConnectFailure, RetryOn::Any5xx]
        .into_iter()
        .collect();
    p
}

#[test]
fn the_rule_taken_carries_its_timeouts_and_retry_and_only_it() {
    let t = table(
        r#"    routes:
      r:
        rules:
          - matches: [{ path: { value: /slow } }]
            timeouts: { request: 200ms, backend_request: 100ms }
            backends: [{ service: b-v1 }]
          - matches: [{ path: { value: /flaky } }]
            retry: { attempts: 2, backoff: 10ms, codes: [503] }
            backends: [{ service: b-v1 }]
          - backends: [{ service: b-v1 }]"#,
    );
    let effective = |path: &str| {
        let Decision::Forward(f) = decide(&t, &get(path, &NONE), 0) else {
            panic!("{path} not forwarded")
        };
        f.policy.map_or_else(call, |p| p.over(&call()))
    };
    // (path, timeout, per-try timeout, retries, retries a 503, retries a 500)
    let ms = |n| Some(Duration::from_millis(n));
    let cases = [
        ("/slow", ms(200), ms(100), 1, true, true),
        ("/flaky", ms(10_000), None, 2, true, false),
        ("/other", ms(10_000), None, 1, true, true),
    ];
    for (path, timeout, per_try, count, on_503, on_500) in cases {
        let p = effective(path);
        assert_eq!(p.timeout.map(Dur::get), timeout, "{path}");
        assert_eq!(p.per_try_timeout.map(Dur::get), per_try, "{path}");
        assert_eq!(p.retry.count, count, "{path}");
        let retries = |s: u16| p.retry.matches(hopwise_model::Outcome::http(s));
        assert_eq!((retries(503), retries(500)), (on_503, on_500), "{path}");
    }
    assert!(
        effective("/flaky")
            .retry
            .on
            .contains(&RetryOn::RetriableStatusCodes)
    );
    assert_eq!(
        effective("/other"),
        call(),
        "no rule policy: the call's, untouched"
    );
}
