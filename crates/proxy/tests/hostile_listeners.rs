//! Hostile peers on every listener, with real sockets and real TLS: connections that never
//! finish a request head (silent, part of the HTTP/2 preface, a TLS handshake then nothing, an
//! HTTP/1 keep-alive connection left idle, an HTTP/2 connection left idle) are closed within
//! a bound after a short header-read timeout; a slow but live client is still served; each
//! listener holds a capped number of connections and refuses the rest at once; the outbound
//! and admin listeners bind loopback only unless a flag allows more.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use hopwise_proxy::tls::{CertFiles, CertStore};
use hopwise_proxy::{ProxyConfig, Running};
use rustls_pki_types::ServerName;
use support::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MESH: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls:
      b: { timeout: 2s }
  b: {}
";

const HEADER_READ: Duration = Duration::from_millis(300);
/// Generous: the proxy closes after 300 ms; anything under this is the behaviour asked for.
const CLOSED_WITHIN: Duration = Duration::from_secs(3);

fn short(mut c: ProxyConfig) -> ProxyConfig {
    c.timeouts.header_read = HEADER_READ;
    c.timeouts.idle = Duration::from_millis(500);
    c
}

/// A caller (`a`, every outbound listener) in front of a callee (`b`, inbound) in front of an
/// echoing app, all with the short timeouts.
async fn pair(f: &Fixture) -> (Running, Running) {
    let app = backend(echo()).await;
    let b = start(short(inbound(f.config("b"), app.addr))).await;
    let a = start(short(outbound(
        f.config("a"),
        &[("b", b.bound.inbound.unwrap())],
    )))
    .await;
    (a, b)
}

/// Reads until EOF or a reset; panics if the peer keeps the connection past `CLOSED_WITHIN`.
async fn closed<S: AsyncRead + Unpin>(mut s: S, what: &str) -> Duration {
    let t = Instant::now();
    let mut sink = Vec::new();
    match tokio::time::timeout(CLOSED_WITHIN, s.read_to_end(&mut sink)).await {
        Ok(_) => t.elapsed(),
        Err(_) => panic!("{what}: still open after {CLOSED_WITHIN:?}"),
    }
}

/// Whether the peer keeps the connection open (no EOF, no bytes) for `d`.
async fn stays_open(s: &mut TcpStream, d: Duration) -> bool {
    let mut b = [0u8; 1];
    tokio::time::timeout(d, s.read(&mut b)).await.is_err()
}

