//! The two ends of every chain, compiled and light so that they are not what is measured:
//! a minimal hyper HTTP/1.1 backend answering 200 with a small body, and a hyper HTTP/1.1
//! keep-alive client. Each runs on one current-thread runtime, as its own process.
//!
//! The client speaks to its parent in lines on stdout: in latency mode one JSON
//! [`ClientResult`]; paired (`--also`, `load/paired.rs`) one [`PairedResult`]; in rate mode
//! (`load/rate.rs`) `start` when the measured phase begins, then the JSON.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpSocket, TcpStream};

use super::{BackendArgs, ClientArgs};
use crate::error::{LabError, io};

pub mod paired;
mod rate;
pub use paired::{BlockResult, PairedResult};

/// What the backend answers: small, like a health check or a cache hit.
pub const BODY: &[u8] = b"hello from the hopwise bench backend\n";

/// Most connections the rate client opens unless told otherwise. It needs more than one only
/// when a request is still in flight at the next tick; past this, like a pooled client, it
/// counts a tick with every connection busy as a stall instead of opening more. Without a cap
/// the proxies' peak memory measured the stalls (each connection ~45 KiB), not the proxies.
pub const RATE_CONNECTIONS: usize = 16;

fn runtime() -> Result<tokio::runtime::Runtime, LabError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("cannot start a runtime"))
}

/// `hopwise bench backend --listen ADDR`: serves until killed.
pub fn backend(args: &BackendArgs, out: &mut dyn Write) -> Result<(), LabError> {
    runtime()?.block_on(async {
        let what = || format!("cannot listen on {}", args.listen);
        let socket = match args.listen {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        }
        .map_err(io(what()))?;
        socket.set_reuseaddr(true).map_err(io(what()))?;
        socket.bind(args.listen).map_err(io(what()))?;
        let listener = socket.listen(1024).map_err(io(what()))?;
        let _ = writeln!(out, "backend listening on {}", args.listen);
        let _ = out.flush();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let svc = service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(BODY))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    })
}

/// What a client run measured. Latencies in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientResult {
    /// Measured requests that got a 200.
    pub requests: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Rate mode: ticks skipped because every connection was busy (the chain stalled).
    pub missed: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    /// Length of the measured phase.
    pub elapsed_s: f64,
    /// Connections opened.
    pub connections: usize,
    /// Requests sent again on a new connection because the server had closed the old one
    /// before they went out (not errors; not in the latency histogram).
    pub reconnects: u64,
}

type Sender = SendRequest<Empty<Bytes>>;

/// Where the client connects and the `Host` it names (`'static`: a per-request header costs
/// what the fixed `backend` always did).
#[derive(Debug, Clone, Copy)]
struct Target {
    addr: SocketAddr,
    host: &'static str,
    /// The namespace the connection is made in (`--target-netns`); none: this process's.
    netns: Option<&'static std::path::Path>,
}

impl Target {
    /// `--target` resolved (`IP:PORT`, or a name through the resolver: a captured client's
    /// hosts file), and `--host`.
    fn of(args: &ClientArgs) -> Result<Target, LabError> {
        use std::net::ToSocketAddrs as _;
        let addr = args
            .target
            .to_socket_addrs()
            .map_err(io(format!("cannot resolve --target {}", args.target)))?
            .next()
            .ok_or_else(|| LabError::Failed(format!("--target {}: no address", args.target)))?;
        http::HeaderValue::from_str(&args.host)
            .map_err(|_| LabError::Failed(format!("--host {}: not a header value", args.host)))?;
        // Once per process: the client lives for one measurement.
        let host = Box::leak(args.host.clone().into_boxed_str());
        let netns = args
            .target_netns
            .as_ref()
            .map(|p| &*Box::leak(p.clone().into_boxed_path()));
        Ok(Target { addr, host, netns })
    }
}

fn histogram() -> Result<Histogram<u64>, LabError> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| LabError::Failed(format!("cannot make a histogram: {e}")))
}

