//! Realistic configuration in the shape of Istio's, Linkerd's and the Gateway API's own
//! documentation examples, written by hand (`examples/import/`): what each route, rule and
//! profile becomes, and where the findings point.

#![allow(clippy::unwrap_used)]

mod common;

use common::{example, has, imported, ms, run};
use hopwise_analyze::Options;
use hopwise_model::{Call, Mesh, RetryOn};

fn call<'m>(mesh: &'m Mesh, label: &str) -> &'m Call {
    mesh.calls()
        .find(|c| c.label() == label)
        .unwrap_or_else(|| panic!("no call {label}"))
}

#[test]
fn bookinfo_routes_subsets_and_circuit_breakers() {
    let imp = imported(
        &example("bookinfo"),
        &example("bookinfo/calls.txt"),
        None,
        false,
    );
    // Two routes of reviews: jason's (subset v2, whose own cap applies) and the canary split.
    let jason = call(&imp.mesh, "productpage → reviews/jason");
    assert_eq!(jason.policy.limits.max_requests, 100);
    assert_eq!(jason.policy.timeout, None);
    let canary = call(&imp.mesh, "productpage → reviews/canary");
    assert_eq!(canary.policy.timeout.map(|d| d.get()), ms(500));
    // Ratings: the circuit-breaking task's caps and ejection, 3 retries of 2 s.
    let ratings = call(&imp.mesh, "reviews → ratings");
    assert_eq!(ratings.policy.limits.max_connections, 1);
    assert_eq!(ratings.policy.limits.max_pending, 1);
    assert_eq!(ratings.policy.retry.count, 3);
    let outlier = ratings.policy.outlier.expect("outlier ejection");
    assert_eq!(
        (
            outlier.consecutive_gateway_failures,
            outlier.max_ejection_percent
        ),
        (1, 100)
    );
    let c = hopwise_convert::check(&imp, &Options::default());
    let t = c
        .report
        .timeouts
        .calls
        .iter()
        .find(|t| t.call == "reviews → ratings")
        .unwrap();
    // Istio's list does not retry a timed-out try: 1 of 4.
    assert_eq!((t.tries_when_hung, t.tries), (1, 4));
    has(
        &c.text(),
        &[
            "skipped  gateway/bookinfo-gateway (virtual-services.yaml:51)",
            "skipped  virtualservice/bookinfo (virtual-services.yaml:61): bound to gateways only",
            "note     productpage → reviews: its 2 routes are each counted as a request of their own",
            "add `reset` to `retries.on` (it does not make a fast 503 retriable) (virtualservice/ratings (virtual-services.yaml:43): http[0]: retries.retryOn not written, so Istio's default)",
            "set per_try_timeout to 500 ms or less (or retry less) (virtualservice/ratings (virtual-services.yaml:49): http[0].retries.perTryTimeout)",
        ],
    );
}

#[test]
fn a_call_names_the_routes_it_uses() {
    let calls = vec![(
        "c.txt".to_owned(),
        "productpage -> reviews route=canary\n".to_owned(),
    )];
    let imp = imported(&example("bookinfo"), &calls, None, false);
    // One route that matches everything: its policy is the call's.
    let labels: Vec<String> = imp.mesh.calls().map(Call::label).collect();
    assert_eq!(labels, ["productpage → reviews"]);
    let only = call(&imp.mesh, "productpage → reviews");
    assert_eq!(only.policy.timeout.map(|d| d.get()), ms(500));
    assert!(imp.notes.is_empty());
    let bad = [(
        "c.txt".to_owned(),
        "\nproductpage -> reviews route=nope\n".to_owned(),
    )];
    let src: Vec<_> = bad
        .iter()
        .map(|(n, t)| hopwise_convert::Source { name: n, text: t })
        .collect();
    let cfg = example("bookinfo");
    let cfg: Vec<_> = cfg
        .iter()
        .map(|(n, t)| hopwise_convert::Source { name: n, text: t })
        .collect();
    let opts = hopwise_convert::Options {
        name: "x".into(),
        flavor: None,
        fixed_backoff: false,
    };
    let err = hopwise_convert::import(&cfg, &src, &opts)
        .unwrap_err()
        .render();
    assert_eq!(
        err,
        "c.txt:2:1: `route=nope`: reviews has no such route (its routes: jason, canary)"
    );
}

