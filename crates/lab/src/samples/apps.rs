//! The sample apps `hopwise up` runs, one process per copy (`hopwise sample …`, hidden): the
//! app port (HTTP/1.1 and h2c; TLS for the fee) with the copy's fault knobs applied to every
//! request, and the knob port. `down` closes the app port — the listener and every open
//! connection — and keeps the port bound without listening, so connections are refused and
//! no client socket can be given the port meanwhile; clearing it listens again.
//!
//! - `chain`: per request, calls each service in its `calls` (a call with routes: each route,
//!   on its path with its method) through its proxy's local port for that service, or by the
//!   service's name when it runs captured ([`super::callee`]) — real gRPC
//!   (tonic) when the callee speaks gRPC — and answers `{"service","copy","calls":[…]}`; 502
//!   (gRPC: UNAVAILABLE) when a call failed.
//! - `leaf`: answers `{"service","copy"}`.
//! - `fee`: [`FeeState`] without the seed's scripted failures, over TLS.
//!
//! `/healthz` (the proxy's health probe) bypasses the knobs: only `down` makes a copy unhealthy.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hopwise_model::{Mesh, Protocol, SampleKind};
use http::{HeaderMap, HeaderValue, Method, Request, Response, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tonic::body::Body;
use tonic::codegen::Service;

use super::callee::Callee;
use super::fee::FeeState;
use super::knobs::{self, Knobs};
use super::pb;
use super::wire::{self, tls_acceptor};
use crate::error::{LabError, io};

/// The path of the proxy's health probe (`hopwise proxy --health-path`).
pub const HEALTH_PATH: &str = "/healthz";

/// How long a chain sample waits for one call (its proxy's timeouts fire well before).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `hopwise sample …`: one copy of a sample app (started by `hopwise up`).
#[derive(Debug, Clone, clap::Args)]
pub struct SampleArgs {
    /// The mesh file.
    #[arg(long)]
    pub mesh: PathBuf,
    #[arg(long)]
    pub service: String,
    #[arg(long, default_value_t = 0)]
    pub copy: usize,
    /// The app port.
    #[arg(long)]
    pub listen: SocketAddr,
    /// The fault knobs' port.
    #[arg(long)]
    pub knobs: SocketAddr,
    /// The network namespace the knobs' port is bound in (`/proc/PID/ns/net`): a captured
    /// copy's `up` keeps it on the host's loopback, where `hopwise fault` and the dashboard
    /// reach it, while the app runs in the copy's namespace.
    #[arg(long)]
    pub knobs_netns: Option<PathBuf>,
    /// How a service called is reached, repeatable: `SERVICE=IP:PORT`, its proxy's local port;
    /// or `SERVICE=NAME[:PORT]`, by name (a captured copy: resolved in its namespace).
    #[arg(long, value_parser = super::callee::parse_callee)]
    pub upstream: Vec<(String, Callee)>,
    /// Where `<service>.pem` and `<service>-key.pem` are (the fee's TLS).
    #[arg(long)]
    pub certs: Option<PathBuf>,
    /// The run directory of the `up` that started it (so a stale process can be recognised).
    #[arg(long)]
    pub run: Option<PathBuf>,
}

pub fn parse_upstream(s: &str) -> Result<(String, SocketAddr), String> {
    let (name, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: write SERVICE=IP:PORT"))?;
    let addr = addr
        .parse()
        .map_err(|_| format!("`{addr}` is not an address (IP:PORT)"))?;
    Ok((name.to_owned(), addr))
}

/// One call a chain sample makes per request.
#[derive(Debug, Clone)]
struct Target {
    to: String,
    route: Option<String>,
    method: Method,
    path: String,
    addr: Callee,
    grpc: Option<pb::sample_client::SampleClient<tonic::transport::Channel>>,
}

/// What every request of one copy shares.
#[derive(Debug)]
struct Core {
    service: String,
    copy: usize,
    kind: SampleKind,
    grpc: bool,
    targets: Vec<Target>,
    http: Client<HttpConnector, Full<Bytes>>,
    fee: FeeState,
}

impl Core {
    fn new(mesh: &Mesh, args: &SampleArgs) -> Result<Core, LabError> {
        let s = mesh.services.get(&args.service).ok_or_else(|| {
            LabError::Failed(format!(
                "`{}` is not a service of the mesh file",
                args.service
            ))
        })?;
        let kind = s.sample.ok_or_else(|| {
            LabError::Failed(format!(
                "`{}` has no `sample` in the mesh file",
                args.service
            ))
        })?;
        let mut targets = Vec::new();
        for call in &s.calls {
            let Some((_, addr)) = args.upstream.iter().find(|(n, _)| *n == call.to) else {
                return Err(LabError::Failed(format!(
                    "no --upstream {}=ADDR: the sample cannot call it",
                    call.to
                )));
            };
            let path = match &call.route_path {
                // A prefix that names a collection gets a member, as a real client would send.
                Some(p) if p.ends_with('/') => format!("{p}sample"),
                Some(p) => p.clone(),
                None => "/".to_owned(),
            };
            let grpc = match call.protocol {
                Protocol::Grpc => Some(pb::sample_client::SampleClient::new(
                    tonic::transport::Channel::from_shared(format!("http://{}", addr.authority()))
                        .map_err(|e| LabError::Failed(format!("--upstream {addr}: {e}")))?
                        .connect_lazy(),
                )),
                Protocol::Http => None,
            };
            targets.push(Target {
                to: call.to.clone(),
                route: call.route.clone(),
                method: Method::from_bytes(call.method.as_bytes()).unwrap_or(Method::GET),
                path,
                addr: addr.clone(),
                grpc,
            });
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Ok(Core {
            service: args.service.clone(),
            copy: args.copy,
            kind,
            grpc: s.protocol == Protocol::Grpc,
            targets,
            http: Client::builder(TokioExecutor::new()).build(connector),
            fee: FeeState::new(false),
        })
    }

    /// The work of `chain` and `leaf`: `(every call answered well, the JSON answer)`. `context`:
    /// the trace headers of the request being served, passed on to every call it makes (what
    /// docs/observability.md asks of an app), so a request through the shop is one trace.
    async fn work(&self, context: &HeaderMap) -> (bool, serde_json::Value) {
        let mut calls = Vec::new();
        let mut ok = true;
        for t in &self.targets {
            let (good, status) = match &t.grpc {
                Some(client) => {
                    let mut client = client.clone();
                    let mut req = tonic::Request::new(pb::CallRequest {
                        from: self.service.clone(),
                    });
                    for (name, value) in context {
                        if let Ok(v) =
                            tonic::metadata::AsciiMetadataValue::try_from(value.as_bytes())
                        {
                            let key = tonic::metadata::AsciiMetadataKey::from_bytes(
                                name.as_str().as_bytes(),
                            );
                            if let Ok(k) = key {
                                req.metadata_mut().insert(k, v);
                            }
                        }
                    }
                    match tokio::time::timeout(CALL_TIMEOUT, client.call(req)).await {
                        Ok(Ok(_)) => (true, "OK".to_owned()),
                        Ok(Err(s)) => (false, format!("{:?}", s.code())),
                        Err(_) => (false, "no answer".to_owned()),
                    }
                }
                None => self.http_call(t, context).await,
            };
            ok &= good;
            calls.push(json!({ "to": t.to, "route": t.route, "status": status }));
        }
        let mut answer = json!({ "service": self.service, "copy": self.copy });
        if self.kind == SampleKind::Chain {
            answer["calls"] = json!(calls);
        }
        (ok, answer)
    }

    async fn http_call(&self, t: &Target, context: &HeaderMap) -> (bool, String) {
        let req = Request::builder()
            .method(t.method.clone())
            .uri(format!("http://{}{}", t.addr.authority(), t.path))
            .header(header::HOST, t.to.as_str())
            .body(Full::new(Bytes::new()));
        let Ok(mut req) = req else {
            return (false, "bad request".to_owned());
        };
        req.headers_mut().extend(context.clone());
        let exchange = async {
            let resp = self.http.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            // Read to the end, so the connection goes back to the pool.
            let _ = resp.into_body().collect().await;
            Ok::<_, String>(status)
        };
        match tokio::time::timeout(CALL_TIMEOUT, exchange).await {
            Ok(Ok(s)) => (s.is_success(), s.as_u16().to_string()),
            Ok(Err(e)) => (false, e),
            Err(_) => (false, "no answer".to_owned()),
        }
    }
}

/// The gRPC face of a sample whose service speaks gRPC.
#[derive(Debug, Clone)]
struct GrpcApp(Arc<Core>);

#[tonic::async_trait]
impl pb::sample_server::Sample for GrpcApp {
    async fn call(
        &self,
        req: tonic::Request<pb::CallRequest>,
    ) -> Result<tonic::Response<pb::CallReply>, tonic::Status> {
        let context = trace_headers(&req.metadata().clone().into_headers());
        let (ok, answer) = self.0.work(&context).await;
        if ok {
            Ok(tonic::Response::new(pb::CallReply {
                json: answer.to_string(),
            }))
        } else {
            Err(tonic::Status::unavailable(answer.to_string()))
        }
    }
}

/// The request was processed and its answer is dropped on purpose (`lose_response`): the
/// server closes the connection (HTTP/1.1) or resets the stream (HTTP/2) without answering.
#[derive(Debug)]
struct Lost;

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the answer was lost on purpose (lose_response)")
    }
}

impl std::error::Error for Lost {}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

fn full(r: Response<Full<Bytes>>) -> Response<Body> {
    r.map(Body::new)
}

/// The trace headers of a request (W3C and B3, every format), to pass on.
fn trace_headers(h: &HeaderMap) -> HeaderMap {
    use hopwise_api::trace_context as tc;
    let mut out = HeaderMap::new();
    for name in [
        tc::TRACEPARENT,
        tc::TRACESTATE,
        tc::B3,
        tc::B3_TRACE_ID,
        tc::B3_SPAN_ID,
        tc::B3_PARENT_SPAN_ID,
        tc::B3_SAMPLED,
        tc::B3_FLAGS,
    ] {
        if let Some(v) = h.get(&name) {
            out.insert(name, v.clone());
        }
    }
    out
}

/// One request: health, then the knobs, then the work.
fn handle(
    req: Request<Incoming>,
    knobs: Arc<Knobs>,
    core: Arc<Core>,
) -> BoxFuture<Result<Response<Body>, Lost>> {
    Box::pin(async move {
        if req.uri().path() == HEALTH_PATH {
            return Ok(full(wire::respond(200, "text/plain", "ok\n")));
        }
        let grpc = req
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        let d = knobs.decide();
        if d.hang {
            std::future::pending::<()>().await;
        }
        if !d.latency.is_zero() {
            tokio::time::sleep(d.latency).await;
        }
        if d.fail {
            return Ok(failure(grpc));
        }
        let resp = if grpc && core.grpc {
            let mut server = pb::sample_server::SampleServer::new(GrpcApp(core.clone()));
            match server.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        } else if core.kind == SampleKind::Fee {
            let key = req
                .headers()
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            full(core.fee.work(req.uri().path(), key))
        } else {
            let (ok, answer) = core.work(&trace_headers(req.headers())).await;
            full(wire::json(if ok { 200 } else { 502 }, &answer))
        };
        if d.lose {
            return Err(Lost);
        }
        Ok(resp)
    })
}

/// 503, or gRPC UNAVAILABLE (trailers-only), as a fault.
fn failure(grpc: bool) -> Response<Body> {
    if grpc {
        let mut r = wire::respond(200, "application/grpc", Bytes::new());
        let h = r.headers_mut();
        h.insert("grpc-status", HeaderValue::from_static("14"));
        h.insert("grpc-message", HeaderValue::from_static("fault injected"));
        full(r)
    } else {
        full(wire::json(
            503,
            &json!({ "error": "fault injected (error_rate or fail_first)" }),
        ))
    }
}

async fn connection(tcp: TcpStream, tls: Option<TlsAcceptor>, knobs: Arc<Knobs>, core: Arc<Core>) {
    let _ = tcp.set_nodelay(true);
    let svc = service_fn(move |req| handle(req, knobs.clone(), core.clone()));
    wire::serve_connection(tcp, tls, svc).await;
}

fn socket(addr: SocketAddr) -> std::io::Result<TcpSocket> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    Ok(s)
}

