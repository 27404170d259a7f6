//! Retries, safety of repetition, budgets, limits, deadlines, single-hop marking and outlier
//! ejection — with real proxies, real sockets and failures injected for real. Counts are
//! asserted exactly, from the backends' own counters and from the proxies' metrics. What is a
//! matter of time (per-try timeouts, deadlines, caps held while a request waits, ejection and
//! latency-aware balancing) runs on a paused clock, the proxies served in process
//! (`support/in_process.rs`) so their timers are the test's.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hopwise_proxy::config::Target;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use support::in_process::{self, InProcess};
use support::*;

fn mesh(call: &str) -> String {
    format!(
        "mesh: {{ trust_domain: test.local }}
services:
  a:
    calls:
      b: {call}
  b: {{}}
"
    )
}

/// a's proxy in front of one b proxy per backend (copies of b).
async fn with_copies(
    call: &str,
    apps: &[std::net::SocketAddr],
) -> (Fixture, hopwise_proxy::Running, Vec<hopwise_proxy::Running>) {
    with_copies_in(&mesh(call), apps).await
}

/// [`with_copies`] for a whole mesh file (services `a` and `b`).
async fn with_copies_in(
    mesh: &str,
    apps: &[std::net::SocketAddr],
) -> (Fixture, hopwise_proxy::Running, Vec<hopwise_proxy::Running>) {
    let f = Fixture::new(mesh);
    let mut bs = Vec::new();
    for app in apps {
        bs.push(start(inbound(f.config("b"), *app)).await);
    }
    let mut ac = outbound(f.config("a"), &[]);
    if let Some(Target::Mesh { endpoints, .. }) = ac.clusters.get_mut("b").map(|c| &mut c.target) {
        *endpoints = bs.iter().map(|b| b.bound.inbound.unwrap()).collect();
    }
    let a = start(ac).await;
    (f, a, bs)
}

/// [`with_copies`] served in process on the test's runtime (for tests on a paused clock).
async fn in_process_copies(
    call: &str,
    apps: &[std::net::SocketAddr],
) -> (Fixture, InProcess, Vec<InProcess>) {
    in_process_copies_in(&mesh(call), apps).await
}

/// [`in_process_copies`] for a whole mesh file (services `a` and `b`).
async fn in_process_copies_in(
    mesh: &str,
    apps: &[std::net::SocketAddr],
) -> (Fixture, InProcess, Vec<InProcess>) {
    let f = Fixture::new(mesh);
    let mut bs = Vec::new();
    for app in apps {
        let mut c = f.config("b");
        c.app = Some(*app);
        bs.push(in_process::serve(c).await);
    }
    let copies = bs.iter().map(|b| b.inbound.unwrap()).collect();
    let a = in_process::serve(in_process::with_endpoints(f.config("a"), "b", copies)).await;
    (f, a, bs)
}

/// Answers 503 to the first `n` requests, then 200 with what it received.
fn flaky(n: usize) -> (Handler, Arc<Vec<std::sync::Mutex<Vec<String>>>>) {
    let seen = Arc::new(vec![std::sync::Mutex::new(Vec::new())]);
    let count = Arc::new(AtomicUsize::new(0));
    let log = seen.clone();
    let h: Handler = Arc::new(move |req: Request<Incoming>| {
        let count = count.clone();
        let log = log.clone();
        Box::pin(async move {
            let attempt = req
                .headers()
                .get("x-hopwise-attempt")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned();
            let key = req
                .headers()
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            log[0]
                .lock()
                .unwrap()
                .push(format!("attempt={attempt} key={key} bytes={}", body.len()));
            let i = count.fetch_add(1, Ordering::SeqCst);
            let mut r = Response::new(Full::new(Bytes::from(format!("body={}", body.len()))));
            if i < n {
                *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            }
            r
        })
    });
    (h, seen)
}

fn hits(b: &Backend) -> usize {
    b.hits.load(Ordering::SeqCst)
}

