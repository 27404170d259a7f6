use super::*;
use crate::preset::Preset;

fn retry(on: &[RetryOn], codes: &[u16]) -> Retry {
    Retry {
        count: 2,
        on: on.iter().copied().collect(),
        status_codes: codes.iter().copied().collect(),
        backoff: Backoff::ENVOY,
        only_if_safe: true,
        honor_idempotency_key: true,
        single_hop: true,
        max_replay_bytes: 65536,
    }
}

#[test]
fn istio_list_retries_couldnt_get_through_but_not_503_or_timeouts() {
    let r = Preset::Istio.policy().retry;
    assert!(r.matches(Outcome::ConnectFailure));
    assert!(r.matches(Outcome::RefusedStream));
    assert!(r.matches(Outcome::grpc(GrpcCode::Unavailable)));
    assert!(r.matches(Outcome::grpc(GrpcCode::Cancelled)));
    assert!(!r.matches(Outcome::http(503)), "no status codes named");
    assert!(!r.matches(Outcome::Timeout), "the timeout trap");
    assert!(!r.covers_timeout());
}

#[test]
fn reset_family_covers_timeouts_and_connect_failures() {
    for c in [RetryOn::Reset, RetryOn::GatewayError, RetryOn::Any5xx] {
        let r = retry(&[c], &[]);
        assert!(r.matches(Outcome::Timeout), "{c}");
        assert!(r.matches(Outcome::ConnectFailure), "{c}");
        assert!(r.matches(Outcome::Reset), "{c}");
    }
    assert!(!retry(&[RetryOn::Reset], &[]).matches(Outcome::http(503)));
}

#[test]
fn status_conditions() {
    let gw = retry(&[RetryOn::GatewayError], &[]);
    assert!(gw.matches(Outcome::http(503)) && !gw.matches(Outcome::http(500)));
    let any = retry(&[RetryOn::Any5xx], &[]);
    assert!(any.matches(Outcome::http(500)) && !any.matches(Outcome::http(404)));
    let codes = retry(&[RetryOn::RetriableStatusCodes], &[503]);
    assert!(codes.matches(Outcome::http(503)) && !codes.matches(Outcome::http(502)));
    let empty = retry(&[RetryOn::RetriableStatusCodes], &[]);
    assert!(!empty.matches(Outcome::http(503)));
    assert!(retry(&[RetryOn::Retriable4xx], &[]).matches(Outcome::http(409)));
    // gRPC conditions never see an HTTP status, nor HTTP ones a grpc-status.
    assert!(!retry(&[RetryOn::Unavailable], &[]).matches(Outcome::http(503)));
    assert!(!gw.matches(Outcome::grpc(GrpcCode::Unavailable)));
}

#[test]
fn safety_gates_only_what_may_have_been_processed() {
    let r = retry(&[RetryOn::ConnectFailure, RetryOn::Any5xx], &[]);
    assert_eq!(r.decide(Outcome::ConnectFailure, false), Decision::Retry);
    assert_eq!(r.decide(Outcome::http(503), false), Decision::Unsafe);
    assert_eq!(r.decide(Outcome::http(503), true), Decision::Retry);
    assert_eq!(r.decide(Outcome::http(404), true), Decision::NotListed);
    let mut careless = r.clone();
    careless.only_if_safe = false;
    assert_eq!(careless.decide(Outcome::http(503), false), Decision::Retry);
    careless.count = 0;
    assert_eq!(
        careless.decide(Outcome::http(503), false),
        Decision::NoRetries
    );
}

#[test]
fn give_up_answers() {
    let envoy = Preset::Envoy.policy();
    let hop = Preset::Hopwise.policy();
    assert_eq!(
        envoy.give_up_answer(Outcome::ConnectFailure, Protocol::Http),
        Outcome::http(503)
    );
    assert_eq!(
        envoy.give_up_answer(Outcome::ConnectFailure, Protocol::Grpc),
        Outcome::grpc(GrpcCode::Unavailable)
    );
    assert_eq!(
        envoy.give_up_answer(Outcome::Timeout, Protocol::Http),
        Outcome::http(504)
    );
    assert_eq!(
        envoy.give_up_answer(Outcome::Timeout, Protocol::Grpc),
        Outcome::grpc(GrpcCode::Unavailable)
    );
    assert_eq!(
        hop.give_up_answer(Outcome::Timeout, Protocol::Grpc),
        Outcome::grpc(GrpcCode::DeadlineExceeded)
    );
    assert_eq!(
        envoy.give_up_answer(Outcome::http(500), Protocol::Http),
        Outcome::http(500)
    );
}

#[test]
fn rfc9110_idempotent_methods() {
    for m in ["GET", "head", "OPTIONS", "TRACE", "PUT", "DELETE"] {
        assert!(idempotent_method(m), "{m}");
    }
    for m in ["POST", "PATCH", "CONNECT"] {
        assert!(!idempotent_method(m), "{m}");
    }
}

#[test]
fn a_marked_answer_is_not_retried_by_a_single_hop_policy() {
    let mut r = retry(&[RetryOn::GatewayError], &[]);
    assert_eq!(
        r.decide_marked(Outcome::http(503), true, true),
        Decision::RetriedBelow
    );
    r.single_hop = false;
    assert_eq!(
        r.decide_marked(Outcome::http(503), true, true),
        Decision::Retry
    );
}

#[test]
fn the_matching_condition_is_named() {
    let r = retry(&[RetryOn::ConnectFailure, RetryOn::GatewayError], &[]);
    assert_eq!(
        r.matching_condition(Outcome::http(503)),
        Some(RetryOn::GatewayError)
    );
    assert_eq!(
        r.matching_condition(Outcome::ConnectFailure),
        Some(RetryOn::ConnectFailure)
    );
    assert_eq!(r.matching_condition(Outcome::http(404)), None);
}
