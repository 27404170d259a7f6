//! A new configuration put in force while requests run: new requests follow it at once, a
//! request in flight finishes under the one it started with, and what the proxy learnt about
//! the upstream's copies is kept.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use hopwise_model::Mesh;
use hopwise_proxy::ProxyConfig;
use hopwise_proxy::config::Target;
use support::*;

fn mesh(timeout: &str) -> String {
    format!(
        "mesh: {{ trust_domain: test.local }}
services:
  a:
    calls:
      b: {{ timeout: {timeout} }}
  b: {{}}
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_keeps_its_configuration_and_new_ones_take_the_new_one() {
    // b's app counts requests as they arrive and answers each after 600 ms.
    let app = backend(slow(Duration::from_millis(600))).await;
    let f = Fixture::new(&mesh("5s"));
    let b = start(inbound(f.config("b"), app.addr)).await;
    let b_addr = b.bound.inbound.unwrap();
    let a = start(outbound(f.config("a"), &[("b", b_addr)])).await;
    let port = a.bound.upstreams["b"];
    let before = a.state.live();

    // One request under the 5 s timeout, in flight at the app.
    let first = tokio::spawn(get(port, request("GET", "/", "b", b"")));
    while app.hits.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // The mesh file now says 200 ms: derived and checked as the control plane's session does.
    let new_mesh = Mesh::from_yaml(&mesh("200ms")).unwrap();
    let mut new =
        ProxyConfig::from_mesh(&new_mesh, "a", 0, f.dir.path(), Some(&f.certs())).unwrap();
    if let Some(Target::Mesh { endpoints, .. }) = new.clusters.get_mut("b").map(|c| &mut c.target) {
        *endpoints = vec![b_addr];
    }
    let next = hopwise_proxy::live::next_config(&a.state.config(), &f.config("a"), new).unwrap();
    a.state.replace(next).unwrap();

    // A new request follows the new timeout…
    let (status, headers, _) = get(port, request("GET", "/", "b", b"")).await;
    assert_eq!(status, 504);
    assert_eq!(headers["x-hopwise-error"], "route-timeout");
    // …while the one in flight finishes under the old one.
    let (status, _, body) = first.await.unwrap();
    assert_eq!((status.as_u16(), body.as_str()), (200, "slow"));

    // What a knows of b's copies (load, latency, ejections), its budget and caps are the same
    // objects: only the route's timeout changed.
    let after = a.state.live();
    assert_eq!(
        after.clusters["b"].kept_from(&before.clusters["b"]),
        [true, true, true]
    );
    assert_eq!(
        after.config.clusters["b"].routes[0]
            .policy
            .timeout
            .map(|t| t.get()),
        Some(Duration::from_millis(200))
    );
}
