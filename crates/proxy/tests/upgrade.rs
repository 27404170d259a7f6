//! Protocol switches and CONNECT through two real proxies over mutual TLS (docs/tcp.md): a real
//! WebSocket client (tokio-tungstenite) → the caller's proxy → the callee's proxy → a real
//! WebSocket echo app, several messages both ways and the close handshake; a switch to a service
//! that does not accept it refused with the documented status, and a caller not in `allow`
//! refused before the app sees it; a CONNECT to a TCP echo with a half-close. Real sockets on
//! loopback; every wait bounded, and reaching a bound fails the test.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hopwise_proxy::Running;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

const MESH: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls: { chat: {}, plain: {}, pipe: {} }
  stranger:
    calls: { chat: {} }
  chat: { upgrade: { protocols: [websocket], idle_timeout: 30s }, allow: [a] }
  plain: {}
  pipe: { upgrade: { connect: true } }
";

/// Bounds every wait in these tests: reaching it is a failure, never a pass.
const LIMIT: Duration = Duration::from_secs(10);

async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no end within {LIMIT:?}"))
}

/// The callee's proxy in front of `app`, then `caller`'s proxy with its local port to it.
async fn through(f: &Fixture, caller: &str, callee: &str, app: SocketAddr) -> (Running, Running) {
    let b = start(inbound(f.config(callee), app)).await;
    let peer = b.bound.inbound.unwrap();
    let a = start(outbound(f.config(caller), &[(callee, peer)])).await;
    (a, b)
}

/// A WebSocket echo app: every text and binary message sent back, the close answered. Counts
/// the connections it accepted and keeps the identity header each handshake carried.
struct EchoApp {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    identities: Arc<Mutex<Vec<String>>>,
}

