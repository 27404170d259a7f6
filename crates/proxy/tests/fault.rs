//! `services.<name>.fault` on real proxies and real sockets, on a paused clock: a delay the
//! callee's proxy holds meets the caller's per-try timeout and retries exactly as a slow app
//! would; an abort answers the status the file names, only for requests carrying its header;
//! a gRPC service's abort reaches a real tonic client as the gRPC status named.

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

#[path = "support/ledger.rs"]
mod ledger;
mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;
use support::in_process::{Pair, pair};

const SLOW: &str = r"
services:
  shop:
    calls:
      inventory:
        timeout: 5s
        per_try_timeout: 500ms
        retries: { count: 2, on: [gateway-error] }
  inventory:
    inbound: { timeout: none }
    fault:
      delay: { time: 2s }
";

#[tokio::test(start_paused = true)]
async fn a_delay_meets_the_callers_per_try_timeout_and_retries() {
    let Pair {
        app,
        callee,
        caller,
        mut client,
    } = pair(SLOW, "shop", "inventory").await;
    let began = tokio::time::Instant::now();
    let (status, headers) = client.send("GET", "/stock").await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(headers["x-hopwise-error"], "per-try-timeout");
    // Three tries, each cut at 500 ms while held by the fault: the app saw none of them.
    assert_eq!(app.hits.load(Ordering::SeqCst), 0);
    let delayed = r#"hopwise_faults_injected_total{service="inventory",fault="delay"} 3"#;
    assert!(callee.metrics().contains(delayed), "{}", callee.metrics());
    let tries =
        r#"hopwise_tries_total{direction="outbound",service="inventory",route="inventory"} 3"#;
    assert!(caller.metrics().contains(tries), "{}", caller.metrics());
    // 3 × 500 ms and two back-offs, well under the 2 s a single try would have waited out.
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

const ABORT_WITH_HEADER: &str = r#"
services:
  shop: { calls: { inventory: {} } }
  inventory:
    fault:
      abort: { status: 503 }
      header: { name: x-chaos, value: "on" }
"#;

#[tokio::test(start_paused = true)]
async fn an_abort_answers_its_status_only_for_requests_with_its_header() {
    let Pair {
        app,
        callee,
        mut client,
        ..
    } = pair(ABORT_WITH_HEADER, "shop", "inventory").await;
    assert_eq!(client.send("GET", "/a").await.0, StatusCode::OK);
    let (status, headers) = client.send_with("GET", "/b", &[("x-chaos", "on")]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["x-hopwise-error"], "fault");
    // Another value is not the header the fault names.
    let (status, _) = client.send_with("GET", "/c", &[("x-chaos", "off")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(app.hits.load(Ordering::SeqCst), 2);
    let text = callee.metrics();
    let aborted = r#"hopwise_faults_injected_total{service="inventory",fault="abort"} 1"#;
    assert!(text.contains(aborted), "{text}");
    let reply =
        r#"hopwise_local_replies_total{direction="inbound",service="inventory",reason="fault"} 1"#;
    assert!(text.contains(reply), "{text}");
}

const GRPC_ABORT: &str = r"
mesh: { name: t, trust_domain: test.local }
services:
  a: { calls: { ledger: { timeout: 5s } } }
  ledger:
    protocol: grpc
    fault:
      abort: { grpc: unavailable, percent: 100 }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_abort_reaches_a_real_client_as_its_status() {
    let f = support::Fixture::new(GRPC_ABORT);
    let (app, calls) = ledger::ledger_app().await;
    let callee = support::start(support::inbound(f.config("ledger"), app)).await;
    let caller = support::outbound(f.config("a"), &[("ledger", callee.bound.inbound.unwrap())]);
    let caller = support::start(caller).await;
    let mut c = ledger::client(caller.bound.upstreams["ledger"], "http://ledger").await;
    let status = ledger::bounded("Get", ledger::get_member(&mut c, "U-7"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(status.metadata().get("x-hopwise-error").unwrap(), "fault");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the app never saw it");
}
