//! Real gRPC through the mesh: a tonic client calls a's proxy in h2c, a's proxy carries the call
//! to b's proxy over mutual TLS (HTTP/2 by ALPN), and b's proxy hands it to b's app, a tonic
//! server speaking h2c. Unary, server-streaming, client-streaming and bidirectional calls; error
//! statuses in trailers-only responses and in real trailers after messages; the proxy's own
//! answers when b's app is down or hangs past the route timeout.
//!
//! The messages and the service are written by hand (`prost::Message` derives, a
//! `tower_service::Service` that dispatches on the path to `tonic::server::Grpc`), so neither
//! protoc nor a build script is needed.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hopwise_proxy::Running;
use http::uri::PathAndQuery;
use support::*;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

// --- the protocol, by hand --------------------------------------------------------------------

/// `hopwise.test.Lookup`: which member, and how many items a stream should carry.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Lookup {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(uint32, tag = "2")]
    pub count: u32,
}

/// `hopwise.test.Member`: the answer to `Get`; `peer` is what the server saw in
/// `x-hopwise-peer-identity`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Member {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(double, tag = "2")]
    pub balance: f64,
    #[prost(string, tag = "3")]
    pub peer: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Payment {
    #[prost(uint32, tag = "1")]
    pub seq: u32,
    #[prost(double, tag = "2")]
    pub amount: f64,
    #[prost(bytes = "vec", tag = "3")]
    pub blob: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Receipt {
    #[prost(uint32, repeated, tag = "1")]
    pub seqs: Vec<u32>,
    #[prost(double, tag = "2")]
    pub total: f64,
}

const GET: &str = "/hopwise.test.Ledger/Get";
const HANG: &str = "/hopwise.test.Ledger/Hang";
const HISTORY: &str = "/hopwise.test.Ledger/History";
const PAY: &str = "/hopwise.test.Ledger/Pay";
const ECHO: &str = "/hopwise.test.Ledger/Echo";

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

// --- the server: b's app ----------------------------------------------------------------------

/// A tonic handler from an async fn (what `tower::service_fn` does, without the dependency).
struct Handler<F>(F);

impl<F, Req, Resp, Fut> tower_service::Service<tonic::Request<Req>> for Handler<F>
where
    F: FnMut(tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
{
    type Response = tonic::Response<Resp>;
    type Error = Status;
    type Future = Fut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::Request<Req>) -> Fut {
        (self.0)(req)
    }
}

/// `Get`: a member with the caller's identity; `U-0` does not exist, `offline` is unavailable,
/// and a non-ASCII message tests `grpc-message`'s percent-encoding end to end.
async fn get(req: tonic::Request<Lookup>) -> Result<tonic::Response<Member>, Status> {
    let peer = req
        .metadata()
        .get("x-hopwise-peer-identity")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned();
    let id = req.into_inner().id;
    match id.as_str() {
        "U-0" => Err(Status::not_found("no such member")),
        "offline" => Err(Status::unavailable("the ledger is offline")),
        "ü" => Err(Status::invalid_argument("üye yok → 100% sure")),
        _ => Ok(tonic::Response::new(Member {
            id,
            balance: 12.5,
            peer,
        })),
    }
}

/// `Hang`: never answers (well: not within any test).
async fn hang(_: tonic::Request<Lookup>) -> Result<tonic::Response<Member>, Status> {
    tokio::time::sleep(Duration::from_secs(300)).await;
    Err(Status::internal("woke up"))
}

/// `History`: `count` payments, numbered; for `broken`, an UNAVAILABLE status after them, with
/// trailing metadata — real HTTP/2 trailers, not a trailers-only response.
async fn history(
    req: tonic::Request<Lookup>,
) -> Result<tonic::Response<BoxStream<Payment>>, Status> {
    let Lookup { id, count } = req.into_inner();
    let items: Vec<Result<Payment, Status>> = (0..count)
        .map(|seq| {
            Ok(Payment {
                seq,
                amount: f64::from(seq) + 0.5,
                blob: Vec::new(),
            })
        })
        .collect();
    let tail = (id == "broken").then(|| {
        let mut s = Status::unavailable("the ledger went away");
        s.metadata_mut()
            .insert("x-ledger-cause", MetadataValue::from_static("disk"));
        Err(s)
    });
    let stream = tokio_stream::iter(items.into_iter().chain(tail));
    Ok(tonic::Response::new(Box::pin(stream) as BoxStream<Payment>))
}

/// `Pay` (client streaming): every payment's number, in the order received, and the sum.
async fn pay(
    req: tonic::Request<tonic::Streaming<Payment>>,
) -> Result<tonic::Response<Receipt>, Status> {
    let mut stream = req.into_inner();
    let mut receipt = Receipt::default();
    while let Some(p) = stream.message().await? {
        receipt.seqs.push(p.seq);
        receipt.total += p.amount;
    }
    Ok(tonic::Response::new(receipt))
}

/// `Echo` (bidirectional): each payment back as soon as it arrives, amount doubled.
async fn echo_payments(
    req: tonic::Request<tonic::Streaming<Payment>>,
) -> Result<tonic::Response<BoxStream<Payment>>, Status> {
    let out = req.into_inner().map(|p| {
        p.map(|p| Payment {
            amount: p.amount * 2.0,
            ..p
        })
    });
    Ok(tonic::Response::new(Box::pin(out) as BoxStream<Payment>))
}

/// The `hopwise.test.Ledger` service: dispatches on the path, counts the calls that reach it.
#[derive(Clone, Default)]
struct Ledger {
    calls: Arc<AtomicUsize>,
}

impl tower_service::Service<http::Request<tonic::body::Body>> for Ledger {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let path = req.uri().path().to_owned();
            let resp = match path.as_str() {
                GET => {
                    let mut g = tonic::server::Grpc::new(ProstCodec::<Member, Lookup>::default());
                    g.unary(Handler(get), req).await
                }
                HANG => {
                    let mut g = tonic::server::Grpc::new(ProstCodec::<Member, Lookup>::default());
                    g.unary(Handler(hang), req).await
                }
                HISTORY => {
                    let mut g = tonic::server::Grpc::new(ProstCodec::<Payment, Lookup>::default());
                    g.server_streaming(Handler(history), req).await
                }
                PAY => {
                    let mut g = tonic::server::Grpc::new(ProstCodec::<Receipt, Payment>::default());
                    g.client_streaming(Handler(pay), req).await
                }
                ECHO => {
                    let mut g = tonic::server::Grpc::new(ProstCodec::<Payment, Payment>::default());
                    g.streaming(Handler(echo_payments), req).await
                }
                _ => Status::unimplemented(format!("no method {path}")).into_http(),
            };
            Ok(resp)
        })
    }
}