async fn ws_echo() -> EchoApp {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let identities = Arc::new(Mutex::new(Vec::new()));
    let (count, seen) = (accepted.clone(), identities.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let seen = seen.clone();
            tokio::spawn(async move {
                // tungstenite's callback type, not ours: its error is an HTTP response.
                #[allow(clippy::result_large_err)]
                let note = |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                            resp| {
                    let id = req.headers().get("x-hopwise-peer-identity");
                    let id = id.and_then(|v| v.to_str().ok()).unwrap_or("-");
                    seen.lock().unwrap().push(id.to_owned());
                    Ok(resp)
                };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(tcp, note).await else {
                    return;
                };
                while let Some(Ok(m)) = ws.next().await {
                    if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    EchoApp {
        addr,
        accepted,
        identities,
    }
}

/// Waits (bounded) until the proxy's `/metrics` has a line starting with `series` that reads
/// at least `least`.
async fn wait_metric(p: &Running, series: &str, least: f64) {
    bounded(series, async {
        loop {
            let text = metrics(p).await;
            let got = text
                .lines()
                .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok());
            if got.is_some_and(|v| v >= least) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_websocket_echo_goes_through_the_mesh_and_closes_cleanly() {
    let f = Fixture::new(MESH);
    let app = ws_echo().await;
    let (a, b) = through(&f, "a", "chat", app.addr).await;
    let tcp = TcpStream::connect(a.bound.upstreams["chat"]).await.unwrap();
    let (mut ws, resp) = bounded(
        "handshake",
        tokio_tungstenite::client_async("ws://chat/echo", tcp),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 101);
    for i in 0..5 {
        let sent = Message::text(format!("hello {i}"));
        ws.send(sent.clone()).await.unwrap();
        assert_eq!(bounded("echo", ws.next()).await.unwrap().unwrap(), sent);
    }
    // Larger than a read buffer and than a TLS record: split and joined again on the way.
    let big = Message::binary(vec![7u8; 200 * 1024]);
    ws.send(big.clone()).await.unwrap();
    assert_eq!(bounded("big echo", ws.next()).await.unwrap().unwrap(), big);
    ws.close(None).await.unwrap();
    let answer = bounded("close", ws.next()).await;
    assert!(
        matches!(answer, Some(Ok(Message::Close(_))) | None),
        "the close was not answered: {answer:?}"
    );
    assert!(bounded("end", ws.next()).await.is_none(), "still open");
    // The app closed its side (RFC 6455: the server first), the client closes its own now.
    drop(ws);
    assert_eq!(
        *app.identities.lock().unwrap(),
        ["spiffe://test.local/service/a"],
        "the app saw the caller's verified identity"
    );
    let out = "hopwise_tcp_connections_total{direction=\"outbound\",service=\"chat\"}";
    wait_metric(&a, out, 1.0).await;
    let into = "hopwise_tcp_bytes_total{direction=\"inbound\",service=\"chat\",way=\"to-callee\"}";
    wait_metric(&b, into, 200.0 * 1024.0).await;
    let open = "hopwise_tcp_connections_open{direction=\"inbound\",service=\"chat\"} 0";
    bounded("closed on the callee's side", async {
        while !metrics(&b).await.contains(open) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The status and `x-hopwise-error` a refused WebSocket handshake got.
async fn refused_handshake(to: SocketAddr, url: &str) -> (u16, String) {
    let tcp = TcpStream::connect(to).await.unwrap();
    match bounded("handshake", tokio_tungstenite::client_async(url, tcp)).await {
        Err(WsError::Http(resp)) => {
            let reason = resp.headers().get("x-hopwise-error");
            let reason = reason.and_then(|v| v.to_str().ok()).unwrap_or("-");
            (resp.status().as_u16(), reason.to_owned())
        }
        other => panic!("not refused: {:?}", other.map(|(_, r)| r.status())),
    }
}

#[tokio::test]
async fn a_switch_the_service_does_not_accept_or_a_caller_not_allowed_is_refused() {
    let f = Fixture::new(MESH);
    // `plain` has no `upgrade` block: its app is never reached.
    let plain = backend(echo()).await;
    let (a, _b) = through(&f, "a", "plain", plain.addr).await;
    let to = a.bound.upstreams["plain"];
    let (status, reason) = refused_handshake(to, "ws://plain/echo").await;
    assert_eq!((status, reason.as_str()), (501, "upgrade-unsupported"));
    let connect = "CONNECT plain:80 HTTP/1.1\r\nHost: plain:80\r\nConnection: close\r\n\r\n";
    let answer = raw(to, connect.as_bytes(), LIMIT).await;
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.contains("connect-unsupported"), "{answer}");
    assert_eq!(plain.hits.load(Ordering::SeqCst), 0);
    // An ordinary request on the same port still goes through.
    let (status, _, body) = get(to, request("GET", "/x", "plain", b"")).await;
    assert_eq!(status, 200, "{body}");

    // `stranger` is not in chat's `allow`: refused by chat's proxy, the app never sees it.
    let app = ws_echo().await;
    let (s, _c) = through(&f, "stranger", "chat", app.addr).await;
    let (status, reason) = refused_handshake(s.bound.upstreams["chat"], "ws://chat/").await;
    assert_eq!((status, reason.as_str()), (403, "forbidden"));
    assert_eq!(app.accepted.load(Ordering::SeqCst), 0);
}

/// A TCP echo that reads until the caller's end of stream, then answers all of it back with
/// `!` after it and closes: only a carried half-close lets it answer.
async fn echo_after_eof() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                if tcp.read_to_end(&mut got).await.is_ok() {
                    got.push(b'!');
                    let _ = tcp.write_all(&got).await;
                }
            });
        }
    });
    addr
}

/// A CONNECT to `pipe` through the caller's proxy at `port`, its `200` read byte by byte (so
/// nothing after the head is taken): the connection, ready to carry bytes.
async fn connect_pipe(port: SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(port).await.unwrap();
    tcp.write_all(b"CONNECT pipe:9 HTTP/1.1\r\nHost: pipe:9\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut one = [0u8; 1];
        bounded("CONNECT answer", tcp.read_exact(&mut one))
            .await
            .unwrap();
        head.push(one[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tcp
}

#[tokio::test]
async fn a_connect_reaches_a_tcp_echo_and_carries_a_half_close() {
    let f = Fixture::new(MESH);
    let (a, b) = through(&f, "a", "pipe", echo_after_eof().await).await;
    let mut tcp = connect_pipe(a.bound.upstreams["pipe"]).await;
    tcp.write_all(b"hello through the mesh").await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut back = Vec::new();
    bounded("answer after the half-close", tcp.read_to_end(&mut back))
        .await
        .unwrap();
    assert_eq!(back, b"hello through the mesh!");
    let series =
        "hopwise_tcp_bytes_total{direction=\"outbound\",service=\"pipe\",way=\"to-caller\"}";
    wait_metric(&a, series, 23.0).await;
    let series = "hopwise_tcp_connections_total{direction=\"inbound\",service=\"pipe\"}";
    wait_metric(&b, series, 1.0).await;
}

/// An HTTP/2 CONNECT to `pipe` through the caller's proxy at `port`, as an app that speaks
/// HTTP/2 to its proxy (prior knowledge, as gRPC apps do) opens a tunnel (RFC 9113 §8.5): one
/// stream of the app's connection carries the bytes, its end of stream is the half-close.
async fn connect_pipe_h2(port: SocketAddr) -> hyper_util::rt::TokioIo<hyper::upgrade::Upgraded> {
    use http_body_util::Empty;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let tcp = TcpStream::connect(port).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::connect("pipe:9")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = bounded("the CONNECT's answer", send.send_request(req))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{resp:?}");
    let tunnel = bounded("the tunnel", hyper::upgrade::on(resp))
        .await
        .unwrap();
    TokioIo::new(tunnel)
}

#[tokio::test]
async fn an_http2_connect_from_an_app_reaches_a_tcp_echo_and_carries_a_half_close() {
    let f = Fixture::new(MESH);
    let (a, _b) = through(&f, "a", "pipe", echo_after_eof().await).await;
    let mut tunnel = connect_pipe_h2(a.bound.upstreams["pipe"]).await;
    tunnel.write_all(b"hello over h2").await.unwrap();
    tunnel.shutdown().await.unwrap();
    let mut back = Vec::new();
    bounded("answer after the half-close", tunnel.read_to_end(&mut back))
        .await
        .unwrap();
    assert_eq!(back, b"hello over h2!");
    let series =
        "hopwise_tcp_bytes_total{direction=\"outbound\",service=\"pipe\",way=\"to-caller\"}";
    wait_metric(&a, series, 14.0).await;
}

#[tokio::test]
async fn a_copy_that_refuses_the_upgrade_connection_is_passed_over_for_the_next() {
    // Nothing of the CONNECT was sent to a copy that refused the connection: the next one is
    // tried, so every tunnel opens whichever copy the balancer picks first.
    let f = Fixture::new(MESH);
    let b = start(inbound(f.config("pipe"), echo_after_eof().await)).await;
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let mut c = outbound(f.config("a"), &[]);
    if let Some(cluster) = c.clusters.get_mut("pipe")
        && let hopwise_proxy::config::Target::Mesh { endpoints, .. } = &mut cluster.target
    {
        *endpoints = vec![dead, b.bound.inbound.unwrap()];
    }
    let a = start(c).await;
    for i in 0..8 {
        let mut tcp = connect_pipe(a.bound.upstreams["pipe"]).await;
        let sent = format!("tunnel {i}");
        tcp.write_all(sent.as_bytes()).await.unwrap();
        tcp.shutdown().await.unwrap();
        let mut back = Vec::new();
        bounded("the echo", tcp.read_to_end(&mut back))
            .await
            .unwrap();
        assert_eq!(back, format!("{sent}!").into_bytes());
    }
}

#[tokio::test]
async fn proxies_without_certificates_carry_no_upgrade() {
    let f = Fixture::new(MESH);
    let app = ws_echo().await;
    let plaintext = |mut c: hopwise_proxy::ProxyConfig| {
        c.plaintext = true;
        c.certs = None;
        c
    };
    let b = start(inbound(plaintext(f.config("chat")), app.addr)).await;
    let peer = b.bound.inbound.unwrap();
    let a = start(outbound(plaintext(f.config("a")), &[("chat", peer)])).await;
    let (status, reason) = refused_handshake(a.bound.upstreams["chat"], "ws://chat/").await;
    assert_eq!((status, reason.as_str()), (501, "upgrade-unsupported"));
    // Nor does the callee's proxy carry one that reaches it in plain text.
    let (status, reason) = refused_handshake(peer, "ws://chat/").await;
    assert_eq!((status, reason.as_str()), (501, "upgrade-unsupported"));
    assert_eq!(app.accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_caller_that_resets_a_connect_resets_the_apps_connection() {
    let f = Fixture::new(MESH);
    // The app reports how its connection ended: an end of stream, or an error (a reset).
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    let (told, ended) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let _ = told.send(tcp.read_to_end(&mut buf).await.map_err(|e| e.kind()));
    });
    let (a, _b) = through(&f, "a", "pipe", app).await;
    let mut tcp = TcpStream::connect(a.bound.upstreams["pipe"]).await.unwrap();
    tcp.write_all(b"CONNECT pipe:9 HTTP/1.1\r\nHost: pipe:9\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    bounded("CONNECT answer", tcp.read_exact(&mut head))
        .await
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    tcp.write_all(b"some bytes").await.unwrap();
    // A reset, not a close: SO_LINGER 0.
    socket2::SockRef::from(&tcp)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(tcp);
    let how = bounded("the app's end", ended).await.unwrap();
    assert_eq!(how, Err(std::io::ErrorKind::ConnectionReset));
}

/// An app that takes one connection, reads `first` bytes and then resets it (SO_LINGER 0).
async fn resetting_app(first: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut got = vec![0u8; first];
        tcp.read_exact(&mut got).await.unwrap();
        socket2::SockRef::from(&tcp)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    });
    addr
}

#[tokio::test]
async fn an_app_that_resets_a_connect_resets_the_callers_connection() {
    let f = Fixture::new(MESH);
    let (a, _b) = through(&f, "a", "pipe", resetting_app(4).await).await;
    let mut tcp = connect_pipe(a.bound.upstreams["pipe"]).await;
    tcp.write_all(b"ping").await.unwrap();
    // Through the callee's proxy and the mutual-TLS connection to the caller's, a reset
    // each time: the app's caller learns what a direct caller would have.
    let mut rest = Vec::new();
    let how = bounded("the caller's end", tcp.read_to_end(&mut rest)).await;
    assert_eq!(
        how.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset)
    );
}

#[tokio::test]
async fn an_app_that_resets_a_websocket_resets_the_callers_connection() {
    let f = Fixture::new(MESH);
    // The app answers the handshake, reads one message, and resets the connection.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        let _ = ws.next().await;
        socket2::SockRef::from(ws.get_ref())
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    });
    let (a, _b) = through(&f, "a", "chat", app).await;
    let tcp = TcpStream::connect(a.bound.upstreams["chat"]).await.unwrap();
    let (mut ws, _) = bounded(
        "handshake",
        tokio_tungstenite::client_async("ws://chat/", tcp),
    )
    .await
    .unwrap();
    ws.send(Message::text("hello")).await.unwrap();
    let got = bounded("the caller's end", ws.next()).await;
    match got {
        Some(Err(WsError::Io(e))) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        other => panic!("a reset expected, got {other:?}"),
    }
}
