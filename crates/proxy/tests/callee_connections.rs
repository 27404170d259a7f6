//! `limits.max_connections` caps the connections from a proxy to a callee, all workers
//! together: the callee (the test's own backend, which counts the connections it holds at once)
//! never sees more; requests beyond wait for a connection, as many as `max_pending` allows, and
//! the others are refused with 503 and `x-hopwise-limit: max_pending`.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use support::*;
use tokio::net::TcpListener;

/// An HTTP/1.1 callee that holds each request `hold` and counts its connections.
struct Callee {
    addr: SocketAddr,
    /// The most connections it held at once.
    most: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
}

async fn callee(hold: Duration) -> Callee {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (most, accepted) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let open = Arc::new(AtomicUsize::new(0));
    let (m, a) = (most.clone(), accepted.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let now = open.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            let open = open.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req| async move {
                    tokio::time::sleep(hold).await;
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                        b"held",
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Callee {
        addr,
        most,
        accepted,
    }
}

fn mesh(max_pending: u32) -> String {
    format!(
        "
mesh: {{ name: t, trust_domain: test.local }}
services:
  a:
    calls:
      b: {{ timeout: 5s, retries: {{ count: 0 }}, limits: {{ max_connections: 2, max_pending: {max_pending} }} }}
  b: {{}}
"
    )
}

/// `a`'s proxy (plain text: the callee is the test's backend itself), with `workers` workers.
async fn caller(f: &Fixture, to: SocketAddr, workers: usize) -> hopwise_proxy::Running {
    let mut c = outbound(f.config("a"), &[("b", to)]);
    c.plaintext = true;
    c.workers = workers;
    start(c).await
}

/// Sends `n` requests at once, each on its own connection; their statuses and limit headers.
async fn burst(port: SocketAddr, n: usize) -> Vec<(u16, String)> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            tokio::spawn(async move {
                let (status, headers, _) = get(port, request("GET", "/", "b", b"")).await;
                let limit = headers
                    .get("x-hopwise-limit")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned();
                (status.as_u16(), limit)
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_max_connections_wait_for_a_connection() {
    let f = Fixture::new(&mesh(10));
    let b = callee(Duration::from_millis(300)).await;
    let a = caller(&f, b.addr, 1).await;
    let answers = burst(a.bound.upstreams["b"], 6).await;
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
    let most = b.most.load(Ordering::SeqCst);
    assert!(most <= 2, "the callee held {most} connections at once");
    // The waiting requests took the connections as they finished: none was closed and opened again.
    assert_eq!(b.accepted.load(Ordering::SeqCst), 2);
}

/// With two workers the cap holds for both together. Seen from the proxy: a connection one
/// worker closes to make room for the other may still be open for a moment at the callee's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_for_all_workers_together() {
    let f = Fixture::new(&mesh(10));
    let b = callee(Duration::from_millis(300)).await;
    let a = caller(&f, b.addr, 2).await;
    let live = a.state.live();
    let connections = live.clusters["b"].connections.clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let over = done.clone();
    let watch = tokio::spawn(async move {
        let mut most = 0;
        while !over.load(Ordering::SeqCst) {
            most = most.max(connections.open());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        most
    });
    let answers = burst(a.bound.upstreams["b"], 6).await;
    done.store(true, Ordering::SeqCst);
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
    let most = watch.await.unwrap();
    assert!(
        (1..=2).contains(&most),
        "the proxy held {most} connections at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_pending_the_waiting_ones_are_refused() {
    let f = Fixture::new(&mesh(1));
    let b = callee(Duration::from_millis(300)).await;
    let a = caller(&f, b.addr, 1).await;
    let answers = burst(a.bound.upstreams["b"], 6).await;
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<_> = answers.iter().filter(|(s, _)| *s == 503).collect();
    // Two on connections, one waiting: three served, three refused.
    assert_eq!(ok, 3, "{answers:?}");
    assert_eq!(refused.len(), 3, "{answers:?}");
    assert!(
        refused.iter().all(|(_, l)| l == "max_pending"),
        "{answers:?}"
    );
    let most = b.most.load(Ordering::SeqCst);
    assert!(most <= 2, "the callee held {most} connections at once");
}