/// b's app: a tonic server (h2c) on 127.0.0.1:0.
async fn ledger_app() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let ledger = Ledger::default();
    let calls = ledger.calls.clone();
    tokio::spawn(
        tonic::transport::Server::builder()
            .serve_with_incoming(ledger, TcpListenerStream::new(listener)),
    );
    (addr, calls)
}

// --- the client: a's app ----------------------------------------------------------------------

/// A tonic client on a fresh h2c channel to `addr`, with `:authority` set to `authority`.
async fn client(addr: SocketAddr, authority: &str) -> tonic::client::Grpc<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .origin(authority.parse().unwrap())
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

fn rpc(p: &'static str) -> PathAndQuery {
    PathAndQuery::from_static(p)
}

fn lookup(id: &str, count: u32) -> tonic::Request<Lookup> {
    tonic::Request::new(Lookup {
        id: id.to_owned(),
        count,
    })
}

async fn get_member(c: &mut tonic::client::Grpc<Channel>, id: &str) -> Result<Member, Status> {
    c.ready().await.unwrap();
    c.unary(
        lookup(id, 0),
        rpc(GET),
        ProstCodec::<Lookup, Member>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// Every test's calls are bounded: a wedged stream fails the test instead of hanging it.
async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s"))
}

// --- the mesh ---------------------------------------------------------------------------------

/// b speaks gRPC. Routes are gRPC methods, so metrics carry method names, and `Hang` has its
/// own short route timeout.
const MESH: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls:
      b:
        timeout: 5s
        routes:
          get: { path: /hopwise.test.Ledger/Get }
          hang: { path: /hopwise.test.Ledger/Hang, timeout: 300ms }
          ledger: { path: /hopwise.test.Ledger/ }
  b: { protocol: grpc }
";

struct Mesh {
    _f: Fixture,
    a: Running,
    b: Running,
    /// a's local port for b: where a's app sends its gRPC calls.
    port: SocketAddr,
}

/// a's proxy → (mTLS, h2) → b's proxy → `app` (h2c).
async fn mesh(app: SocketAddr) -> Mesh {
    let f = Fixture::new(MESH);
    let b = start(inbound(f.config("b"), app)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let port = a.bound.upstreams["b"];
    Mesh { _f: f, a, b, port }
}

fn hopwise_error(s: &Status) -> String {
    s.metadata()
        .get("x-hopwise-error")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned()
}

// --- tests ------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_call_arrives_with_the_callers_identity() {
    let (app, calls) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let member = bounded("Get", get_member(&mut c, "U-41")).await.unwrap();
    assert_eq!(member.id, "U-41");
    assert_eq!(member.balance, 12.5);
    assert_eq!(member.peer, "spiffe://test.local/service/a");
    // A second call on the same channel: pooled connections both ways.
    let member = bounded("Get", get_member(&mut c, "U-42")).await.unwrap();
    assert_eq!(member.id, "U-42");
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // The route is the method's name from the mesh file; the member number is nowhere.
    let text = metrics(&m.a).await;
    assert!(
        text.contains(r#"hopwise_requests_total{direction="outbound",service="b",route="get"} 2"#),
        "{text}"
    );
    assert!(!text.contains("U-41"), "{text}");
    let text = metrics(&m.b).await;
    assert!(
        text.contains(r#"hopwise_tls_handshakes_total{direction="inbound",result="ok"} 1"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_through_the_http_proxy_port_is_routed_by_authority() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.a.bound.outbound.unwrap(), "http://b").await;
    let member = bounded("Get", get_member(&mut c, "U-41")).await.unwrap();
    assert_eq!(member.peer, "spiffe://test.local/service/a");
    // An authority that names no upstream: UNIMPLEMENTED, with the proxy's reason.
    let mut c = client(m.a.bound.outbound.unwrap(), "http://nowhere").await;
    let err = bounded("Get", get_member(&mut c, "U-41"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert_eq!(hopwise_error(&err), "no-route");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_delivers_every_message_in_order() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let got = bounded("History", async {
        c.ready().await.unwrap();
        let mut stream = c
            .server_streaming(
                lookup("U-41", 500),
                rpc(HISTORY),
                ProstCodec::<Lookup, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        let mut got = Vec::new();
        while let Some(p) = stream.message().await.unwrap() {
            got.push(p);
        }
        got
    })
    .await;
    assert_eq!(got.len(), 500);
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p.seq as usize, i);
        assert_eq!(p.amount, i as f64 + 0.5);
    }
    // Not in `get`'s or `hang`'s route: the catch-all route of the service.
    let text = metrics(&m.a).await;
    assert!(
        text.contains(
            r#"hopwise_requests_total{direction="outbound",service="b",route="ledger"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stream_delivers_every_message() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let payments: Vec<Payment> = (0..300)
        .map(|seq| Payment {
            seq,
            amount: 1.0,
            blob: Vec::new(),
        })
        .collect();
    let receipt = bounded("Pay", async {
        c.ready().await.unwrap();
        c.client_streaming(
            tonic::Request::new(tokio_stream::iter(payments)),
            rpc(PAY),
            ProstCodec::<Payment, Receipt>::default(),
        )
        .await
        .unwrap()
        .into_inner()
    })
    .await;
    assert_eq!(receipt.seqs, (0..300).collect::<Vec<u32>>());
    assert_eq!(receipt.total, 300.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidirectional_stream_answers_each_message_before_the_next_is_sent() {
    // Ping-pong: the client sends the next payment only after the previous one's echo came
    // back, so a proxy that buffered either direction until its end would wedge here.
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    bounded("Echo", async {
        let (tx, rx) = tokio::sync::mpsc::channel::<Payment>(1);
        c.ready().await.unwrap();
        tx.send(Payment {
            seq: 0,
            amount: 1.0,
            blob: Vec::new(),
        })
        .await
        .unwrap();
        let mut replies = c
            .streaming(
                tonic::Request::new(ReceiverStream::new(rx)),
                rpc(ECHO),
                ProstCodec::<Payment, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        for seq in 0..50u32 {
            let reply = replies.message().await.unwrap().unwrap();
            assert_eq!(reply.seq, seq);
            assert_eq!(reply.amount, f64::from(seq + 1) * 2.0);
            if seq + 1 < 50 {
                tx.send(Payment {
                    seq: seq + 1,
                    amount: f64::from(seq + 2),
                    blob: Vec::new(),
                })
                .await
                .unwrap();
            }
        }
        drop(tx);
        assert!(replies.message().await.unwrap().is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_cross_every_hop_both_ways() {
    // 3 MiB each way (tonic's default limit is 4 MiB): far past HTTP/2's initial 64 KiB
    // windows on each of the three connections.
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let blob: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let sent: Vec<Payment> = (0..3)
        .map(|seq| Payment {
            seq,
            amount: 1.0,
            blob: blob.clone(),
        })
        .collect();
    let got = bounded("Echo", async {
        c.ready().await.unwrap();
        let mut replies = c
            .streaming(
                tonic::Request::new(tokio_stream::iter(sent)),
                rpc(ECHO),
                ProstCodec::<Payment, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        let mut got = Vec::new();
        while let Some(p) = replies.message().await.unwrap() {
            got.push(p);
        }
        got
    })
    .await;
    assert_eq!(got.len(), 3);
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p.seq as usize, i);
        assert_eq!(p.amount, 2.0);
        assert!(
            p.blob == blob,
            "message {i}: {} bytes came back",
            p.blob.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_statuses_from_the_server_arrive_intact() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;

    // Trailers-only responses (the status in the response headers).
    let err = bounded("Get", get_member(&mut c, "U-0")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert_eq!(err.message(), "no such member");
    assert_eq!(
        hopwise_error(&err),
        "-",
        "the app's status, not the proxy's"
    );

    let err = bounded("Get", get_member(&mut c, "offline"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(err.message(), "the ledger is offline");

    // grpc-message is percent-encoded on the wire; it must come out as the server wrote it.
    let err = bounded("Get", get_member(&mut c, "ü")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(err.message(), "üye yok → 100% sure");

    // A status in real trailers, after messages, with trailing metadata.
    let (got, status) = bounded("History", async {
        c.ready().await.unwrap();
        let mut stream = c
            .server_streaming(
                lookup("broken", 3),
                rpc(HISTORY),
                ProstCodec::<Lookup, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        let mut got = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(p)) => got.push(p.seq),
                Ok(None) => panic!("the stream ended without the server's status"),
                Err(status) => break (got, status),
            }
        }
    })
    .await;
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(status.message(), "the ledger went away");
    assert_eq!(
        status
            .metadata()
            .get("x-ledger-cause")
            .and_then(|v| v.to_str().ok()),
        Some("disk"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_is_down_is_unavailable() {
    // b's proxy runs; b's app does not.
    let m = mesh(closed_port()).await;
    let mut c = client(m.port, "http://b").await;
    let err = bounded("Get", get_member(&mut c, "U-41"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(hopwise_error(&err), "connect-refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_is_down_is_unavailable() {
    // Nothing listens where a's proxy expects b's.
    let f = Fixture::new(MESH);
    let a = start(outbound(f.config("a"), &[("b", closed_port())])).await;
    let mut c = client(a.bound.upstreams["b"], "http://b").await;
    let err = bounded("Get", get_member(&mut c, "U-41"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(hopwise_error(&err), "connect-refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_hangs_meets_the_route_timeout_as_deadline_exceeded() {
    let (app, calls) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let err = bounded("Hang", async {
        c.ready().await.unwrap();
        c.unary(
            lookup("U-41", 0),
            rpc(HANG),
            ProstCodec::<Lookup, Member>::default(),
        )
        .await
    })
    .await
    .unwrap_err();
    // The hopwise preset answers its own timeouts with DEADLINE_EXCEEDED.
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert_eq!(hopwise_error(&err), "route-timeout");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the call reached the app");
    // The channel and the mesh still serve after a timed-out stream.
    let member = bounded("Get", get_member(&mut c, "U-41")).await.unwrap();
    assert_eq!(member.id, "U-41");
    let text = metrics(&m.a).await;
    assert!(
        text.contains(r#"hopwise_local_replies_total{direction="outbound",service="b",reason="route-timeout"} 1"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_timeout_is_not_counted_as_a_success() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let err = bounded("Hang", async {
        c.ready().await.unwrap();
        c.unary(
            lookup("U-41", 0),
            rpc(HANG),
            ProstCodec::<Lookup, Member>::default(),
        )
        .await
    })
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    // The proxy itself gave up on this call; today the series below reads 1.
    let text = metrics(&m.a).await;
    assert!(
        !text.contains(
            r#"hopwise_responses_total{direction="outbound",service="b",route="hang",class="2xx"} 1"#
        ),
        "{text}"
    );
}

/// b's calls retried on UNAVAILABLE (a gRPC condition: the proxy reads a response ahead to its
/// trailers before it decides).
const RETRYING: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls:
      b: { timeout: 5s, idempotent: true, retries: { count: 2, on: [unavailable] } }
  b: { protocol: grpc }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidirectional_stream_progresses_under_a_grpc_retry_policy() {
    let (app, _) = ledger_app().await;
    let f = Fixture::new(RETRYING);
    let b = start(inbound(f.config("b"), app)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let mut c = client(a.bound.upstreams["b"], "http://b").await;
    bounded("Echo under a retry policy", async {
        let (tx, rx) = tokio::sync::mpsc::channel::<Payment>(1);
        c.ready().await.unwrap();
        tx.send(Payment {
            seq: 0,
            amount: 1.0,
            blob: Vec::new(),
        })
        .await
        .unwrap();
        let mut replies = c
            .streaming(
                tonic::Request::new(ReceiverStream::new(rx)),
                rpc(ECHO),
                ProstCodec::<Payment, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        // The first echo must arrive while the client still holds the stream open.
        let first = replies.message().await.unwrap().unwrap();
        assert_eq!(first.seq, 0);
        drop(tx);
        assert!(replies.message().await.unwrap().is_none());
    })
    .await;
}
