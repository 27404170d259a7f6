//! A real OTLP receiver for the tests, on the official protobuf definitions
//! (`opentelemetry-proto`): `TraceService/Export` over gRPC (h2c), or `POST /v1/traces` with a
//! protobuf body (OTLP/HTTP), on 127.0.0.1:0. It keeps every span it is sent. No collector is
//! packaged in Debian, so this stands in for one.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
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

#[derive(Clone, Default)]
pub struct Receiver {
    pub addr: Option<SocketAddr>,
    spans: Arc<Mutex<Vec<Got>>>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Receiver {
    fn take(&self, req: ExportTraceServiceRequest) {
        let mut out = self.spans.lock().unwrap();
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
                out.push(Got {
                    service: service.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    error: s.status.is_some_and(|st| st.code == 2),
                    attributes: s
                        .attributes
                        .into_iter()
                        .filter_map(|kv| {
                            let v = value_text(kv.value.as_ref()?.value.as_ref()?);
                            Some((kv.key, v))
                        })
                        .collect(),
                });
            }
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (10 s at most) until `n` spans have come, then returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<Got> {
        for _ in 0..1000 {
            if self.spans.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let got = self.spans();
        assert!(got.len() >= n, "{} spans of {n}: {got:#?}", got.len());
        got
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// OTLP/gRPC: `TraceService/Export` in h2c.
pub async fn grpc_receiver() -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let r = Receiver {
        addr: Some(listener.local_addr().unwrap()),
        ..Default::default()
    };
    let service = TraceServiceServer::new(r.clone());
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
    r
}

/// OTLP/HTTP: `POST /v1/traces`, `application/x-protobuf`.
pub async fn http_receiver() -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let r = Receiver {
        addr: Some(listener.local_addr().unwrap()),
        ..Default::default()
    };
    let keep = r.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let keep = keep.clone();
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let keep = keep.clone();
                    async move {
                        let ok = req.uri().path() == "/v1/traces"
                            && req.headers()["content-type"] == "application/x-protobuf";
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let status = match ExportTraceServiceRequest::decode(body) {
                            Ok(m) if ok => {
                                keep.take(m);
                                200
                            }
                            _ => 400,
                        };
                        let mut resp = http::Response::new(Full::new(Bytes::new()));
                        *resp.status_mut() = http::StatusCode::from_u16(status).unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    r
}

/// Accepts connections and never answers: an exporter's call to it hangs until its timeout.
pub async fn silent_receiver() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    addr
}
