//! A rule's `timeouts` and `retry`: read from the mesh file in the Gateway API's format, every
//! problem at its line, and the effective policy of a request the rule takes (`over`): what the
//! rule names, over the call's, the rest the call's.

use std::time::Duration;

use super::super::*;
use crate::policy::{Decision, Outcome, RetryOn};
use crate::{Dur, Mesh, Preset};

fn rules_of(text: &str) -> Vec<Rule> {
    let mesh = Mesh::from_yaml(text).unwrap_or_else(|d| panic!("{}", d.render("mesh.yaml")));
    let ServiceRoutes::Http(routes) = mesh.services["pricing"].routes.clone() else {
        panic!("an HTTP service has HTTPRoutes");
    };
    routes["r"].rules.clone()
}

fn problems(text: &str) -> Vec<String> {
    let d = Mesh::from_yaml(text).expect_err("should be refused");
    d.0.iter()
        .map(|d| format!("{} {}: {}", d.pos.map_or(0, |p| p.line), d.path, d.message))
        .collect()
}

fn ms(n: u64) -> Dur {
    Dur::from_millis(n)
}

const POLICY: &str = r#"
services:
  pricing:
    routes:
      r:
        rules:
          - matches: [{ path: { value: /slow } }]
            timeouts: { request: 2s, backend_request: 500ms }
            retry: { attempts: 3, backoff: 100ms, codes: [503, 429] }
            backends: [{ service: pricing }]
          - matches: [{ path: { value: /off } }]
            timeouts: { request: 0s }
          - backends: [{ service: pricing }]
"#;

#[test]
fn a_rules_timeouts_and_retry_are_read_in_the_gateway_apis_words() {
    let rules = rules_of(POLICY);
    let want = RulePolicy {
        timeout: Some(Some(ms(2000))),
        per_try_timeout: Some(Some(ms(500))),
        retry: Some(RuleRetry {
            attempts: Some(3),
            backoff: Some(ms(100)),
            codes: Some(vec![503, 429]),
        }),
    };
    assert_eq!(rules[0].policy, Some(want));
    // `0s` switches the timeout off, as the spec says.
    assert_eq!(rules[1].policy.as_ref().unwrap().timeout, Some(None));
    assert_eq!(rules[2].policy, None);
}

