//! The admin endpoint, and certificates swapped on disk while the proxy runs.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::time::Duration;

use support::*;

const MESH: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a: { calls: { b: { timeout: 2s } } }
  b: {}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_answers_ready_live_config_and_nothing_else() {
    let f = Fixture::new(MESH);
    let a = start(outbound(f.config("a"), &[("b", closed_port())])).await;
    let admin = a.bound.admin.unwrap();
    let host = &admin.to_string();
    let (s, _, body) = get(admin, request("GET", "/ready", host, b"")).await;
    assert_eq!((s.as_u16(), body.trim()), (200, "ready"));
    let (s, _, _) = get(admin, request("GET", "/live", host, b"")).await;
    assert_eq!(s, 200);
    let (s, headers, body) = get(admin, request("GET", "/config", host, b"")).await;
    assert_eq!(s, 200);
    assert_eq!(headers["content-type"], "application/json");
    let config: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(config["service"], "a");
    assert_eq!(config["identity"], "spiffe://test.local/service/a");
    assert_eq!(
        config["clusters"]["b"]["routes"][0]["policy"]["timeout"],
        "2s"
    );
    let (s, _, _) = get(admin, request("GET", "/nope", host, b"")).await;
    assert_eq!(s, 404);
    let (s, _, _) = get(admin, request("POST", "/metrics", host, b"")).await;
    assert_eq!(s, 405);
    // A page that re-bound its own name to 127.0.0.1 reads nothing (DNS rebinding): not the
    // topology, not the live requests, not even the metrics.
    for path in ["/config", "/tap", "/metrics", "/ready"] {
        let mut req = request("GET", path, "rebind.example:80", b"");
        req.headers_mut()
            .insert("origin", "http://rebind.example".parse().unwrap());
        let (s, _, body) = get(admin, req).await;
        assert_eq!(s, 403, "{path}: {body}");
        assert!(body.contains("answers only to Host 127.0.0.1"), "{body}");
        assert!(!body.contains("spiffe://"), "{body}");
    }
    // Its own port by another loopback name is still itself.
    let (s, _, _) = get(
        admin,
        request("GET", "/live", &format!("localhost:{}", admin.port()), b""),
    )
    .await;
    assert_eq!(s, 200);
    // While draining, /ready says so (load balancers stop sending).
    a.shutdown();
    assert!(!a.state.ready());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_on_disk_without_a_restart() {
    let f = Fixture::new(MESH);
    let app = backend(echo()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let port = a.bound.upstreams["b"];
    let (status, _, _) = get(port, request("GET", "/before", "b", b"")).await;
    assert_eq!(status, 200);

    // A whole new CA and new certificates for everyone, written over the old files.
    hopwise_proxy::certs::write_dev_certs(&f.mesh, &f.certs()).unwrap();
    // A proxy started now knows only the new CA: it can reach b once b has picked up its new
    // certificate from disk (the proxies look every 2 s) — with no restart of b.
    let a2 = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let mut reached = false;
    for _ in 0..100 {
        // Traffic through the old proxy never stops meanwhile.
        let (status, _, body) = get(port, request("GET", "/old", "b", b"")).await;
        assert_eq!(status, 200, "{body}");
        let (status, _, _) = get(a2.bound.upstreams["b"], request("GET", "/new", "b", b"")).await;
        if status == 200 {
            reached = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reached, "b never presented its new certificate");
}