fn every_listener(a: &Running, b: &Running) -> Vec<(&'static str, SocketAddr)> {
    vec![
        ("per-upstream port", a.bound.upstreams["b"]),
        ("HTTP-proxy port", a.bound.outbound.unwrap()),
        ("admin", a.bound.admin.unwrap()),
        ("inbound", b.bound.inbound.unwrap()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_on_every_listener() {
    let f = Fixture::new(MESH);
    let (a, b) = pair(&f).await;
    for (what, addr) in every_listener(&a, &b) {
        let tcp = TcpStream::connect(addr).await.unwrap();
        closed(tcp, what).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_of_the_http2_preface_is_closed() {
    let f = Fixture::new(MESH);
    let (a, _b) = pair(&f).await;
    for addr in [
        a.bound.upstreams["b"],
        a.bound.outbound.unwrap(),
        a.bound.admin.unwrap(),
    ] {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        closed(tcp, "half a preface").await;
        // The whole preface, then no SETTINGS and no request.
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        closed(tcp, "a preface and nothing").await;
    }
}

/// A mesh member's TLS client (the caller `a`'s certificate from the test's CA).
fn tls_client(f: &Fixture, alpn: &[u8]) -> tokio_rustls::TlsConnector {
    let store = CertStore::open(CertFiles::in_dir(&f.certs(), "a")).unwrap();
    let config = store.client_config(&f.mesh.identity("b"), alpn).unwrap();
    tokio_rustls::TlsConnector::from(config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_peer_that_handshakes_then_sends_nothing_is_closed() {
    let f = Fixture::new(MESH);
    let (_a, b) = pair(&f).await;
    let addr = b.bound.inbound.unwrap();
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::IpAddress(addr.ip().into());
        let tls = tls_client(&f, alpn).connect(name, tcp).await.unwrap();
        closed(tls, "TLS and nothing").await;
    }
    // The same client, asking something, is answered.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::IpAddress(addr.ip().into());
    let mut tls = tls_client(&f, b"http/1.1")
        .connect(name, tcp)
        .await
        .unwrap();
    tls.write_all(b"GET /x HTTP/1.1\r\nhost: b\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tls.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_and_a_slow_live_client_is_served() {
    let f = Fixture::new(MESH);
    let (a, _b) = pair(&f).await;
    let port = a.bound.upstreams["b"];
    // A slow client: its head in pieces, done before the header-read timeout.
    let mut tcp = TcpStream::connect(port).await.unwrap();
    for piece in [&b"GET /slow HT"[..], b"TP/1.1\r\nhost: b\r\n", b"\r\n"] {
        tcp.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let mut buf = vec![0u8; 4096];
    let n = tcp.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Then kept alive and idle: closed.
    closed(tcp, "idle keep-alive").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_sent_away() {
    let f = Fixture::new(MESH);
    let (a, _b) = pair(&f).await;
    let tcp = TcpStream::connect(a.bound.upstreams["b"]).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::builder()
        .uri("http://b/")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    drop(resp);
    // Idle 500 ms (seen within two periods), then GOAWAY: the client's connection ends.
    let t = Instant::now();
    tokio::time::timeout(CLOSED_WITHIN, conn)
        .await
        .expect("an idle HTTP/2 connection is still open")
        .unwrap()
        .ok();
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_listener_refuses_at_once_and_accepts_again_when_places_free() {
    let f = Fixture::new(MESH);
    let app = backend(echo()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let mut c = outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())]);
    c.listeners.max_connections = 5;
    let a = start(c).await;
    let port = a.bound.upstreams["b"];
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(TcpStream::connect(port).await.unwrap());
    }
    // Accepted in order: the first five hold places, the rest are closed at once.
    for tcp in held.drain(5..) {
        closed(tcp, "past the cap").await;
    }
    for tcp in &mut held {
        assert!(stays_open(tcp, Duration::from_millis(200)).await);
    }
    let m = metrics(&a).await;
    assert!(
        m.contains(r#"hopwise_connections_refused_total{direction="outbound",reason="limit"} 5"#),
        "{m}"
    );
    // Two of the held ones leave: new ones are served (once the proxy has seen them go).
    held.truncate(3);
    let ask = b"GET / HTTP/1.1\r\nhost: b\r\nconnection: close\r\n\r\n";
    let t = Instant::now();
    while !raw(port, ask, CLOSED_WITHIN)
        .await
        .starts_with("HTTP/1.1 200")
    {
        assert!(t.elapsed() < CLOSED_WITHIN, "no place came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        raw(port, ask, CLOSED_WITHIN)
            .await
            .starts_with("HTTP/1.1 200")
    );
}

#[tokio::test]
async fn outbound_and_admin_listeners_bind_loopback_unless_a_flag_allows_more_and_capture_always() {
    let f = Fixture::new(MESH);
    let anywhere: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let mut c = outbound(f.config("a"), &[]);
    c.outbound = Some(anywhere);
    let err = hopwise_proxy::start(c.clone()).unwrap_err().to_string();
    assert!(
        err.contains("outbound (HTTP-proxy) listener")
            && err.contains("0.0.0.0:0")
            && err.contains("--allow-remote-outbound"),
        "{err}"
    );
    let mut per_upstream = outbound(f.config("a"), &[]);
    per_upstream.upstream_ports.insert("b".into(), anywhere);
    let err = hopwise_proxy::start(per_upstream).unwrap_err().to_string();
    assert!(
        err.contains("upstream b listener") && err.contains("--allow-remote-outbound"),
        "{err}"
    );
    let mut admin = outbound(f.config("a"), &[]);
    admin.admin = Some(anywhere);
    let err = hopwise_proxy::start(admin.clone()).unwrap_err().to_string();
    assert!(
        err.contains("admin listener") && err.contains("--allow-remote-admin"),
        "{err}"
    );
    // Capture's listener, never: TPROXY's connections are told from direct ones by their own
    // address being off loopback (docs/capture.md), and no flag changes that.
    let mut captured = outbound(f.config("a"), &[]);
    captured.capture = Some(hopwise_proxy::config::CaptureConfig {
        netns: None,
        listen: anywhere,
        destinations: hopwise_model::capture::Destinations::of(&f.mesh),
    });
    captured.listeners.allow_remote_outbound = true;
    captured.listeners.allow_remote_admin = true;
    let err = hopwise_proxy::start(captured).unwrap_err().to_string();
    assert!(
        err.contains("capture listener") && err.contains("0.0.0.0:0") && !err.contains("pass --"),
        "{err}"
    );
    // With the flags they start.
    c.listeners.allow_remote_outbound = true;
    let running = hopwise_proxy::start(c).unwrap();
    running.shutdown();
    admin.listeners.allow_remote_admin = true;
    let running = hopwise_proxy::start(admin).unwrap();
    running.shutdown();
    // The inbound (mutual TLS) listener may bind any address.
    let mut inbound_anywhere = inbound(f.config("b"), closed_port());
    inbound_anywhere.inbound = Some(anywhere);
    let running = hopwise_proxy::start(inbound_anywhere).unwrap();
    running.shutdown();
}
