//! Bad input and failures injected for real: refused, hung and reset upstreams, plaintext and
//! foreign certificates on the mTLS port, callers and servers with the wrong identity,
//! malformed and oversized requests, slow clients, and a graceful drain. None may crash or wedge
//! the proxy; each is answered fast with a reason.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::time::Duration;

use tokio::time::Instant;

use hopwise_proxy::config::Target;
use support::in_process::{self, with_endpoints};
use support::*;

const MESH: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls:
      b: { timeout: 300ms }
  d:
    calls:
      b: { timeout: 2s }
      c: { timeout: 2s }
  b: {}
  c: {}
";

fn point(
    mut c: hopwise_proxy::ProxyConfig,
    cluster: &str,
    to: std::net::SocketAddr,
) -> hopwise_proxy::ProxyConfig {
    if let Some(Target::Mesh { endpoints, .. }) = c.clusters.get_mut(cluster).map(|c| &mut c.target)
    {
        *endpoints = vec![to];
    }
    c
}

/// On a paused clock, served in process: "fast" is in the proxy's own time (its back-offs).
#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_a_fast_503_with_its_reason() {
    let f = Fixture::new(MESH);
    let a = in_process::serve(with_endpoints(f.config("a"), "b", vec![closed_port()])).await;
    let t = Instant::now();
    let (status, headers, _) = get(a.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-hopwise-error"], "connect-refused");
    assert!(t.elapsed() < Duration::from_secs(2));
    let m = a.metrics();
    assert!(m.contains(r#"hopwise_local_replies_total{direction="outbound",service="b",reason="connect-refused"} 1"#), "{m}");
}

/// On a paused clock, served in process: the 300 ms route timeout in virtual time.
#[tokio::test(start_paused = true)]
async fn a_hung_upstream_meets_the_route_timeout() {
    let f = Fixture::new(MESH);
    let app = backend(slow(Duration::from_secs(30))).await;
    let mut bc = f.config("b");
    bc.app = Some(app.addr);
    let b = in_process::serve(bc).await;
    let a = in_process::serve(with_endpoints(f.config("a"), "b", vec![b.inbound.unwrap()])).await;
    let (status, headers, _) = get(a.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 504);
    assert_eq!(headers["x-hopwise-error"], "route-timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_resets_is_a_503() {
    let f = Fixture::new(MESH);
    let b = start(inbound(f.config("b"), resetter().await)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let (status, headers, _) = get(a.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
    // b's proxy gets no answer from its app: it says so, and a passes that on.
    assert_eq!(status, 503, "{headers:?}");
    assert_eq!(headers["x-hopwise-error"], "reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_callers_get_trailers_only_errors() {
    let f = Fixture::new(MESH);
    let a = start(outbound(f.config("a"), &[("b", closed_port())])).await;
    let mut req = request("POST", "/pkg.Svc/Call", "b", b"");
    req.headers_mut()
        .insert("content-type", "application/grpc".parse().unwrap());
    let (status, headers, _) = get(a.bound.upstreams["b"], req).await;
    assert_eq!(status, 200);
    assert_eq!(headers["grpc-status"], "14");
    assert_eq!(headers["x-hopwise-error"], "connect-refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_with_no_copy_is_a_503_not_a_hang() {
    let f = Fixture::new(MESH);
    let a = start(outbound(f.config("a"), &[])).await;
    let (status, headers, _) = get(a.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-hopwise-error"], "no-endpoint");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_on_the_mtls_port_is_refused_at_the_handshake() {
    let f = Fixture::new(MESH);
    let app = backend(echo()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let out = raw(
        b.bound.inbound.unwrap(),
        b"GET / HTTP/1.1\r\nhost: b\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(!out.contains("HTTP/1.1 200"), "{out}");
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    let m = metrics(&b).await;
    assert!(
        m.contains(r#"hopwise_tls_handshakes_total{direction="inbound",result="failed"} 1"#),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused() {
    let ours = Fixture::new(MESH);
    let theirs = Fixture::new(MESH); // same names, a different CA
    let app = backend(echo()).await;
    let b = start(inbound(ours.config("b"), app.addr)).await;
    let a = start(outbound(
        theirs.config("a"),
        &[("b", b.bound.inbound.unwrap())],
    ))
    .await;
    let (status, headers, _) = get(a.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-hopwise-error"], "tls");
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_the_wrong_identity_is_refused() {
    let f = Fixture::new(MESH);
    let app = backend(echo()).await;
    // c's proxy answers where a expects b.
    let c = start(inbound(f.config("c"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", c.bound.inbound.unwrap())])).await;
    let (status, headers, body) = get(a.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(headers["x-hopwise-error"], "tls");
    assert!(
        body.contains("service/c") && body.contains("service/b"),
        "{body}"
    );
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_may_not_call_is_refused_with_403() {
    let f = Fixture::new(MESH);
    let app = backend(echo()).await;
    let mut bc = inbound(f.config("b"), app.addr);
    bc.allowed_callers = vec![f.mesh.identity("a")];
    let b = start(bc).await;
    // (The mesh file's `allow` sets exactly this; see authorization_rules_from_the_mesh_file.)
    let d = start(point(
        outbound(f.config("d"), &[]),
        "b",
        b.bound.inbound.unwrap(),
    ))
    .await;
    let (status, headers, body) = get(d.bound.upstreams["b"], request("GET", "/", "b", b"")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(headers["x-hopwise-error"], "forbidden");
    assert!(body.contains("spiffe://test.local/service/d"), "{body}");
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_requests() {
    let f = Fixture::new(MESH);
    let a = start(outbound(f.config("a"), &[("b", closed_port())])).await;
    let port = a.bound.upstreams["b"];
    let out = raw(port, b"THIS IS NOT HTTP\r\n\r\n", Duration::from_secs(5)).await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    let mut big = b"GET / HTTP/1.1\r\nhost: b\r\nx-big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 100 * 1024));
    big.extend_from_slice(b"\r\n\r\n");
    let out = raw(port, &big, Duration::from_secs(5)).await;
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    // The proxy still serves after both.
    let (status, _, _) = get(port, request("GET", "/", "b", b"")).await;
    assert_eq!(status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_cannot_hold_a_connection() {
    let f = Fixture::new(MESH);
    let mut c = outbound(f.config("a"), &[("b", closed_port())]);
    c.timeouts.header_read = Duration::from_millis(300);
    let a = start(c).await;
    let t = Instant::now();
    let out = raw(
        a.bound.upstreams["b"],
        b"GET / HTTP/1.1\r\nhost: b\r\nx-slow:",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "held for {:?}: {out}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_requests_in_flight() {
    let f = Fixture::new(MESH);
    let app = backend(slow(Duration::from_millis(800))).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let mut ac = outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())]);
    if let Some(cluster) = ac.clusters.get_mut("b") {
        for r in &mut cluster.routes {
            r.policy.timeout = Some(hopwise_model::Dur::from_millis(5_000));
        }
    }
    let a = start(ac).await;
    let port = a.bound.upstreams["b"];
    let in_flight = tokio::spawn(async move { get(port, request("GET", "/", "b", b"")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.shutdown();
    let (status, _, body) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    tokio::task::spawn_blocking(move || a.wait()).await.unwrap();
    assert!(
        tokio::net::TcpStream::connect(port).await.is_err(),
        "still accepting after drain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_rules_from_the_mesh_file() {
    let f = Fixture::new(
        "
mesh: { name: t, trust_domain: test.local }
services:
  loan: { calls: { fee: { timeout: 2s } } }
  audit: { calls: { fee: { timeout: 2s }, vault: { timeout: 2s } } }
  fee:
    allow: [loan, audit]
    allow_paths: { /penalty/pay: [loan] }
  vault: { allow: none }
",
    );
    let app = backend(echo()).await;
    let fee = start(inbound(f.config("fee"), app.addr)).await;
    let vault = start(inbound(f.config("vault"), app.addr)).await;
    let loan = start(outbound(
        f.config("loan"),
        &[("fee", fee.bound.inbound.unwrap())],
    ))
    .await;
    let audit = start(outbound(
        f.config("audit"),
        &[
            ("fee", fee.bound.inbound.unwrap()),
            ("vault", vault.bound.inbound.unwrap()),
        ],
    ))
    .await;
    let to = |p: &hopwise_proxy::Running, svc: &str| p.bound.upstreams[svc];
    // Both may read balances; only loan may pay.
    assert_eq!(
        get(
            to(&loan, "fee"),
            request("GET", "/penalty/U-41", "fee", b"")
        )
        .await
        .0,
        200
    );
    assert_eq!(
        get(
            to(&audit, "fee"),
            request("GET", "/penalty/U-41", "fee", b"")
        )
        .await
        .0,
        200
    );
    assert_eq!(
        get(
            to(&loan, "fee"),
            request("POST", "/penalty/pay", "fee", b"1")
        )
        .await
        .0,
        200
    );
    let (status, headers, body) = get(
        to(&audit, "fee"),
        request("POST", "/penalty/pay", "fee", b"1"),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(headers["x-hopwise-error"], "forbidden");
    assert!(body.contains("spiffe://test.local/service/audit"), "{body}");
    // `allow: none` refuses everyone.
    assert_eq!(
        get(to(&audit, "vault"), request("GET", "/", "vault", b""))
            .await
            .0,
        403
    );
    // Refusals are counted.
    let m = metrics(&fee).await;
    assert!(
        m.contains(
            r#"hopwise_local_replies_total{direction="inbound",service="fee",reason="forbidden"} 1"#
        ),
        "{m}"
    );
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = Fixture::new(MESH);
    let app = backend(echo()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let mut c = outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())]);
    c.timeouts.header_read = Duration::from_millis(300);
    let a = start(c).await;
    let mut tcp = tokio::net::TcpStream::connect(a.bound.upstreams["b"])
        .await
        .unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nhost: b\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Then nothing: the connection must not be held open forever.
    let t = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert_eq!(closed, Ok(true), "held for {:?}", t.elapsed());
}
