//! A gRPC status that comes in trailers reaches the spans (issue 28: the OpenTelemetry RPC
//! conventions put `rpc.grpc.status_code` on every gRPC span, success too): an app answers a
//! message then trailers (`grpc-status: 0`, then `14`), a's proxy calls it through b's proxy,
//! and the spans both proxies export to a real OTLP receiver carry the trailers' code — an
//! error for UNAVAILABLE, not for OK — where the head's bare 200 said nothing.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly
#![allow(dead_code)] // the shared OTLP receiver's other ways in

#[path = "support/otlp.rs"]
mod otlp;
mod support;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::{Fixture, inbound, outbound, start};
use tokio::net::TcpListener;

/// b's app: h2c, a message, then trailers with the status the request's path names
/// (`/t.S/Code14` → 14).
async fn app() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let code = req.uri().path().rsplit("Code").next().unwrap().to_owned();
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from_str(&code).unwrap());
                    let frames = vec![
                        Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"\0\0\0\0\0"))),
                        Ok(Frame::trailers(trailers)),
                    ];
                    let mut r = Response::new(StreamBody::new(tokio_stream::iter(frames)));
                    r.headers_mut()
                        .insert("content-type", HeaderValue::from_static("application/grpc"));
                    Ok::<_, Infallible>(r)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

/// One unary call through a's proxy (h2c), read to its trailers: their `grpc-status`.
async fn call(port: SocketAddr, code: u32) -> String {
    let tcp = tokio::net::TcpStream::connect(port).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .method("POST")
        .uri(format!("http://b/t.S/Code{code}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert!(
        !resp.headers().contains_key("grpc-status"),
        "a status in the head"
    );
    let body = resp.into_body().collect().await.unwrap();
    let t = body.trailers().cloned().unwrap();
    t["grpc-status"].to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_status_in_trailers_reaches_the_spans_of_both_proxies() {
    let rx = otlp::grpc_receiver().await;
    let f = Fixture::new(&format!(
        "mesh:
  trust_domain: test.local
  tracing: {{ collector: '{}', protocol: grpc, sampling: '100%' }}
services:
  a: {{ calls: {{ b: {{ timeout: 2s }} }} }}
  b: {{ protocol: grpc }}
",
        rx.addr.unwrap()
    ));
    let b = start(inbound(f.config("b"), app().await)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let port = a.bound.upstreams["b"];
    // Per call: a's request span and its try's (client), b's (server).
    for (code, n) in [(0, 3), (14, 6)] {
        assert_eq!(call(port, code).await, code.to_string());
        let spans = rx.wait_for(n).await;
        let call_spans = &spans[n - 3..n];
        for s in call_spans {
            assert_eq!(s.attr("rpc.grpc.status_code"), code.to_string(), "{s:#?}");
            assert_eq!(s.error, code != 0, "{s:#?}");
            assert_eq!(s.attr("rpc.method"), format!("Code{code}"), "{s:#?}");
        }
        let tries = call_spans
            .iter()
            .filter(|s| s.attr("hopwise.try") == "1")
            .count();
        let servers = call_spans.iter().filter(|s| s.kind == 2).count();
        assert_eq!((tries, servers), (1, 1), "{call_spans:#?}");
    }
}