#[test]
fn every_problem_of_a_rules_policy_is_named_at_its_line() {
    let text = r#"
services:
  pricing:
    routes:
      r:
        rules:
          - timeouts: { request: 1s, backend_request: 2s }
          - timeouts: { request: 1.5s, backendRequest: 1s }
          - retry: { attempts: 11, codes: [200, 503, 600], backoff: 0s }
          - retry: { attempts: 2, backoff: 1h30 }
  ledger:
    protocol: grpc
    routes:
      g:
        rules:
          - retry: { attempts: 1 }
"#;
    let got = problems(text);
    let want = [
        "7 services.pricing.routes.r.rules[0].timeouts.backend_request: 2s is longer than `request` (1s): one try cannot outlast every try together (the Gateway API asks backendRequest ≤ request)",
        "8 services.pricing.routes.r.rules[1].timeouts.request: `1.5s` is not a Gateway API duration: one to four parts, each 1–5 digits and `h`, `m`, `s` or `ms` (`500ms`, `1h30m`; no decimals)",
        "8 services.pricing.routes.r.rules[1].timeouts.backendRequest: unknown field `backendRequest` — did you mean `backend_request`?",
        "9 services.pricing.routes.r.rules[2].retry.attempts: 11 retries is too many: at most 10 (each hop that retries multiplies the tries below it)",
        "9 services.pricing.routes.r.rules[2].retry.codes[0]: 200 is not a status from 400 to 599 (the Gateway API retries error statuses only)",
        "9 services.pricing.routes.r.rules[2].retry.codes[2]: 600 is not a status from 400 to 599 (the Gateway API retries error statuses only)",
        "9 services.pricing.routes.r.rules[2].retry.backoff: a back-off must be longer than zero",
        "10 services.pricing.routes.r.rules[3].retry.backoff: `1h30` is not a Gateway API duration: one to four parts, each 1–5 digits and `h`, `m`, `s` or `ms` (`500ms`, `1h30m`; no decimals)",
        "16 services.ledger.routes.g.rules[0].retry: a GRPCRoute has no `retry`: give the call its policy (`calls.<service>`)",
    ];
    for w in want {
        assert!(got.iter().any(|g| g == w), "missing {w}\n got: {got:#?}");
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
}

#[test]
fn the_rule_overrides_what_it_names_and_the_call_keeps_the_rest() {
    let mut call = Preset::Hopwise.policy();
    call.timeout = Some(ms(10_000));
    call.retry.count = 1;
    call.retry.on = [RetryOn::Any5xx].into_iter().collect();
    call.retry.max_replay_bytes = 1234;
    let rule = rules_of(POLICY)[0].policy.clone().unwrap();
    let p = rule.over(&call);
    assert_eq!(p.timeout, Some(ms(2000)));
    assert_eq!(p.per_try_timeout, Some(ms(500)));
    assert_eq!(p.retry.count, 3);
    assert_eq!(p.retry.backoff.base, ms(100));
    assert_eq!(
        p.retry.backoff.max,
        ms(1000),
        "10 × base, as a call's base alone"
    );
    assert_eq!(p.retry.status_codes, [429, 503].into_iter().collect());
    assert!(
        !p.retry.on.contains(&RetryOn::Any5xx),
        "the codes say which statuses"
    );
    assert!(p.retry.on.contains(&RetryOn::RetriableStatusCodes));
    // Inherited: budget, limits, replay bound, single hop, deadlines.
    assert_eq!(p.budget, call.budget);
    assert_eq!(p.limits, call.limits);
    assert_eq!(p.retry.max_replay_bytes, 1234);
    assert_eq!(p.retry.single_hop, call.retry.single_hop);
    assert_eq!(p.propagate_deadline, call.propagate_deadline);

    let r = &p.retry;
    assert_eq!(r.decide(Outcome::http(503), true), Decision::Retry);
    assert_eq!(r.decide(Outcome::http(500), true), Decision::NotListed);
    assert_eq!(r.decide(Outcome::Timeout, true), Decision::Retry);
    assert_eq!(r.decide(Outcome::ConnectFailure, false), Decision::Retry);
}

#[test]
fn a_rules_retry_never_repeats_an_unsafe_request_even_if_the_call_would() {
    let mut call = Preset::Hopwise.policy();
    call.retry.only_if_safe = false;
    let rule = RulePolicy {
        retry: Some(RuleRetry {
            attempts: Some(2),
            codes: Some(vec![503]),
            ..RuleRetry::default()
        }),
        ..RulePolicy::default()
    };
    let p = rule.over(&call);
    assert_eq!(p.retry.decide(Outcome::http(503), false), Decision::Unsafe);
    assert_eq!(p.retry.decide(Outcome::http(503), true), Decision::Retry);
}

#[test]
fn a_rule_without_codes_keeps_the_calls_conditions_and_zero_switches_off() {
    let mut call = Preset::Hopwise.policy();
    call.timeout = Some(ms(300));
    call.per_try_timeout = Some(ms(100));
    let rule = RulePolicy {
        timeout: Some(None),
        per_try_timeout: Some(None),
        retry: Some(RuleRetry {
            attempts: Some(0),
            ..RuleRetry::default()
        }),
    };
    let p = rule.over(&call);
    assert_eq!((p.timeout, p.per_try_timeout), (None, None));
    assert_eq!(p.retry.count, 0);
    assert_eq!(p.retry.on, call.retry.on);
    assert_eq!(
        RulePolicy::default().over(&call).timeout.map(Dur::get),
        Some(Duration::from_millis(300))
    );
}