/// Listens on `addr`; while `down`, holds it bound and refuses connections.
async fn serve_app(
    first: TcpListener,
    addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    knobs: Arc<Knobs>,
    core: Arc<Core>,
) {
    let mut down = knobs.watch_down();
    let mut listener = Some(first);
    loop {
        let Some(l) = listener.take() else { return };
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = l.accept() => match accepted {
                    Ok((tcp, _)) => {
                        conns.spawn(connection(tcp, tls.clone(), knobs.clone(), core.clone()));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                },
                changed = down.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *down.borrow_and_update() {
                        break;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        drop(l);
        conns.shutdown().await;
        let held = socket(addr);
        while *down.borrow_and_update() {
            if down.changed().await.is_err() {
                return;
            }
        }
        drop(held);
        // Listen again; the port was held, so this only fails if the system refuses.
        while listener.is_none() {
            match socket(addr).and_then(|s| s.listen(1024)) {
                Ok(l) => listener = Some(l),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// The knobs' listener, bound in `--knobs-netns` when given (in a runtime).
fn knob_listener(args: &SampleArgs) -> Result<TcpListener, LabError> {
    let what = format!("cannot listen on {} (knobs)", args.knobs);
    let std = hopwise_proxy::capture::in_netns(args.knobs_netns.as_deref(), || {
        std::net::TcpListener::bind(args.knobs)
    })
    .and_then(|r| r)
    .and_then(|l| l.set_nonblocking(true).map(|()| l))
    .map_err(io(what.clone()))?;
    TcpListener::from_std(std).map_err(io(what))
}

/// Runs one sample copy until SIGTERM or Ctrl-C.
pub fn run(args: &SampleArgs) -> Result<(), LabError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("cannot start the sample's runtime"))?;
    rt.block_on(async {
        let text = std::fs::read_to_string(&args.mesh)
            .map_err(io(format!("cannot read {}", args.mesh.display())))?;
        let mesh = Mesh::from_yaml(&text)
            .map_err(|d| LabError::Failed(d.render(&args.mesh.display().to_string())))?;
        let core = Arc::new(Core::new(&mesh, args)?);
        let tls = match core.kind {
            SampleKind::Fee => {
                let certs = args.certs.clone().ok_or_else(|| {
                    LabError::Failed("the fee sample needs --certs DIR".to_owned())
                })?;
                Some(tls_acceptor(&certs, &args.service)?)
            }
            _ => None,
        };
        let knobs = Knobs::new();
        let knob_listener = knob_listener(args)?;
        let _knob_server = knobs::serve(knob_listener, knobs.clone());
        let app = socket(args.listen)
            .and_then(|s| s.listen(1024))
            .map_err(io(format!("cannot listen on {} (app)", args.listen)))?;
        let server = tokio::spawn(serve_app(app, args.listen, tls, knobs, core));
        hopwise_proxy::server::shutdown_signal().await;
        server.abort();
        Ok::<_, LabError>(())
    })
}

#[cfg(test)]
mod trace_tests {
    use super::*;

    /// A sample app passes on every trace header it was sent, and nothing else.
    #[test]
    fn the_trace_headers_are_what_is_passed_on() {
        let mut h = HeaderMap::new();
        h.insert(
            "traceparent",
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        h.insert("tracestate", HeaderValue::from_static("v=1"));
        h.insert("x-b3-sampled", HeaderValue::from_static("1"));
        h.insert(
            "x-hopwise-peer-identity",
            HeaderValue::from_static("spiffe://x/service/y"),
        );
        h.insert("authorization", HeaderValue::from_static("secret"));
        let passed = trace_headers(&h);
        let mut names: Vec<&str> = passed.keys().map(http::HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["traceparent", "tracestate", "x-b3-sampled"]);
    }
}
