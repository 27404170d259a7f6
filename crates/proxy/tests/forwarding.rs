//! HTTP/1.1 and HTTP/2 through one and two hops of real proxies over real mutual TLS.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::*;

const TWO: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls:
      b:
        timeout: 2s
        routes:
          balance: { path: /penalty/, method: GET }
          pay: { path: /penalty/pay, method: POST }
  b: {}
";

/// a's proxy → (mTLS) → b's proxy → b's app.
async fn two_proxies(
    app: std::net::SocketAddr,
) -> (Fixture, hopwise_proxy::Running, hopwise_proxy::Running) {
    let f = Fixture::new(TWO);
    let b = start(inbound(f.config("b"), app)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    (f, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_through_one_hop_carries_the_callers_identity() {
    let app = backend(echo()).await;
    let (_f, a, b) = two_proxies(app.addr).await;
    let port = a.bound.upstreams["b"];
    let (status, headers, body) = get(port, request("GET", "/penalty/U-41", "b", b"")).await;
    assert_eq!(status, 200, "{headers:?} {body}");
    assert!(
        body.contains("peer=spiffe://test.local/service/a"),
        "{body}"
    );
    assert!(body.contains("path=/penalty/U-41"), "{body}");
    assert!(body.contains("method=GET"), "{body}");

    // Metrics are labelled by route name, never by the raw path.
    let m = metrics(&a).await;
    assert!(
        m.contains(r#"hopwise_requests_total{direction="outbound",service="b",route="balance"} 1"#),
        "{m}"
    );
    assert!(!m.contains("U-41"));
    let m = metrics(&b).await;
    assert!(
        m.contains(r#"hopwise_tls_handshakes_total{direction="inbound",result="ok"} 1"#),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_means_one_handshake_for_many_requests() {
    let app = backend(echo()).await;
    let (_f, a, b) = two_proxies(app.addr).await;
    let port = a.bound.upstreams["b"];
    for i in 0..20 {
        let (status, _, _) = get(port, request("GET", &format!("/x/{i}"), "b", b"")).await;
        assert_eq!(status, 200);
    }
    let m = metrics(&b).await;
    assert!(
        m.contains(r#"hopwise_tls_handshakes_total{direction="inbound",result="ok"} 1"#),
        "{m}"
    );
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::SeqCst), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_proxy_port_routes_by_host_and_refuses_unknown_hosts() {
    let app = backend(echo()).await;
    let (_f, a, _b) = two_proxies(app.addr).await;
    let proxy = a.bound.outbound.unwrap();
    // `http_proxy=` clients send the absolute form.
    let (status, _, body) = get(proxy, request("POST", "http://b/penalty/pay", "b", b"12.5")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("method=POST") && body.contains("bytes=4"),
        "{body}"
    );
    let (status, _, body) = get(proxy, request("GET", "/anything", "b.test.local:80", b"")).await;
    assert_eq!(status, 200, "{body}");
    let (status, headers, body) = get(proxy, request("GET", "/", "nowhere", b"")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(headers["x-hopwise-error"], "no-route");
    assert!(body.contains("nowhere"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_from_the_app_reaches_an_http1_app() {
    let app = backend(echo()).await;
    let (_f, a, _b) = two_proxies(app.addr).await;
    let tcp = tokio::net::TcpStream::connect(a.bound.upstreams["b"])
        .await
        .unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    for _ in 0..3 {
        let req = Request::builder()
            .uri("http://b/h2")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains("version=HTTP/1.1"), "{body}");
        assert!(body.contains("path=/h2"), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_stream_both_ways() {
    // The app counts what it receives and answers with 8 MiB.
    let app = backend(std::sync::Arc::new(
        |req: Request<hyper::body::Incoming>| {
            Box::pin(async move {
                let got = req.into_body().collect().await.unwrap().to_bytes().len();
                let mut body = vec![b'x'; 8 * 1024 * 1024];
                body[..got.to_string().len()].copy_from_slice(got.to_string().as_bytes());
                http::Response::new(Full::new(Bytes::from(body)))
            })
        },
    ))
    .await;
    let (_f, a, _b) = two_proxies(app.addr).await;
    let tcp = tokio::net::TcpStream::connect(a.bound.upstreams["b"])
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    // A chunked upload of 16 MiB in 64 KiB frames.
    let body = Chunks {
        left: 256,
        size: 64 * 1024,
    };
    let req = Request::builder()
        .method("PUT")
        .uri("/upload")
        .header("host", "b")
        .body(body)
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.len(), 8 * 1024 * 1024);
    assert!(body.starts_with(b"16777216"), "{:?}", &body[..10]);
}

/// A request body of `left` chunks of `size` bytes, produced as they are polled (chunked).
struct Chunks {
    left: usize,
    size: usize,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        let chunk = Bytes::from(vec![7u8; self.size]);
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_honoured() {
    let app = backend(echo()).await;
    let (_f, a, _b) = two_proxies(app.addr).await;
    let mut tcp = tokio::net::TcpStream::connect(a.bound.upstreams["b"])
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(b"POST /penalty/pay HTTP/1.1\r\nhost: b\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 100 Continue"), "{head}");
    tcp.write_all(b"hello").await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let mut b = [0u8; 1024];
            let n = tcp.read(&mut b).await.unwrap_or(0);
            rest.extend_from_slice(&b[..n]);
            if n == 0 || String::from_utf8_lossy(&rest).contains("bytes=5") {
                break;
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.contains("200 OK") && text.contains("bytes=5"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hops_in_a_row() {
    // a → b → c, where b's app calls b's own proxy (as a sidecar's app does).
    let f = Fixture::new(
        "mesh: { trust_domain: test.local }
services:
  a: { calls: { b: {} } }
  b: { calls: { c: {} } }
  c: {}
",
    );
    let app = backend(echo()).await;
    let c = start(inbound(f.config("c"), app.addr)).await;
    let b_out = start(outbound(f.config("b"), &[("c", c.bound.inbound.unwrap())])).await;
    let b_in = start(inbound(f.config("b"), b_out.bound.upstreams["c"])).await;
    let a = start(outbound(
        f.config("a"),
        &[("b", b_in.bound.inbound.unwrap())],
    ))
    .await;
    let (status, _, body) = get(a.bound.upstreams["b"], request("GET", "/deep", "b", b"")).await;
    assert_eq!(status, 200, "{body}");
    // c sees b's identity: each hop authenticates its own caller.
    assert!(
        body.contains("peer=spiffe://test.local/service/b"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_h2_requests_with_bodies_share_one_connection_without_empty_frames() {
    // h2 peers tolerate only ~100 empty DATA frames per connection (h2 answers GOAWAY
    // ENHANCE_YOUR_CALM); a proxy that adds one per request breaks long-lived connections.
    let f = Fixture::new(
        "mesh: { trust_domain: test.local }
services:
  a: { calls: { b: { timeout: 2s } } }
  b: { protocol: grpc }
",
    );
    let app = backend(echo()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let tcp = tokio::net::TcpStream::connect(a.bound.upstreams["b"])
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    for i in 0..250 {
        let req = Request::builder()
            .method("POST")
            .uri("http://b/pkg.Svc/Call")
            .header("content-type", "application/grpc")
            .body(Full::new(Bytes::from_static(b"\0\0\0\0\x03abc")))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            status,
            200,
            "request {i}: {}",
            String::from_utf8_lossy(&body)
        );
        assert!(
            String::from_utf8_lossy(&body).contains("bytes=8"),
            "request {i}"
        );
    }
}
