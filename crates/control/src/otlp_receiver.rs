//! An OTLP trace receiver: `TraceService/Export` over gRPC (h2c) on the official protobuf
//! definitions (`opentelemetry-proto`'s tonic server), bounded like every listener here — a
//! cap on open connections, on concurrent exports (so on the memory their decoding holds), on a
//! message's size, on a request's time, and on how long a connection may go without a request
//! in flight. What to do with a decoded export is the caller's ([`Sink`]): the dashboard keeps
//! the recent traces (`dashboard::traces`), `hopwise-lab`'s test collector keeps or
//! counts every span. [`spans_of`] turns an export into plain [`ReceivedSpan`]s (hex ids, the
//! attributes as text). The one receiver of the workspace: the tests' and the dashboard's.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower_service::Service;

/// What one receiver allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections in all; past it a new one is closed at accept. A proxy holds one.
    pub connections: usize,
    /// Exports decoded at once (each holds up to `max_message` bytes); more wait their turn.
    pub concurrent_exports: usize,
    /// The largest export message accepted (decoded size); a larger one is refused with
    /// `OUT_OF_RANGE` (tonic's answer). A proxy's batch of 512 spans is about 200 KiB.
    pub max_message: usize,
    /// The longest one export may take, body included; past it the answer is
    /// `DEADLINE_EXCEEDED`.
    pub request_timeout: Duration,
    /// How long a connection may have no request in flight (from its accept on) before it is
    /// closed: one that never sends a request, or stops after one.
    pub idle: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 256,
            concurrent_exports: 8,
            max_message: 4 << 20,
            request_timeout: Duration::from_secs(10),
            idle: Duration::from_secs(60),
        }
    }
}

/// Takes each decoded export (called on the receiver's tasks; keep it short).
pub type Sink = Arc<dyn Fn(ExportTraceServiceRequest) + Send + Sync>;

/// One span as received, with ids in hex.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The resource's `service.name`: which proxy sent it.
    pub service: String,
    /// The resource's `service.instance.id`: which copy's proxy (`""` if it did not say).
    pub instance: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent: String,
    pub name: String,
    pub kind: i32,
    pub error: bool,
    /// Unix nanoseconds.
    pub start: u64,
    pub end: u64,
    pub attributes: BTreeMap<String, String>,
}

impl ReceivedSpan {
    /// The attribute's text, or `""`.
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn value_text(v: &Value) -> String {
    match v {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// Every span of an export, each with its resource's `service.name` and `service.instance.id`.
pub fn spans_of(req: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in req.resource_spans {
        let resource = |key: &str| {
            rs.resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == key)
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(value_text)
                .unwrap_or_default()
        };
        let (service, instance) = (resource("service.name"), resource("service.instance.id"));
        for s in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            out.push(ReceivedSpan {
                service: service.clone(),
                instance: instance.clone(),
                trace_id: hex(&s.trace_id),
                span_id: hex(&s.span_id),
                parent: hex(&s.parent_span_id),
                name: s.name,
                kind: s.kind,
                error: s.status.is_some_and(|st| st.code == 2),
                start: s.start_time_unix_nano,
                end: s.end_time_unix_nano,
                attributes: s
                    .attributes
                    .into_iter()
                    .filter_map(|kv| Some((kv.key, value_text(kv.value.as_ref()?.value.as_ref()?))))
                    .collect(),
            });
        }
    }
    out
}

/// The number of spans in an export, without decoding them further.
pub fn span_count(req: &ExportTraceServiceRequest) -> usize {
    req.resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum()
}

struct Receiver {
    sink: Sink,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        (self.sink)(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A receiver serving in the background; [`Running::stop`] ends it.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Running {
    pub fn stop(self) {
        self.task.abort();
    }

    /// Stops it from elsewhere (connections already open end with their runtime).
    pub fn abort_handle(&self) -> tokio::task::AbortHandle {
        self.task.abort_handle()
    }
}

/// Serves `TraceService/Export` on `listener` within `limits`, handing exports to `sink`
/// (needs a Tokio runtime).
pub fn spawn(listener: TcpListener, limits: Limits, sink: Sink) -> std::io::Result<Running> {
    let addr = listener.local_addr()?;
    let grpc =
        TraceServiceServer::new(Receiver { sink }).max_decoding_message_size(limits.max_message);
    let open = Arc::new(Semaphore::new(limits.connections));
    let exports = Arc::new(Semaphore::new(limits.concurrent_exports));
    let task = tokio::spawn(async move {
        loop {
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!("OTLP receiver: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Past the cap: closed at once, before any byte is read.
            let Ok(slot) = open.clone().try_acquire_owned() else {
                drop(tcp);
                continue;
            };
            let (grpc, exports) = (grpc.clone(), exports.clone());
            tokio::spawn(async move {
                serve_connection(tcp, grpc, exports, limits).await;
                drop(slot);
            });
        }
    });
    Ok(Running { addr, task })
}

type Grpc = TraceServiceServer<Receiver>;

/// One connection: HTTP/2 (h2c) until the peer closes it or it has had no request in flight for
/// `limits.idle`.
async fn serve_connection(
    tcp: tokio::net::TcpStream,
    grpc: Grpc,
    exports: Arc<Semaphore>,
    limits: Limits,
) {
    let _ = tcp.set_nodelay(true);
    let activity = Arc::new(Activity::default());
    let seen = activity.clone();
    let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let (mut grpc, exports, activity) = (grpc.clone(), exports.clone(), seen.clone());
        async move {
            let _busy = activity.begin();
            let answer = tokio::time::timeout(limits.request_timeout, async {
                // Closed only when the receiver is gone: then nothing is served anyway.
                let _permit = exports.acquire().await;
                grpc.call(req).await
            })
            .await;
            Ok::<_, Infallible>(match answer {
                Ok(Ok(resp)) => resp,
                Ok(Err(never)) => match never {},
                Err(_) => tonic::Status::deadline_exceeded("the export took too long").into_http(),
            })
        }
    });
    let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .max_concurrent_streams(16)
        .max_header_list_size(16 << 10)
        .keep_alive_interval(None);
    let conn = h2.serve_connection(TokioIo::new(tcp), service);
    tokio::select! {
        _ = conn => {}
        () = activity.expired(limits.idle) => {
            tracing::info!("OTLP receiver: closing a connection without requests");
        }
    }
}

/// The requests in flight on one connection, and since when it has had none.
#[derive(Debug)]
struct Activity {
    in_flight: AtomicUsize,
    idle_since: std::sync::Mutex<Instant>,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            idle_since: std::sync::Mutex::new(Instant::now()),
        }
    }
}

struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        }
    }
}

impl Activity {
    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// Resolves once the connection has had no request in flight for `idle`.
    async fn expired(&self, idle: Duration) {
        loop {
            let since = *self.idle_since.lock().unwrap_or_else(|p| p.into_inner());
            let busy = self.in_flight.load(Ordering::SeqCst) > 0;
            if !busy && since.elapsed() >= idle {
                return;
            }
            // Looked at again at the earliest moment it could have expired.
            let wait = if busy {
                idle
            } else {
                idle.saturating_sub(since.elapsed())
            };
            tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
        }
    }
}
