//! `hopwise.test.Ledger`: a real gRPC service and client for tests, written by hand (`prost::Message`
//! derives, a `tower_service::Service` that dispatches on the path to `tonic::server::Grpc`), so
//! neither protoc nor a build script is needed. Included by path (`#[path = "support/ledger.rs"]`)
//! by the tests that speak gRPC, so the others do not compile it.

#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::PathAndQuery;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
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

pub const GET: &str = "/hopwise.test.Ledger/Get";
pub const HANG: &str = "/hopwise.test.Ledger/Hang";
pub const HISTORY: &str = "/hopwise.test.Ledger/History";
pub const PAY: &str = "/hopwise.test.Ledger/Pay";
pub const ECHO: &str = "/hopwise.test.Ledger/Echo";

pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

// --- the server: b's app ----------------------------------------------------------------------

/// A tonic handler from an async fn (what `tower::service_fn` does, without the dependency).
pub struct Handler<F>(F);

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
pub async fn get(req: tonic::Request<Lookup>) -> Result<tonic::Response<Member>, Status> {
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
pub async fn hang(_: tonic::Request<Lookup>) -> Result<tonic::Response<Member>, Status> {
    tokio::time::sleep(Duration::from_secs(300)).await;
    Err(Status::internal("woke up"))
}

/// `History`: `count` payments, numbered; for `broken`, an UNAVAILABLE status after them, with
/// trailing metadata — real HTTP/2 trailers, not a trailers-only response.
pub async fn history(
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
pub async fn pay(
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
pub async fn echo_payments(
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
pub struct Ledger {
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
pub async fn ledger_app() -> (SocketAddr, Arc<AtomicUsize>) {
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
pub async fn client(addr: SocketAddr, authority: &str) -> tonic::client::Grpc<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .origin(authority.parse().unwrap())
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

pub fn rpc(p: &'static str) -> PathAndQuery {
    PathAndQuery::from_static(p)
}

pub fn lookup(id: &str, count: u32) -> tonic::Request<Lookup> {
    tonic::Request::new(Lookup {
        id: id.to_owned(),
        count,
    })
}

pub async fn get_member(c: &mut tonic::client::Grpc<Channel>, id: &str) -> Result<Member, Status> {
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
pub async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s"))
}
