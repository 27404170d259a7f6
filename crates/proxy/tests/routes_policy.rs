//! A rule's own `timeouts` and `retry` (HTTPRoute's) through real proxies over mutual TLS to
//! real apps: the request a rule with policy takes is sent with the rule's timeout and retries
//! over the call's, while another rule on the same parent keeps the call's. Times are not
//! asserted tightly (a shared machine): only that an answer came before the backend's delay.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use support::*;
use tokio::time::Instant;

/// `p` is the parent: `/hurry` and `/wait` go to `slow` (the first rule with a 200 ms request
/// timeout, the second with the call's 5 s); `/flaky` and `/once` go to `flaky` (the first
/// rule retrying 503, the second with the call's retries, which do not).
const MESH: &str = r#"
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls: { p: { timeout: 5s }, slow: { timeout: 5s }, flaky: { timeout: 5s } }
  p:
    routes:
      r:
        rules:
          - matches: [{ path: { value: /hurry } }]
            timeouts: { request: 200ms }
            backends: [{ service: slow }]
          - matches: [{ path: { value: /wait } }]
            backends: [{ service: slow }]
          - matches: [{ path: { value: /flaky } }]
            retry: { attempts: 2, backoff: 10ms, codes: [503] }
            backends: [{ service: flaky }]
          - matches: [{ path: { value: /once } }]
            backends: [{ service: flaky }]
  slow: {}
  flaky: {}
"#;

/// How long `slow`'s app takes.
const DELAY: Duration = Duration::from_secs(1);

/// Answers 503 to every other request, the first included: a backend that fails once, then
/// answers.
fn fails_every_other() -> Handler {
    let n = Arc::new(AtomicUsize::new(0));
    Arc::new(move |_req| {
        let first_of_two = n.fetch_add(1, Ordering::SeqCst).is_multiple_of(2);
        Box::pin(async move {
            let mut r = Response::new(Full::new(Bytes::from_static(b"flaky")));
            if first_of_two {
                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            }
            r
        })
    })
}

struct Mesh {
    _f: Fixture,
    a: hopwise_proxy::Running,
    _slow: hopwise_proxy::Running,
    _flaky: hopwise_proxy::Running,
    slow: Backend,
    flaky: Backend,
}

/// a's proxy → slow's or flaky's proxy → its app; `p` runs no copy, so an answer proves the
/// rule sent the request on.
async fn mesh() -> Mesh {
    let f = Fixture::new(MESH);
    let slow = backend(support::slow(DELAY)).await;
    let flaky = backend(fails_every_other()).await;
    let ps = start(inbound(f.config("slow"), slow.addr)).await;
    let pf = start(inbound(f.config("flaky"), flaky.addr)).await;
    let upstreams = [
        ("p", closed_port()),
        ("slow", ps.bound.inbound.unwrap()),
        ("flaky", pf.bound.inbound.unwrap()),
    ];
    let a = start(outbound(f.config("a"), &upstreams)).await;
    Mesh {
        _f: f,
        a,
        _slow: ps,
        _flaky: pf,
        slow,
        flaky,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_request_timeout_answers_504_before_the_backend_while_another_rule_waits() {
    let m = mesh().await;
    let port = m.a.bound.upstreams["p"];
    let started = Instant::now();
    let (s, h, body) = get(port, request("GET", "/hurry", "p", b"")).await;
    let took = started.elapsed();
    assert_eq!(s, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(h["x-hopwise-error"], "route-timeout");
    assert!(
        took < DELAY,
        "answered after {took:?}, not before the app's {DELAY:?}"
    );

    let started = Instant::now();
    let (s, _, body) = get(port, request("GET", "/wait", "p", b"")).await;
    assert_eq!((s, body.as_str()), (StatusCode::OK, "slow"));
    assert!(started.elapsed() >= DELAY, "the call's 5 s let it wait");
    assert_eq!(m.slow.hits.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_retry_on_503_reaches_a_backend_that_fails_once() {
    let m = mesh().await;
    let port = m.a.bound.upstreams["p"];
    let (s, _, body) = get(port, request("GET", "/flaky", "p", b"")).await;
    assert_eq!((s, body.as_str()), (StatusCode::OK, "flaky"));
    assert_eq!(
        m.flaky.hits.load(Ordering::SeqCst),
        2,
        "a 503, then the retry"
    );
    // Without the rule's retry the call's own (connection failures only) let the 503 through.
    let (s, _, _) = get(port, request("GET", "/once", "p", b"")).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(m.flaky.hits.load(Ordering::SeqCst), 3, "tried once");
    let text = metrics(&m.a).await;
    let line = r#"hopwise_retries_total{service="flaky",route="flaky",condition="retriable-status-codes"} 1"#;
    assert!(text.contains(line), "{line}\n{text}");
}
