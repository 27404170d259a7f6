//! Local rate limits (`services.<name>.inbound.rate_limit`) on real proxies and real sockets:
//! a route's limit at the edge of its burst on a paused clock, with the caller's proxy in front
//! (it never retries the 429); and limits per calling identity over real mutual TLS, where one
//! caller spending its share leaves another's untouched.

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

mod support;

use std::time::Duration;

use http::StatusCode;
use support::in_process::{Pair, pair};
use support::*;

const ROUTE_LIMITED: &str = r"
services:
  shop:
    calls:
      loans:
        retries: { count: 3, on: [connect-failure, reset, 5xx] }
        routes:
          apply: { method: POST, path: /apply }
  loans:
    inbound:
      timeout: none
      rate_limit:
        routes:
          apply: { rate: 1, burst: 3 }
";

#[tokio::test(start_paused = true)]
async fn a_route_lets_its_burst_through_then_one_a_second_and_the_caller_does_not_retry() {
    let Pair {
        app,
        callee: loans,
        mut client,
        ..
    } = pair(ROUTE_LIMITED, "shop", "loans").await;
    let hits = || app.hits.load(std::sync::atomic::Ordering::SeqCst);

    // Another path, not limited: it warms both connections (their connect timers are done).
    assert_eq!(client.send("GET", "/status").await.0, StatusCode::OK);
    let start = tokio::time::Instant::now();
    for i in 0..3 {
        assert_eq!(client.send("POST", "/apply").await.0, StatusCode::OK, "{i}");
    }
    let (status, headers) = client.send("POST", "/apply").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["x-hopwise-limit"], "inbound.rate_limit.routes");
    assert_eq!(headers["x-hopwise-error"], "rate-limited");
    assert_eq!(hits(), 4, "the refused request never reached the app");
    // Other paths are not this route's: still let through.
    assert_eq!(client.send("GET", "/status").await.0, StatusCode::OK);

    // One token a second: not a moment before.
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(client.send("POST", "/apply").await.0, 429);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(client.send("POST", "/apply").await.0, StatusCode::OK);
    assert_eq!(client.send("POST", "/apply").await.0, 429);
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "the clock moved only when told"
    );

    // Three refusals at the callee, each answered once: the caller's proxy, which retries
    // 5xx three times, passed every 429 up as it came.
    let text = loans.metrics();
    let tripped =
        r#"hopwise_limits_tripped_total{service="loans",limit="inbound.rate_limit.routes"} 3"#;
    assert!(text.contains(tripped), "{text}");
    assert_eq!(hits(), 6);
}

const PER_CALLER: &str = r"
mesh: { trust_domain: rates.local }
services:
  shop: { calls: { loans: {} } }
  audit: { calls: { loans: {} } }
  loans:
    inbound:
      rate_limit:
        per_caller: { rate: 1, burst: 2 }
        callers:
          audit: { rate: 100, burst: 100 }
";

#[tokio::test]
async fn each_calling_identity_spends_its_own_share_over_mutual_tls() {
    let app = backend(echo()).await;
    let f = Fixture::new(PER_CALLER);
    let loans = start(inbound(f.config("loans"), app.addr)).await;
    let to_loans = [("loans", loans.bound.inbound.unwrap())];
    let shop = start(outbound(f.config("shop"), &to_loans)).await;
    let audit = start(outbound(f.config("audit"), &to_loans)).await;

    let began = tokio::time::Instant::now();
    let mut shop_ok = 0;
    let mut refused = None;
    for _ in 0..10 {
        let (status, headers, _) = get(
            shop.bound.upstreams["loans"],
            request("GET", "/x", "loans", b""),
        )
        .await;
        match status {
            StatusCode::OK => shop_ok += 1,
            StatusCode::TOO_MANY_REQUESTS => refused = Some(headers),
            other => panic!("shop got {other}"),
        }
    }
    let elapsed = began.elapsed();
    // Its burst of 2, and one more a second at most (wall clock: the machine may be slow).
    assert!(shop_ok >= 2, "the burst passes: {shop_ok}");
    assert!(
        shop_ok <= 2 + elapsed.as_secs() + 1,
        "{shop_ok} let through in {elapsed:?}"
    );
    let refused = refused.expect("ten requests in a few seconds exceed 2 + 1/s");
    assert_eq!(refused["x-hopwise-limit"], "inbound.rate_limit.per_caller");
    assert!(refused.contains_key("retry-after"));

    // Audit, named with its own limit, is untouched by shop's spending.
    for i in 0..10 {
        let (status, _, body) = get(
            audit.bound.upstreams["loans"],
            request("GET", "/x", "loans", b""),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "audit's request {i}");
        assert!(
            body.contains("spiffe://rates.local/service/audit"),
            "{body}"
        );
    }
    let text = metrics(&loans).await;
    assert!(
        text.contains(
            r#"hopwise_limits_tripped_total{service="loans",limit="inbound.rate_limit.per_caller"}"#
        ),
        "{text}"
    );
    assert!(!text.contains("inbound.rate_limit.callers"), "{text}");
}

const ASKS_FOR_429: &str = r"
services:
  shop:
    calls:
      loans:
        retries: { count: 2, on: [retriable-status-codes], status_codes: [429] }
  loans:
    inbound:
      timeout: none
      rate_limit:
        total: { rate: 1, burst: 1 }
";

/// A rule that names 429 is obeyed: the caller's proxy tries again (and the limit, not yet
/// refilled after the back-off, refuses each try).
#[tokio::test(start_paused = true)]
async fn a_caller_retries_a_429_only_when_its_rule_names_it() {
    let Pair {
        app,
        callee: loans,
        caller: shop,
        mut client,
    } = pair(ASKS_FOR_429, "shop", "loans").await;
    assert_eq!(client.send("GET", "/a").await.0, StatusCode::OK);
    let (status, headers) = client.send("GET", "/b").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["x-hopwise-limit"], "inbound.rate_limit.total");
    let text = loans.metrics();
    let tripped =
        r#"hopwise_limits_tripped_total{service="loans",limit="inbound.rate_limit.total"} 3"#;
    assert!(
        text.contains(tripped),
        "the first try and two retries: {text}\n{}",
        shop.metrics()
    );
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}
