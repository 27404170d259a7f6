//! A stand-in OTLP collector on the official protobuf definitions (`opentelemetry-proto`):
//! `TraceService/Export` over gRPC (h2c), or `POST /v1/traces` with a protobuf body (OTLP/HTTP),
//! on a loopback port. It keeps every span it is sent (or, for the bench, only counts them). No
//! collector is packaged in Debian, so the tests and `bench hops --tracing` run this one. It
//! serves until its runtime ends; connections are loopback and their number is not capped (it
//! is a test's and a benchmark's receiver, never a listener on the network).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use tokio::net::TcpListener;

/// One span as received, with ids in hex.
#[derive(Debug, Clone)]
pub struct Got {
    /// The resource's `service.name`: which proxy sent it.
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent: String,
    pub name: String,
    pub kind: i32,
    pub error: bool,
    pub attributes: BTreeMap<String, String>,
}

impl Got {
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

/// The receiver: its address, and what it was sent.
#[derive(Debug, Clone)]
pub struct Collector {
    pub addr: SocketAddr,
    /// `false`: spans are counted, not kept (a benchmark's hours of spans).
    keep: bool,
    spans: Arc<Mutex<Vec<Got>>>,
    count: Arc<AtomicU64>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn value_text(v: &Value) -> String {
    match v {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn got(service: &str, s: opentelemetry_proto::tonic::trace::v1::Span) -> Got {
    Got {
        service: service.to_owned(),
        trace_id: hex(&s.trace_id),
        span_id: hex(&s.span_id),
        parent: hex(&s.parent_span_id),
        name: s.name,
        kind: s.kind,
        error: s.status.is_some_and(|st| st.code == 2),
        attributes: s
            .attributes
            .into_iter()
            .filter_map(|kv| Some((kv.key, value_text(kv.value.as_ref()?.value.as_ref()?))))
            .collect(),
    }
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
        let mut out = self.spans.lock().unwrap_or_else(|p| p.into_inner());
        for rs in req.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(value_text)
                .unwrap_or_default();
            for s in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                self.count.fetch_add(1, Ordering::Relaxed);
                if self.keep {
                    out.push(got(&service, s));
                }
            }
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

    /// OTLP/gRPC: `TraceService/Export` in h2c on 127.0.0.1:0, keeping (`keep`) or counting.
    pub async fn grpc(keep: bool) -> std::io::Result<Collector> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let c = Collector::new(listener.local_addr()?, keep);
        let service = TraceServiceServer::new(c.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let svc = TowerToHyperService::new(service.clone());
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
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

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
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