async fn connect(target: Target) -> Result<Sender, String> {
    let (netns, target) = (target.netns, target.addr);
    let tcp = match netns {
        None => TcpStream::connect(target).await,
        Some(ns) => paired::connect_in(ns, target),
    }
    .map_err(|e| format!("cannot connect to {target}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("HTTP/1.1 handshake with {target} failed: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// Why a request failed: never sent (the server had closed the kept-alive connection), or
/// sent and failed.
#[derive(Debug)]
enum Failure {
    NotSent(String),
    Failed(String),
}

/// One request; `Err` with a readable reason unless the answer is 200.
async fn request(send: &mut Sender, host: &'static str) -> Result<(), Failure> {
    send.ready()
        .await
        .map_err(|e| Failure::NotSent(format!("the connection closed: {e}")))?;
    let req = Request::get("/")
        .header(header::HOST, host)
        .body(Empty::new())
        .map_err(|e| Failure::Failed(e.to_string()))?;
    let resp = send.send_request(req).await.map_err(|e| {
        if e.is_canceled() {
            Failure::NotSent(format!(
                "the connection closed before the request was sent: {e}"
            ))
        } else {
            Failure::Failed(format!("request failed: {e}"))
        }
    })?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| Failure::Failed(format!("reading the body failed: {e}")))?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(Failure::Failed(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body).trim()
        )));
    }
    Ok(())
}

/// A request, sent once more on a new connection when the server had closed the kept-alive one
/// before it went out — what pooled HTTP clients do (hyper's legacy client by default). `Ok`
/// says whether it reconnected.
async fn request_or_reconnect(send: &mut Sender, target: Target) -> Result<bool, String> {
    match request(send, target.host).await {
        Ok(()) => Ok(false),
        Err(Failure::Failed(e)) => Err(e),
        Err(Failure::NotSent(first)) => {
            *send = connect(target)
                .await
                .map_err(|e| format!("{first}; then {e}"))?;
            match request(send, target.host).await {
                Ok(()) => Ok(true),
                Err(Failure::NotSent(e) | Failure::Failed(e)) => Err(e),
            }
        }
    }
}

fn result(
    h: &Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    connections: usize,
) -> ClientResult {
    ClientResult {
        requests: h.len(),
        errors,
        first_error,
        missed: 0,
        p50_ns: h.value_at_quantile(0.50),
        p90_ns: h.value_at_quantile(0.90),
        p99_ns: h.value_at_quantile(0.99),
        max_ns: h.max(),
        mean_ns: h.mean(),
        elapsed_s: elapsed.as_secs_f64(),
        connections,
        reconnects: 0,
    }
}

fn emit(out: &mut dyn Write, line: &str) -> Result<(), LabError> {
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(io("cannot write to the bench"))
}

/// `hopwise bench client …`: latency mode (`--requests`), paired (`--also`), or rate mode
/// (`--rate --duration`).
pub fn client(args: &ClientArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let rt = runtime()?;
    let target = Target::of(args)?;
    if let (false, Some(n)) = (args.also.is_empty(), args.requests) {
        let r = rt.block_on(paired::latency(
            target,
            &args.also,
            args.warmup,
            n,
            args.blocks,
        ))?;
        let json = serde_json::to_string(&r)
            .map_err(|e| LabError::Failed(format!("cannot render the result: {e}")))?;
        return emit(out, &json);
    }
    let r = match (args.requests, args.rate, args.duration) {
        (Some(n), _, _) => rt.block_on(latency(target, args.warmup, n))?,
        (None, Some(rate), Some(d)) => {
            let warm = args.warmup_time.map(|d| d.get()).unwrap_or_default();
            let conns = args.connections.max(1);
            rt.block_on(rate::at_rate(target, rate, conns, warm, d.get(), out))?
        }
        _ => {
            return Err(LabError::Failed(
                "say --requests N (latency), or --rate R --duration D".into(),
            ));
        }
    };
    let json = serde_json::to_string(&r)
        .map_err(|e| LabError::Failed(format!("cannot render the result: {e}")))?;
    emit(out, &json)
}

/// One request at a time on one connection: nothing queues, each time is the path's own.
/// A failed request is counted (the parent decides how many are too many) and the
/// connection is replaced if it closed.
async fn latency(target: Target, warmup: u64, n: u64) -> Result<ClientResult, LabError> {
    let mut h = histogram()?;
    let mut send = connect(target).await.map_err(LabError::Failed)?;
    let mut errors = 0;
    let mut reconnects = 0;
    let mut first_error = None;
    let mut start = Instant::now();
    for i in 0..warmup + n {
        if i == warmup {
            start = Instant::now();
        }
        if send.is_closed() {
            send = connect(target).await.map_err(LabError::Failed)?;
        }
        let t = Instant::now();
        match request_or_reconnect(&mut send, target).await {
            Ok(false) if i >= warmup => {
                let ns = t.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
                let _ = h.record(ns.max(1));
            }
            Ok(false) => {}
            Ok(true) => reconnects += 1,
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    Ok(ClientResult {
        reconnects,
        ..result(&h, errors, first_error, start.elapsed(), 1)
    })
}
