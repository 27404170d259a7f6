//! A callee's own routes (`services.<name>.routes`) through real proxies over mutual TLS to
//! real apps: the caller's proxy takes the rule, then a backend by weight, then the backend's
//! copies. The Gateway API's mesh conformance cases, re-expressed (docs/routes.md lists which
//! test runs which case): matching, split, weight, redirect, request header modifier, rewrite.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

#[path = "routes/fixture.rs"]
mod fixture;
mod support;

use fixture::*;
use http::StatusCode;
use support::*;

/// mesh/httproute-matching (by header) and mesh/mesh-split: the rule a request takes decides
/// which service's app gets it, through the per-upstream port and through the HTTP-proxy port
/// by `Host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_match_sends_to_one_service_and_not_the_other() {
    let m = mesh().await;
    let (s, _, body) = get(m.port("b"), with_headers("/x", "b", &[("x-beta", "1")])).await;
    assert_eq!(
        (s, body.starts_with("app=v2 uri=/x ")),
        (StatusCode::OK, true),
        "{body}"
    );
    let (s, _, body) = get(m.port("b"), with_headers("/x", "b", &[("x-beta", "2")])).await;
    assert_eq!(
        (s, body.starts_with("app=v1 uri=/x ")),
        (StatusCode::OK, true),
        "{body}"
    );
    assert_eq!(m.hits(), (1, 1));
    // By `Host` on the HTTP-proxy port: `c`'s routes, exact paths.
    let proxy = m.a.bound.outbound.unwrap();
    let (_, _, body) = get(proxy, request("GET", "/v1", "c", b"")).await;
    assert!(body.starts_with("app=v1 "), "{body}");
    let (_, _, body) = get(proxy, request("GET", "/v2", "c.test.local:80", b"")).await;
    assert!(body.starts_with("app=v2 "), "{body}");
    // No rule takes it: the Gateway API's 404, counted as this proxy's `no-route`.
    let (s, h, _) = get(proxy, request("GET", "/v3", "c", b"")).await;
    assert_eq!(
        (s, h["x-hopwise-error"].to_str().unwrap()),
        (StatusCode::NOT_FOUND, "no-route")
    );
    assert_eq!(m.hits(), (2, 2));
    let text = metrics(&m.a).await;
    for line in [
        r#"hopwise_local_replies_total{direction="outbound",service="c",reason="no-route"} 1"#,
        // Recorded under the backend and the call's route whose policy applied.
        r#"hopwise_requests_total{direction="outbound",service="b-v2",route="b-v2"} 2"#,
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
}

/// mesh/httproute-weight: 80/20 over 1,000 requests. Each request's draw is the proxy's own
/// random number (not seeded), so the bound is statistical: b-v1's count is binomial (1,000,
/// 0.8), σ ≈ 12.6, and ±50 (±5 % of the requests) is ±3.9 σ — a false failure about once in
/// 10,000 runs, while a split that ignored weights (500) or inverted them (200) fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_split_lands_within_statistical_bounds() {
    let m = mesh().await;
    let statuses = many(m.port("b"), "/split", "b", 1000).await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    let (v1, v2) = m.hits();
    assert_eq!(v1 + v2, 1000);
    assert!(
        (750..=850).contains(&v1),
        "b-v1 got {v1} of 1,000, b-v2 {v2}"
    );
}

/// All weights 0: the Gateway API's 500, and no app reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_zero_weights_answer_500() {
    let m = mesh().await;
    let (s, h, body) = get(m.port("b"), request("GET", "/zero/x", "b", b"")).await;
    assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(h["x-hopwise-error"], "no-backend");
    assert!(body.contains("canary"), "{body}");
    assert_eq!(m.hits(), (0, 0));
    let text = metrics(&m.a).await;
    let line =
        r#"hopwise_local_replies_total{direction="outbound",service="b",reason="no-backend"} 1"#;
    assert!(text.contains(line), "{text}");
}

/// mesh/httproute-redirect-path (with status): 301 and its `Location`, answered by the
/// caller's proxy; no app is reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_answers_301_with_its_location_and_reaches_no_backend() {
    let m = mesh().await;
    let (s, h, _) = get(m.port("b"), request("GET", "/old/lemon?x=1", "b", b"")).await;
    assert_eq!(s, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(h["location"], "http://b/new/lemon?x=1");
    assert!(!h.contains_key("x-hopwise-error"), "{h:?}");
    assert_eq!(m.hits(), (0, 0));
    let text = metrics(&m.a).await;
    let line =
        r#"hopwise_local_replies_total{direction="outbound",service="b",reason="redirect"} 1"#;
    assert!(text.contains(line), "{text}");
}

/// mesh/httproute-request-header-modifier: `set` overwrites, `add` appends, `remove` drops,
/// as the app sees them; the rule's ResponseHeaderModifier reaches the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_header_modifier_reaches_the_backend() {
    let m = mesh().await;
    let sent = [
        ("X-Header-Set", "set-val"),
        ("X-Header-Add", "append-val-1"),
        ("X-Header-Remove", "remove-val"),
        ("Some-Other-Header", "val"),
    ];
    let (s, h, body) = get(m.port("b"), with_headers("/set", "b", &sent)).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        "app=v1 uri=/set headers=x-header-add=append-val-1,header-val-1;x-header-set=set-overwrites-values host=b"
    );
    assert_eq!(h["x-answered-by-route"], "yes");
}

/// mesh/httproute-rewrite-path (prefix, full path) and a hostname rewrite: the app gets the
/// rewritten path, the query kept, and the rewritten `Host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_rewrite_reaches_the_backend_rewritten() {
    let m = mesh().await;
    let (s, _, body) = get(m.port("b"), request("GET", "/prefix/one/two?q=1", "b", b"")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(body.starts_with("app=v1 uri=/one/two?q=1 "), "{body}");
    let (_, _, body) = get(m.port("b"), request("GET", "/prefix/one", "b", b"")).await;
    assert!(body.starts_with("app=v1 uri=/one "), "{body}");
    let (_, _, body) = get(m.port("b"), request("GET", "/full/one/two?q=2", "b", b"")).await;
    assert_eq!(body, "app=v1 uri=/one?q=2 headers= host=elsewhere.example");
}

/// A backend the caller does not call (no `calls.b-v3`): this proxy has no cluster for it, so
/// it answers itself, 404 `no-route`, naming the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_the_caller_does_not_call_is_no_route() {
    let m = mesh().await;
    let (s, h, body) = get(m.port("b"), request("GET", "/unknown", "b", b"")).await;
    assert_eq!(
        (s, h["x-hopwise-error"].to_str().unwrap()),
        (StatusCode::NOT_FOUND, "no-route")
    );
    assert!(body.contains("b-v3"), "{body}");
    assert_eq!(m.hits(), (0, 0));
}