#[test]
fn linkerd_books_profiles() {
    let imp = imported(
        &example("linkerd-books"),
        &example("linkerd-books/calls.txt"),
        None,
        false,
    );
    assert_eq!(imp.flavor, hopwise_convert::Flavor::Linkerd);
    let put = call(&imp.mesh, "webapp → books/put-books-id-json");
    assert_eq!(put.policy.timeout.map(|d| d.get()), ms(25));
    assert_eq!(put.policy.retry.count, 0);
    // A retryable route: bounded by its budget alone (the floor's 10/s × 10 s), and the budget.
    let head = call(&imp.mesh, "webapp → authors/head-authors-id-json");
    assert_eq!(head.method, "HEAD");
    assert_eq!(head.policy.retry.count, 100);
    // Linkerd retries a failed response, 500–599, never a refused connection: status codes,
    // not Envoy's `5xx` (which would retry connect failures too).
    assert!(
        head.policy
            .retry
            .on
            .contains(&RetryOn::RetriableStatusCodes)
    );
    assert!(!head.policy.retry.on.contains(&RetryOn::Any5xx));
    assert!(!head.policy.retry.on.contains(&RetryOn::ConnectFailure));
    let codes: Vec<u16> = head.policy.retry.status_codes.iter().copied().collect();
    assert_eq!(codes, (500..=599).collect::<Vec<u16>>());
    let budget = head.policy.budget.expect("the profile's budget");
    assert_eq!((budget.ratio, budget.min_per_second), (0.2, 10));
    // The route that is not retryable: Linkerd's default, none.
    assert_eq!(
        call(&imp.mesh, "webapp → authors/get-authors-json")
            .policy
            .retry
            .count,
        0
    );
    let c = run("linkerd-books", "calls.txt", false);
    let row = |failure| {
        c.report
            .fanout
            .iter()
            .find(|r| r.service == "authors" && r.failure == failure)
            .unwrap()
    };
    // Down: a refused connection is no failed response, so no route retries it: one try per
    // route, 6 over the routes (Envoy's `5xx` would have made it 1 + 1 + 101 + 1 + 1 + 101).
    let down = row(hopwise_analyze::Failure::Down);
    assert_eq!((down.attempts, down.with_budgets), (6, 6.0));
    // A 503 is a failed response: the retryable route's 101 tries, 6.6 with the budget.
    let failing = row(hopwise_analyze::Failure::Http503);
    assert_eq!(failing.attempts, 306);
    assert!(
        (failing.with_budgets - 6.6).abs() < 1e-9,
        "{}",
        failing.with_budgets
    );
}

#[test]
fn gateway_api_routes_with_linkerd_annotations() {
    let imp = imported(
        &example("gateway"),
        &example("gateway/calls.txt"),
        None,
        false,
    );
    assert_eq!(imp.flavor, hopwise_convert::Flavor::Linkerd);
    let quote = call(&imp.mesh, "checkout → pricing/route-0");
    assert_eq!(quote.route_path.as_deref(), Some("/quote"));
    assert_eq!(quote.policy.timeout.map(|d| d.get()), ms(1000));
    assert_eq!(quote.policy.per_try_timeout.map(|d| d.get()), ms(300));
    assert_eq!(quote.policy.retry.count, 2);
    assert_eq!(
        quote
            .policy
            .retry
            .status_codes
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [503]
    );
    assert_eq!(
        quote.policy.retry.backoff.base.get(),
        std::time::Duration::from_millis(100)
    );
    let reserve = call(&imp.mesh, "pricing → inventory/route-0");
    assert_eq!(reserve.protocol, hopwise_model::Protocol::Grpc);
    assert_eq!(
        reserve.route_path.as_deref(),
        Some("/shop.Inventory/Reserve")
    );
    assert_eq!(reserve.policy.timeout.map(|d| d.get()), ms(500));
    assert_eq!(reserve.policy.retry.count, 2);
    assert!(reserve.policy.retry.on.contains(&RetryOn::Unavailable));
    assert!(
        imp.skipped
            .iter()
            .any(|s| s.at.object == "httproute/storefront")
    );
    let c = hopwise_convert::check(&imp, &Options::default());
    has(
        &c.text(),
        &["POST /shop.Inventory/Reserve is not safe to repeat, but it is retried on `unavailable`"],
    );
}
