//! Issue 13: the seed's chain — frontend → checkout → pricing → inventory, a proxy per service —
//! with real apps in the middle (support/middle.rs) that carry nothing, trace context (W3C, B3,
//! an OpenTelemetry-style child span) or hopwise's headers, over HTTP/1.1 and gRPC, with
//! inventory down, answering 503 / UNAVAILABLE, or hanging, and every layer's list made to retry
//! it (the seed's "common change"). Per row, `hopwise check`'s prediction for the same mesh file
//! beside the attempts that reached inventory (counted by pricing's proxy, which makes them) and
//! those that started after the client gave up: equal. With trace context, at most 3 attempts,
//! and none late. The proxies are served in process on a paused clock (real sockets, virtual
//! time), so the hanging rows take no real time.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hopwise_analyze::Failure;
use hopwise_model::Mesh;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::in_process::{self, with_endpoints};
use support::middle::{Passes, middle};
use support::{Fixture, backend, closed_port};
use tokio::time::Instant;

/// How long the client waits (and tells frontend's proxy it waits).
const CLIENT_WAIT: Duration = Duration::from_millis(1000);

fn mesh(grpc: bool, passes: Passes, inventory: SocketAddr) -> String {
    let protocol = if grpc { "grpc" } else { "http" };
    let carries = passes.carries();
    format!(
        "mesh: {{ trust_domain: test.local }}
defaults:
  timeout: 5s
  per_try_timeout: 300ms
  retries:
    count: 2
    on: [connect-failure, refused-stream, reset-before-request, gateway-error, unavailable]
    backoff: {{ strategy: fixed, base: 7ms }}
  # check's count assumes every retry the policy allows is made; the cap on retries in flight
  # at once (3 by default) would refuse some of the hanging rows' overlapping ones
  limits: {{ max_retries: 1000 }}
services:
  frontend:
    entry: {{ timeout: 1s }}
    # the client calls frontend's proxy itself, with its deadline
    carries: [hopwise-headers, grpc-deadline]
    calls: {{ checkout: {{ idempotent: true }} }}
  checkout:
    protocol: {protocol}
    carries: {carries}
    calls: {{ pricing: {{ idempotent: true }} }}
  pricing:
    protocol: {protocol}
    carries: {carries}
    calls: {{ inventory: {{ idempotent: true }} }}
  inventory:
    protocol: {protocol}
    external: {{ address: \"{inventory}\" }}
"
    )
}

/// Inventory failing as the row says, recording when each request reached it.
async fn inventory(failure: Failure, arrivals: Arc<Mutex<Vec<Instant>>>) -> SocketAddr {
    if failure == Failure::Down {
        return closed_port();
    }
    let b = backend(Arc::new(move |_req: Request<Incoming>| {
        arrivals.lock().unwrap().push(Instant::now());
        Box::pin(async move {
            match failure {
                Failure::Hang => std::future::pending().await,
                Failure::Unavailable => {
                    let mut r = Response::new(Full::new(Bytes::new()));
                    let h = r.headers_mut();
                    h.insert("content-type", "application/grpc".parse().unwrap());
                    h.insert("grpc-status", "14".parse().unwrap());
                    r
                }
                _ => {
                    let mut r = Response::new(Full::new(Bytes::from_static(b"no stock")));
                    *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                    r
                }
            }
        })
    }))
    .await;
    b.addr
}

/// The client's request to frontend's local port for checkout: its deadline, a trace.
async fn checkout(addr: SocketAddr, grpc: bool, passes: Passes) {
    let mut req = Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/shop.Checkout/Buy"))
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    let h = req.headers_mut();
    if grpc {
        h.insert("content-type", "application/grpc".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        h.insert("grpc-timeout", "1000m".parse().unwrap());
    } else {
        h.insert("x-hopwise-timeout-ms", "1000".parse().unwrap());
    }
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    if passes == Passes::B3 {
        h.insert("b3", format!("{trace}-00f067aa0ba902b7-1").parse().unwrap());
    } else {
        let tp = format!("00-{trace}-00f067aa0ba902b7-01");
        h.insert("traceparent", tp.parse().unwrap());
    }
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Nagle's wait is real time, which the paused clock would skip past to a timeout.
    tcp.set_nodelay(true).unwrap();
    let io = TokioIo::new(tcp);
    let call = async move {
        if grpc {
            let (mut s, c) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(c);
            let r = s.send_request(req).await.unwrap();
            let _ = r.into_body().collect().await;
        } else {
            let (mut s, c) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(c);
            let r = s.send_request(req).await.unwrap();
            let _ = r.into_body().collect().await;
        }
    };
    // The client gives up at its deadline and goes away (its connection closes).
    let _ = tokio::time::timeout(CLIENT_WAIT, call).await;
}

/// Tries pricing's proxy sent toward inventory.
fn tries_at_inventory(metrics: &str) -> u64 {
    metrics
        .lines()
        .find(|l| {
            l.starts_with("hopwise_tries_total{")
                && l.contains("direction=\"outbound\"")
                && l.contains("service=\"inventory\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One row: the chain built, one checkout, what reached inventory (all, and late).
/// Also: the calls the middle apps' proxies ended because their request had gone.
async fn run(grpc: bool, passes: Passes, failure: Failure) -> (u64, u64, usize, Mesh) {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let inv = inventory(failure, arrivals.clone()).await;
    let f = Fixture::new(&mesh(grpc, passes, inv));
    let pricing_app = middle(passes, grpc).await;
    let mut pc = f.config("pricing");
    pc.app = Some(pricing_app.addr);
    let pricing = in_process::serve(pc).await;
    pricing_app.calls(pricing.upstreams["inventory"]);
    let checkout_app = middle(passes, grpc).await;
    let mut cc = with_endpoints(
        f.config("checkout"),
        "pricing",
        vec![pricing.inbound.unwrap()],
    );
    cc.app = Some(checkout_app.addr);
    let checkout_proxy = in_process::serve(cc).await;
    checkout_app.calls(checkout_proxy.upstreams["pricing"]);
    let fc = with_endpoints(
        f.config("frontend"),
        "checkout",
        vec![checkout_proxy.inbound.unwrap()],
    );
    let frontend = in_process::serve(fc).await;

    let start = Instant::now();
    checkout(frontend.upstreams["checkout"], grpc, passes).await;
    // Everything still running for nobody runs out (virtual time).
    tokio::time::sleep(Duration::from_secs(30)).await;
    let attempts = tries_at_inventory(&pricing.metrics());
    let late = arrivals
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.duration_since(start) >= CLIENT_WAIT)
        .count() as u64;
    let ended = [&checkout_app, &pricing_app]
        .iter()
        .map(|m| m.caller_gone.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    (attempts, late, ended, f.mesh)
}

async fn table(grpc: bool, failures: [Failure; 3], passes: &[Passes]) {
    let mut report = Vec::new();
    let mut wrong = Vec::new();
    for &p in passes {
        for failure in failures {
            let (attempts, late, ended, mesh) = run(grpc, p, failure).await;
            let predicted =
                hopwise_analyze::fanout::row(&mesh, "frontend", "inventory", failure).unwrap();
            let line = format!(
                "{p:?} {failure:?}: counted {attempts} ({late} late), check {} ({} late)",
                predicted.attempts, predicted.late
            );
            if attempts != predicted.attempts
                || (failure == Failure::Hang && late != predicted.late)
            {
                wrong.push(line.clone());
            }
            let traced = matches!(p, Passes::W3c | Passes::B3 | Passes::Otel);
            if traced && (attempts > 3 || late > 0) {
                wrong.push(format!("{line}: trace context allows at most 3, none late"));
            }
            // A hang: each try the caller gave up on ended the calls made for it, below too.
            if traced && failure == Failure::Hang && ended == 0 {
                wrong.push(format!("{line}: no call ended when its caller went away"));
            }
            report.push(line);
        }
    }
    assert!(
        wrong.is_empty(),
        "check disagrees with the proxies:\n{}\nall rows:\n{}",
        wrong.join("\n"),
        report.join("\n")
    );
    // The default (nothing carried) is the 27.
    assert!(report[0].contains("counted 27"), "{}", report.join("\n"));
}

#[tokio::test(start_paused = true)]
async fn http_chain_check_predicts_what_the_proxies_do() {
    let failures = [Failure::Down, Failure::Http503, Failure::Hang];
    let passes = [
        Passes::Nothing,
        Passes::W3c,
        Passes::B3,
        Passes::Otel,
        Passes::Hopwise,
    ];
    table(false, failures, &passes).await;
}

#[tokio::test(start_paused = true)]
async fn grpc_chain_check_predicts_what_the_proxies_do() {
    let failures = [Failure::Down, Failure::Unavailable, Failure::Hang];
    let passes = [
        Passes::Nothing,
        Passes::W3c,
        Passes::B3,
        Passes::Hopwise,
        Passes::GrpcDeadline,
    ];
    table(true, failures, &passes).await;
}
