//! A stand-in OTLP collector on the official protobuf definitions (`opentelemetry-proto`):
//! `TraceService/Export` over gRPC (h2c), or `POST /v1/traces` with a protobuf body (OTLP/HTTP),
//! on a loopback port. It keeps every span it is sent (or, for the bench, only counts them). No
//! collector is packaged in Debian, so the tests and `bench hops --tracing` run this one. It
//! serves until its runtime ends. The gRPC side is the control plane's receiver
//! (`hopwise_control::otlp_receiver`, the dashboard's too); the HTTP side, a test's and a
//! benchmark's only, decodes with the same code and does not cap its connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hopwise_control::otlp_receiver::{self, Limits};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tokio::net::TcpListener;

/// One span as received, with ids in hex (the control plane's receiver's).
pub use hopwise_control::otlp_receiver::ReceivedSpan as Got;

/// The receiver: its address, and what it was sent.
#[derive(Debug, Clone)]
pub struct Collector {
    pub addr: SocketAddr,
    /// `false`: spans are counted, not kept (a benchmark's hours of spans).
    keep: bool,
    spans: Arc<Mutex<Vec<Got>>>,
    count: Arc<AtomicU64>,
}

impl Collector {
    fn new(addr: SocketAddr, keep: bool) -> Collector {
        Collector {
            addr,
            keep,
            spans: Arc::default(),
            count: Arc::default(),
        }
    }

    fn take(&self, req: ExportTraceServiceRequest) {
        if self.keep {
            let spans = otlp_receiver::spans_of(req);
            self.count.fetch_add(spans.len() as u64, Ordering::Relaxed);
            let mut out = self.spans.lock().unwrap_or_else(|p| p.into_inner());
            out.extend(spans);
        } else {
            let n = otlp_receiver::span_count(&req);
            self.count.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Every span received so far (none when only counting).
    pub fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many spans have been received.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Waits until `n` spans have come or `within` has passed, then returns all received.
    pub async fn wait_for(&self, n: u64, within: Duration) -> Vec<Got> {
        let step = Duration::from_millis(10);
        let mut waited = Duration::ZERO;
        while self.count() < n && waited < within {
            tokio::time::sleep(step).await;
            waited += step;
        }
        self.spans()
    }

    /// OTLP/gRPC: `TraceService/Export` in h2c on 127.0.0.1:0, keeping (`keep`) or counting;
    /// the control plane's receiver ([`otlp_receiver`]) with its default limits.
    pub async fn grpc(keep: bool) -> std::io::Result<Collector> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let c = Collector::new(listener.local_addr()?, keep);
        let sink = c.clone();
        // Served until the runtime ends.
        let _running = otlp_receiver::spawn(
            listener,
            Limits::default(),
            Arc::new(move |req| sink.take(req)),
        )?;
        Ok(c)
    }

    /// OTLP/HTTP: `POST /v1/traces`, `application/x-protobuf`, on 127.0.0.1:0.
    pub async fn http(keep: bool) -> std::io::Result<Collector> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let c = Collector::new(listener.local_addr()?, keep);
        let keep = c.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let keep = keep.clone();
                let svc = hyper::service::service_fn(move |req| {
                    let keep = keep.clone();
                    async move { Ok::<_, Infallible>(keep.export_http(req).await) }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Ok(c)
    }

    async fn export_http(
        &self,
        req: http::Request<hyper::body::Incoming>,
    ) -> http::Response<Full<Bytes>> {
        let ok = req.uri().path() == "/v1/traces"
            && req
                .headers()
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|v| v == "application/x-protobuf");
        let body = req.into_body().collect().await.map(|b| b.to_bytes());
        let status = match body.map(ExportTraceServiceRequest::decode) {
            Ok(Ok(m)) if ok => {
                self.take(m);
                http::StatusCode::OK
            }
            _ => http::StatusCode::BAD_REQUEST,
        };
        let mut resp = http::Response::new(Full::new(Bytes::new()));
        *resp.status_mut() = status;
        resp
    }
}

/// Accepts connections and never answers: an exporter's call to it hangs until its timeout.
pub async fn silent() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    Ok(addr)
}
