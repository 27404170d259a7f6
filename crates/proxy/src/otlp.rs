//! Spans exported over OTLP: what a span is here ([`SpanData`]), the bounded queue the request
//! path hands them to ([`SpanSink`]: never waits; a full queue drops the span and counts it in
//! `hopwise_spans_dropped_total`), and the exporter thread that batches them to the collector
//! over OTLP/gRPC or OTLP/HTTP with protobuf bodies (`export.rs`), as the official messages
//! (`wire.rs`, the `opentelemetry-proto` crate). `record.rs` builds one request's spans: the
//! request's own and a child per try.
//!
//! Nothing here runs for a request that is not recorded ([`crate::trace::ProxySpan::recorded`]):
//! no allocation, no clock, no queue.

mod export;
mod record;
mod semconv;
mod wire;

use std::time::{SystemTime, UNIX_EPOCH};

use hopwise_api::trace_context::{SpanId, TraceId};
use hopwise_model::observe::Tracing;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

pub use record::{Begun, Direction, Recording, begin};
pub use wire::request as export_request;

/// Spans sent in one export call at most.
const BATCH: usize = 512;

/// One finished span, as the proxy knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanData {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent: Option<SpanId>,
    pub name: String,
    pub kind: Kind,
    /// Unix time in nanoseconds.
    pub start: u64,
    pub end: u64,
    pub attributes: Vec<(&'static str, Value)>,
    /// The request or try failed (5xx, a gRPC error, no answer): the span's status is ERROR.
    pub error: bool,
}

/// OTLP's span kinds that a proxy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The inbound proxy serving a caller.
    Server,
    /// The outbound proxy's request, and each try it sends.
    Client,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
}

/// Where the request path hands finished spans: a bounded queue to the exporter thread.
#[derive(Debug, Clone)]
pub struct SpanSink {
    tx: mpsc::Sender<SpanData>,
    dropped: Counter,
}

impl SpanSink {
    /// Queues `span`, or drops and counts it if the queue is full (or the exporter is gone).
    pub fn send(&self, span: SpanData) {
        if self.tx.try_send(span).is_err() {
            self.dropped.inc();
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("cannot start the span exporter: {0}")]
    Start(std::io::Error),
}

/// Starts the exporter thread for `tracing.collector` (none: no sink) and returns the sink.
/// `service` and `copy` name the spans' resource; `dropped` counts spans lost (queue full, or the
/// collector failed or refused them).
pub fn start(
    tracing: &Tracing,
    service: &str,
    copy: usize,
    dropped: Counter,
) -> Result<Option<SpanSink>, OtlpError> {
    let Some(collector) = tracing.collector.clone() else {
        return Ok(None);
    };
    let (tx, rx) = mpsc::channel(tracing.queue.max(1) as usize);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OtlpError::Start)?;
    let exporter = export::Exporter::new(
        collector,
        tracing.protocol,
        service.to_owned(),
        format!("{service}[{copy}]"),
        dropped.clone(),
    );
    std::thread::Builder::new()
        .name("hopwise-otlp".to_owned())
        .spawn(move || runtime.block_on(exporter.run(rx)))
        .map_err(OtlpError::Start)?;
    Ok(Some(SpanSink { tx, dropped }))
}

/// Now, as Unix nanoseconds (OTLP's times); only read for a recorded request.
fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