const GATEWAY: &str =
    "{ timeout: 5s, retries: { count: 2, on: [connect-failure, gateway-error] } }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_goes_to_another_copy() {
    let bad = backend(status(503)).await;
    let good = backend(echo()).await;
    let (_f, a, _bs) = with_copies(GATEWAY, &[bad.addr, good.addr]).await;
    for _ in 0..10 {
        let (status, _, body) = get(a.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
        assert_eq!(status, 200, "{body}");
    }
    // Never two tries of one request on the bad copy: at most one per request.
    assert!(hits(&bad) <= 10, "{}", hits(&bad));
    assert_eq!(hits(&good), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_not_repeated_after_a_503_unless_it_carries_an_idempotency_key() {
    let (h, seen) = flaky(1);
    let app = backend(h).await;
    let (_f, a, _bs) = with_copies(GATEWAY, &[app.addr]).await;
    let port = a.bound.upstreams["b"];
    // The payment: the fee service may have acted on it; hopwise does not repeat it.
    let (status, _, _) = get(port, request("POST", "/penalty/pay", "b", b"12.5")).await;
    assert_eq!(
        status, 503,
        "the caller sees the 503, the payment is not collected twice"
    );
    assert_eq!(hits(&app), 1);
    let m = metrics(&a).await;
    assert!(
        m.contains(r#"hopwise_retries_skipped_total{service="b",route="b",reason="unsafe"} 1"#),
        "{m}"
    );

    // With an Idempotency-Key the server can deduplicate: the proxy retries, key unchanged.
    let (h, seen2) = flaky(1);
    let app2 = backend(h).await;
    let (_f2, a2, _bs2) = with_copies(GATEWAY, &[app2.addr]).await;
    let mut req = request("POST", "/penalty/pay", "b", b"12.5");
    req.headers_mut()
        .insert("idempotency-key", "\"8e03978e\"".parse().unwrap());
    let (status, _, body) = get(a2.bound.upstreams["b"], req).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "body=4");
    let log = seen2[0].lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "attempt=1 key=\"8e03978e\" bytes=4",
            "attempt=2 key=\"8e03978e\" bytes=4"
        ]
    );
    drop(seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_retried_for_any_method() {
    let good = backend(echo()).await;
    let (_f, a, _bs) = with_copies(GATEWAY, &[good.addr]).await;
    // Add a dead copy in front: a refused connection proves nothing was processed.
    let f = Fixture::new(&mesh(GATEWAY));
    let b = start(inbound(f.config("b"), good.addr)).await;
    let mut ac = outbound(f.config("a"), &[]);
    if let Some(Target::Mesh { endpoints, .. }) = ac.clusters.get_mut("b").map(|c| &mut c.target) {
        *endpoints = vec![closed_port(), b.bound.inbound.unwrap()];
    }
    let a2 = start(ac).await;
    for _ in 0..6 {
        let (status, _, body) =
            get(a2.bound.upstreams["b"], request("POST", "/pay", "b", b"x")).await;
        assert_eq!(status, 200, "{body}");
    }
    drop(a);
}

/// On a paused clock: the per-try timeouts run in virtual time, through real sockets.
#[tokio::test(start_paused = true)]
async fn the_timeout_trap_one_try_with_istios_list_three_with_reset() {
    let hang = backend(slow(Duration::from_secs(30))).await;
    let istio = "{ preset: istio, timeout: 5s, per_try_timeout: 300ms }";
    let (_f, a, _bs) = in_process_copies(istio, &[hang.addr]).await;
    let (status, headers, _) = get(a.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 504);
    assert_eq!(headers["x-hopwise-error"], "per-try-timeout");
    assert_eq!(hits(&hang), 1, "Istio's list cannot retry a timed-out try");

    let hang2 = backend(slow(Duration::from_secs(30))).await;
    let with_reset = "{ preset: istio, timeout: 5s, per_try_timeout: 300ms, retries: { on: [connect-failure, refused-stream, unavailable, cancelled, retriable-status-codes, reset] } }";
    let (_f2, a2, _bs2) = in_process_copies(with_reset, &[hang2.addr]).await;
    let (status, _, _) = get(a2.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 504);
    assert_eq!(hits(&hang2), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_budget_stops_retries_and_says_so() {
    let bad = backend(status(503)).await;
    let call = "{ timeout: 5s, retries: { count: 2, on: [gateway-error] }, budget: { ratio: 0.0, min_per_second: 0 } }";
    let (_f, a, _bs) = with_copies(call, &[bad.addr]).await;
    let (status, _, _) = get(a.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 503);
    assert_eq!(hits(&bad), 1);
    let m = metrics(&a).await;
    assert!(m.contains(r#"reason="budget"} 1"#), "{m}");
}

#[tokio::test(start_paused = true)]
async fn a_request_over_a_cap_fails_fast_with_the_caps_name() {
    let slow_app = backend(slow(Duration::from_millis(600))).await;
    let call = "{ timeout: 5s, limits: { max_requests: 1 } }";
    let (_f, a, _bs) = in_process_copies(call, &[slow_app.addr]).await;
    let port = a.upstreams["b"];
    let first = tokio::spawn(async move { get(port, request("GET", "/", "b", b"")).await });
    // On a paused clock this returns once everything is idle: the first request waits in the app.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (status, headers, _) = get(port, request("GET", "/", "b", b"")).await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-hopwise-limit"], "max_requests");
    assert_eq!(headers["x-hopwise-error"], "overflow");
    assert_eq!(first.await.unwrap().0, 200);
    let m = a.metrics();
    assert!(
        m.contains(r#"hopwise_limits_tripped_total{service="b",limit="max_requests"} 1"#),
        "{m}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_callers_deadline_travels_and_trims_the_timeout() {
    let seen = Arc::new(std::sync::Mutex::new(None::<String>));
    let log = seen.clone();
    let app = backend(Arc::new(move |req: Request<Incoming>| {
        let log = log.clone();
        Box::pin(async move {
            *log.lock().unwrap() = req
                .headers()
                .get("x-hopwise-timeout-ms")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Response::new(Full::new(Bytes::from_static(b"late")))
        })
    }))
    .await;
    let (_f, a, _bs) = in_process_copies("{ timeout: 5s }", &[app.addr]).await;
    let mut req = request("GET", "/", "b", b"");
    req.headers_mut()
        .insert("x-hopwise-timeout-ms", "300".parse().unwrap());
    let t = tokio::time::Instant::now();
    let (status, headers, _) = get(a.upstreams["b"], req).await;
    assert_eq!(status, 504);
    assert_eq!(headers["x-hopwise-error"], "deadline-exceeded");
    // Virtual time: the caller's 300 ms, not the route's 5 s nor the app's 1.5 s.
    assert!(
        t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_millis(1400),
        "{:?}",
        t.elapsed()
    );
    let sent: u64 = seen.lock().unwrap().clone().unwrap().parse().unwrap();
    assert!(sent <= 300 && sent > 0, "the next hop was told {sent} ms");

    // A caller who has already given up gets nothing started.
    let mut req = request("GET", "/", "b", b"");
    req.headers_mut()
        .insert("x-hopwise-timeout-ms", "0".parse().unwrap());
    let before = hits(&app);
    let (status, _, _) = get(a.upstreams["b"], req).await;
    assert_eq!(status, 504);
    assert_eq!(hits(&app), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_hop_retries_do_not_multiply_down_a_chain() {
    for (single_hop, expected) in [(true, 3), (false, 9)] {
        let retries = format!(
            "{{ timeout: 5s, retries: {{ count: 2, on: [gateway-error], single_hop: {single_hop} }} }}"
        );
        let f = Fixture::new(&format!(
            "mesh: {{ trust_domain: test.local }}
services:
  a: {{ calls: {{ b: {retries} }} }}
  b: {{ calls: {{ c: {retries} }} }}
  c: {{}}
"
        ));
        let c_app = backend(status(503)).await;
        let c = start(inbound(f.config("c"), c_app.addr)).await;
        let b_out = start(outbound(f.config("b"), &[("c", c.bound.inbound.unwrap())])).await;
        let b_in = start(inbound(f.config("b"), b_out.bound.upstreams["c"])).await;
        let a = start(outbound(
            f.config("a"),
            &[("b", b_in.bound.inbound.unwrap())],
        ))
        .await;
        let (status, headers, _) = get(a.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
        assert_eq!(status, 503);
        assert_eq!(hits(&c_app), expected, "single_hop: {single_hop}");
        if single_hop {
            assert_eq!(headers["x-hopwise-retries-exhausted"], "3");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_copy_that_keeps_failing_is_ejected() {
    let bad = backend(status(503)).await;
    let good = backend(echo()).await;
    let call = "{ timeout: 5s, retries: { count: 1, on: [gateway-error] }, balancer: round-robin }";
    let (_f, a, _bs) = in_process_copies(call, &[bad.addr, good.addr]).await;
    for _ in 0..30 {
        let (status, _, _) = get(a.upstreams["b"], request("GET", "/", "b", b"")).await;
        assert_eq!(status, 200);
    }
    let m = a.metrics();
    assert!(
        m.contains(r#"hopwise_ejections_total{service="b"} 1"#),
        "{m}"
    );
    // Five consecutive failures eject it for 30 s: it saw five requests and no more.
    assert_eq!(hits(&bad), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_larger_than_the_replay_buffer_is_streamed_and_not_retried() {
    let (h, seen) = flaky(1);
    let app = backend(h).await;
    let call =
        "{ timeout: 5s, retries: { count: 2, on: [gateway-error], max_replay_bytes: 1024 } }";
    let (_f, a, _bs) = with_copies(call, &[app.addr]).await;
    let big: &'static [u8] = Box::leak(vec![b'x'; 4096].into_boxed_slice());
    let (status, _, _) = get(a.bound.upstreams["b"], request("PUT", "/doc", "b", big)).await;
    assert_eq!(status, 503);
    assert_eq!(hits(&app), 1);
    assert_eq!(seen[0].lock().unwrap()[0], "attempt=1 key=- bytes=4096");
    let m = metrics(&a).await;
    assert!(m.contains(r#"reason="body-too-large"} 1"#), "{m}");
    // A small one is replayed whole.
    let (status, _, body) = get(
        a.bound.upstreams["b"],
        request("PUT", "/doc", "b", b"small"),
    )
    .await;
    assert_eq!((status.as_u16(), body.as_str()), (200, "body=5"));
}

/// A gRPC answer with the status in trailers after a message (not trailers-only).
struct GrpcReply {
    data: Option<Bytes>,
    status: Option<u8>,
}

impl http_body::Body for GrpcReply {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if let Some(d) = self.data.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(d))));
        }
        if let Some(code) = self.status.take() {
            let mut t = http::HeaderMap::new();
            t.insert("grpc-status", u16::from(code).into());
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::trailers(t))));
        }
        std::task::Poll::Ready(None)
    }
}

/// A unary gRPC app (h2c) whose `i`-th answer (from 0) is a message followed by trailers with
/// `grpc-status: status_of(i)`; counts the requests it receives.
async fn grpc_app(
    status_of: impl Fn(usize) -> u8 + Send + Sync + Copy + 'static,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let hits_seen = count.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // Nagle's wait is real time, which a paused clock would skip past to a timeout.
            let _ = tcp.set_nodelay(true);
            let count = count.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let i = count.fetch_add(1, Ordering::SeqCst);
                    async move {
                        // A unary server reads the whole request before it answers.
                        let _ = req.into_body().collect().await;
                        let reply = GrpcReply {
                            data: Some(Bytes::from_static(b"\0\0\0\0\x02hi")),
                            status: Some(status_of(i)),
                        };
                        let mut r = Response::new(reply);
                        r.headers_mut()
                            .insert("content-type", "application/grpc".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                        .await;
            });
        }
    });
    (app, hits_seen)
}

/// An HTTP/2 (prior knowledge) connection to `addr`, as a gRPC client opens one.
async fn h2c(addr: std::net::SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = tcp.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    send
}

/// One unary call to b: its HTTP status and its whole body with trailers.
async fn reserve(
    send: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>,
) -> (u16, http_body_util::Collected<Bytes>) {
    let req = Request::builder()
        .method("POST")
        .uri("http://b/pkg.Inventory/Reserve")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\x02ok")))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_grpc_copy_that_keeps_answering_unavailable_is_ejected() {
    // Every answer of the bad copy is HTTP 200 with grpc-status 14: a gateway failure all the
    // same (Envoy maps UNAVAILABLE to 503), so five in a row eject it.
    let (bad, bad_hits) = grpc_app(|_| 14).await;
    let (good, _) = grpc_app(|_| 0).await;
    let (_f, a, _bs) = in_process_copies_in(
        "mesh: { trust_domain: test.local }
services:
  a:
    calls:
      b: { timeout: 5s, idempotent: true, retries: { count: 1, on: [unavailable] }, balancer: round-robin }
  b: { protocol: grpc }
",
        &[bad, good],
    )
    .await;
    let mut send = h2c(a.upstreams["b"]).await;
    for _ in 0..30 {
        let (status, collected) = reserve(&mut send).await;
        assert_eq!(status, 200);
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    }
    let m = a.metrics();
    assert!(
        m.contains(r#"hopwise_ejections_total{service="b"} 1"#),
        "{m}"
    );
    assert_eq!(bad_hits.load(Ordering::SeqCst), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_unavailable_in_trailers_is_read_and_retried() {
    // The first two answers end with grpc-status 14 in trailers; the third with 0.
    let (app, hits_seen) = grpc_app(|i| if i < 2 { 14 } else { 0 }).await;
    let f = Fixture::new(
        "mesh: { trust_domain: test.local }
services:
  a:
    calls:
      b: { timeout: 5s, idempotent: true, retries: { count: 2, on: [unavailable] } }
  b: { protocol: grpc }
",
    );
    let b = start(inbound(f.config("b"), app)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let mut send = h2c(a.bound.upstreams["b"]).await;
    let (status, collected) = reserve(&mut send).await;
    assert_eq!(status, 200);
    let trailers = collected.trailers().cloned().unwrap();
    assert_eq!(
        trailers["grpc-status"], "0",
        "the third try's answer, intact"
    );
    assert_eq!(collected.to_bytes().as_ref(), b"\0\0\0\0\x02hi");
    assert_eq!(hits_seen.load(Ordering::SeqCst), 3);
    let m = metrics(&a).await;
    assert!(
        m.contains(r#"hopwise_retries_total{service="b",route="b",condition="unavailable"} 2"#),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_the_budget_refused_is_not_made_by_the_hop_above() {
    // c answers 503; b's proxy may retry but its budget is empty; a's proxy would retry, but
    // b marks its answer: the budget's refusal sheds the load for the whole chain.
    let f = Fixture::new(
        "mesh: { trust_domain: test.local }
services:
  a: { calls: { b: { timeout: 5s, retries: { count: 2, on: [gateway-error] } } } }
  b: { calls: { c: { timeout: 5s, retries: { count: 2, on: [gateway-error] }, budget: { ratio: 0.0, min_per_second: 0 } } } }
  c: {}
",
    );
    let c_app = backend(status(503)).await;
    let c = start(inbound(f.config("c"), c_app.addr)).await;
    let b_out = start(outbound(f.config("b"), &[("c", c.bound.inbound.unwrap())])).await;
    let b_in = start(inbound(f.config("b"), b_out.bound.upstreams["c"])).await;
    let a = start(outbound(
        f.config("a"),
        &[("b", b_in.bound.inbound.unwrap())],
    ))
    .await;
    let (status, headers, _) = get(a.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-hopwise-retries-exhausted"], "1");
    assert_eq!(hits(&c_app), 1);
}

#[tokio::test(start_paused = true)]
async fn a_slow_copy_among_fast_ones_gets_little_traffic_with_peak_ewma() {
    let slow_app = backend(slow(Duration::from_millis(150))).await;
    let fast1 = backend(echo()).await;
    let fast2 = backend(echo()).await;
    let call = "{ timeout: 5s, balancer: peak-ewma }";
    let (_f, a, _bs) = in_process_copies(call, &[slow_app.addr, fast1.addr, fast2.addr]).await;
    for _ in 0..60 {
        let (status, _, _) = get(a.upstreams["b"], request("GET", "/", "b", b"")).await;
        assert_eq!(status, 200);
    }
    // Once measured, the slow copy loses every two-way choice: it saw only the first few.
    assert!(
        hits(&slow_app) <= 6,
        "the slow copy got {} of 60",
        hits(&slow_app)
    );
    assert_eq!(hits(&slow_app) + hits(&fast1) + hits(&fast2), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_response_is_not_retried() {
    // The app sends headers and part of the body, then resets: the response has started, so
    // the proxy cannot retry (the caller may have seen bytes); it passes the reset on.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut tcp, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = tcp.read(&mut buf).await;
            let _ = tcp
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\npartial")
                .await;
            drop(tcp);
        }
    });
    let call = "{ timeout: 5s, retries: { count: 2, on: [reset, 5xx] } }";
    let (_f, a, _bs) = with_copies(call, &[app]).await;
    let tcp = tokio::net::TcpStream::connect(a.bound.upstreams["b"])
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = send
        .send_request(request("GET", "/", "b", b""))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "the response had started");
    assert!(
        resp.into_body().collect().await.is_err(),
        "the truncation reaches the caller"
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "one try: bytes had gone downstream"
    );
}
