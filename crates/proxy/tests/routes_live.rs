//! A weighted split changed while requests run (issue 29: "a split changed under load fails no
//! request"): four clients on kept-alive connections through the caller's proxy, the split moved
//! from all-to-v1 to all-to-v2 as the control plane's session puts a new mesh file in force
//! (`live::next_config`, then `State::replace`). Every request is answered 200, and after the
//! change none reaches v1.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hopwise_model::Mesh;
use hopwise_proxy::ProxyConfig;
use hopwise_proxy::config::Target;
use http::StatusCode;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use support::*;

fn mesh(v1: u32, v2: u32) -> String {
    format!(
        "mesh: {{ name: t, trust_domain: test.local }}
services:
  a:
    calls: {{ b: {{}}, b-v1: {{}}, b-v2: {{}} }}
  b:
    routes:
      canary:
        rules:
          - backends: [{{ service: b-v1, weight: {v1} }}, {{ service: b-v2, weight: {v2} }}]
  b-v1: {{}}
  b-v2: {{}}
"
    )
}

/// `a`'s configuration under `yaml`, its clusters pointed at the running copies.
fn config_a(yaml: &str, f: &Fixture, copies: &[(&str, std::net::SocketAddr)]) -> ProxyConfig {
    let m = Mesh::from_yaml(yaml).unwrap();
    let mut c = ProxyConfig::from_mesh(&m, "a", 0, f.dir.path(), Some(&f.certs())).unwrap();
    for (name, addr) in copies {
        if let Some(Target::Mesh { endpoints, .. }) =
            c.clusters.get_mut(*name).map(|c| &mut c.target)
        {
            *endpoints = vec![*addr];
        }
    }
    c
}

/// Requests on one kept-alive connection until `stop`; every status seen.
async fn client(port: std::net::SocketAddr, stop: Arc<AtomicBool>) -> Vec<StatusCode> {
    let tcp = tokio::net::TcpStream::connect(port).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut statuses = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        send.ready().await.unwrap();
        let resp = send
            .send_request(request("GET", "/x", "b", b""))
            .await
            .unwrap();
        statuses.push(resp.status());
        resp.into_body().collect().await.unwrap();
    }
    statuses
}

/// Waits for `done`, failing (not hanging) after 10 s.
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_changed_under_load_fails_no_request() {
    let f = Fixture::new(&mesh(100, 0));
    let v1 = backend(echo()).await;
    let v2 = backend(echo()).await;
    let p1 = start(inbound(f.config("b-v1"), v1.addr)).await;
    let p2 = start(inbound(f.config("b-v2"), v2.addr)).await;
    let copies = [
        ("b", closed_port()),
        ("b-v1", p1.bound.inbound.unwrap()),
        ("b-v2", p2.bound.inbound.unwrap()),
    ];
    let a = start(outbound(f.config("a"), &copies)).await;
    let port = a.bound.upstreams["b"];

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| tokio::spawn(client(port, stop.clone())))
        .collect();
    // Load under the first split until v1 has had a good share of it.
    until("v1 has 200", || v1.hits.load(Ordering::SeqCst) >= 200).await;
    assert_eq!(v2.hits.load(Ordering::SeqCst), 0);
    let next = config_a(&mesh(0, 100), &f, &copies);
    let next = hopwise_proxy::live::next_config(&a.state.config(), &f.config("a"), next).unwrap();
    a.state.replace(next).unwrap();
    // Requests in flight at the change finish under the split they started with; after them,
    // v1 gets nothing more.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let v1_after_change = v1.hits.load(Ordering::SeqCst);
    let v2_before = v2.hits.load(Ordering::SeqCst);
    until("v2 has 200 more", || {
        v2.hits.load(Ordering::SeqCst) >= v2_before + 200
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut statuses = Vec::new();
    for c in clients {
        statuses.extend(c.await.unwrap());
    }
    assert!(statuses.len() >= 400, "{}", statuses.len());
    let failed: Vec<_> = statuses.iter().filter(|s| **s != StatusCode::OK).collect();
    assert!(
        failed.is_empty(),
        "{} of {} failed: {failed:?}",
        failed.len(),
        statuses.len()
    );
    assert_eq!(v1.hits.load(Ordering::SeqCst), v1_after_change);
    assert_eq!(
        v1.hits.load(Ordering::SeqCst) + v2.hits.load(Ordering::SeqCst),
        statuses.len()
    );
}
