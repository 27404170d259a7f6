//! The exporter thread's loop: take what the queue holds (up to a batch, after a short linger
//! so a burst goes in one call), send it to the collector over OTLP/gRPC
//! (`TraceService/Export`) or OTLP/HTTP (`POST /v1/traces`, `application/x-protobuf`), each
//! call bounded in time. Spans the collector did not take (an error, a timeout, a partial
//! success's rejections) are counted as dropped; nothing is retried, so memory stays the queue's.

use std::time::Duration;

use bytes::Bytes;
use hopwise_model::raw::OtlpProtocol;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prometheus_client::metrics::counter::Counter;
use prost::Message;
use tokio::sync::mpsc;

use super::{BATCH, SpanData, wire};

/// How long the exporter waits after the first span of a batch for more to join it.
const LINGER: Duration = Duration::from_millis(100);
/// One export call's limit, connecting included.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct Exporter {
    collector: String,
    protocol: OtlpProtocol,
    service: String,
    /// `service.instance.id`: the copy, as `hopwise tap` names it (`pricing[1]`).
    instance: String,
    dropped: Counter,
}

enum Transport {
    Grpc(TraceServiceClient<tonic::transport::Channel>),
    Http(Box<Client<HttpConnector, Full<Bytes>>>, http::Uri),
    /// The address cannot be a URI: every span is counted as dropped.
    Broken,
}

impl Exporter {
    pub(super) fn new(
        collector: String,
        protocol: OtlpProtocol,
        service: String,
        instance: String,
        dropped: Counter,
    ) -> Self {
        Exporter {
            collector,
            protocol,
            service,
            instance,
            dropped,
        }
    }

    /// Runs until every sender is gone and the queue is empty.
    pub(super) async fn run(self, mut rx: mpsc::Receiver<SpanData>) {
        let mut transport = self.transport();
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            if rx.recv_many(&mut batch, BATCH).await == 0 {
                return;
            }
            if batch.len() < BATCH {
                tokio::time::sleep(LINGER).await;
                while batch.len() < BATCH {
                    match rx.try_recv() {
                        Ok(s) => batch.push(s),
                        Err(_) => break,
                    }
                }
            }
            let spans = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
            let count = spans.len() as u64;
            let lost = self
                .send(
                    &mut transport,
                    wire::request(&self.service, &self.instance, spans),
                )
                .await;
            if lost > 0 {
                tracing::debug!("{lost} of {count} spans not taken by {}", self.collector);
                self.dropped.inc_by(lost);
            }
        }
    }

    fn transport(&self) -> Transport {
        let uri = |path: &str| format!("http://{}{path}", self.collector).parse::<http::Uri>();
        match self.protocol {
            OtlpProtocol::Grpc => {
                match tonic::transport::Endpoint::from_shared(format!("http://{}", self.collector))
                {
                    Ok(e) => Transport::Grpc(TraceServiceClient::new(
                        e.connect_timeout(Duration::from_secs(1)).connect_lazy(),
                    )),
                    Err(_) => Transport::Broken,
                }
            }
            OtlpProtocol::Http => match uri("/v1/traces") {
                Ok(u) => Transport::Http(
                    Box::new(Client::builder(TokioExecutor::new()).build(HttpConnector::new())),
                    u,
                ),
                Err(_) => Transport::Broken,
            },
        }
    }

    /// Sends one batch; returns how many of its spans were lost.
    async fn send(&self, transport: &mut Transport, req: ExportTraceServiceRequest) -> u64 {
        let count: u64 = req
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len() as u64)
            .sum();
        let call = async {
            match transport {
                Transport::Grpc(client) => match client.export(req).await {
                    Ok(resp) => resp
                        .into_inner()
                        .partial_success
                        .map_or(0, |p| p.rejected_spans.max(0) as u64),
                    Err(e) => {
                        tracing::debug!("OTLP/gRPC export: {e}");
                        count
                    }
                },
                Transport::Http(client, uri) => {
                    let post = http::Request::post(uri.clone())
                        .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                        .body(Full::new(Bytes::from(req.encode_to_vec())));
                    match post {
                        Ok(post) => match client.request(post).await {
                            Ok(resp) if resp.status().is_success() => 0,
                            Ok(resp) => {
                                tracing::debug!("OTLP/HTTP export: {}", resp.status());
                                count
                            }
                            Err(e) => {
                                tracing::debug!("OTLP/HTTP export: {e}");
                                count
                            }
                        },
                        Err(_) => count,
                    }
                }
                Transport::Broken => count,
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .unwrap_or(count)
    }
}
