//! A middle app for chains of real proxies: serves HTTP/1.1 or gRPC (h2c), and for every request
//! calls its one upstream through its proxy's local port, passing the callee's failure up as it
//! got it — status and body, or gRPC code and message — as the seed's apps do. What it carries
//! from its request onto the call is the test's choice ([`Passes`]). The call runs on a task of
//! its own: like an app that does not pass its request's end on, it keeps going when its caller
//! has gone, so only the proxy's link can end it. It can also fail on its own, every Nth request
//! ([`Middle::fail_every`]): 503 or UNAVAILABLE without calling anyone; and take time of its own
//! after its call came back before it answers ([`Middle::think`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

/// What the app carries from the request it serves onto its call (and back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passes {
    Nothing,
    /// `traceparent` and `tracestate`, unchanged.
    W3c,
    /// `b3` and `X-B3-*`, unchanged.
    B3,
    /// As an OpenTelemetry app: the same trace, a span of its own per call.
    Otel,
    /// `x-hopwise-timeout-ms` onto the call, `x-hopwise-retries-exhausted` back onto its answer.
    Hopwise,
    /// `grpc-timeout` onto the call.
    GrpcDeadline,
}

impl Passes {
    /// What `services.<name>.carries` says of such an app.
    pub fn carries(self) -> &'static str {
        match self {
            Passes::Nothing => "[]",
            Passes::W3c | Passes::B3 | Passes::Otel => "[trace-context]",
            Passes::Hopwise => "[hopwise-headers]",
            Passes::GrpcDeadline => "[grpc-deadline]",
        }
    }

    fn copies(self) -> &'static [&'static str] {
        match self {
            Passes::Nothing | Passes::Otel => &[],
            Passes::W3c => &["traceparent", "tracestate"],
            Passes::B3 => &[
                "b3",
                "x-b3-traceid",
                "x-b3-spanid",
                "x-b3-parentspanid",
                "x-b3-sampled",
            ],
            Passes::Hopwise => &["x-hopwise-timeout-ms"],
            Passes::GrpcDeadline => &["grpc-timeout"],
        }
    }
}

pub struct Middle {
    pub addr: SocketAddr,
    upstream: Arc<OnceLock<SocketAddr>>,
    /// Calls its proxy ended because the request they were made for had gone.
    pub caller_gone: Arc<AtomicUsize>,
    own: Arc<Own>,
}

/// The app's own failures: every `every`th request (0: none), and how many it made.
#[derive(Debug, Default)]
struct Own {
    every: AtomicUsize,
    seen: AtomicUsize,
    failed: AtomicUsize,
    /// Microseconds between the call's answer and the app's.
    think: AtomicUsize,
}

impl Own {
    fn fails_now(&self) -> bool {
        let every = self.every.load(Ordering::SeqCst);
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        let fails = every > 0 && n.is_multiple_of(every);
        if fails {
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
        fails
    }
}

impl Middle {
    /// Where its calls go: its proxy's local port for the upstream.
    pub fn calls(&self, upstream: SocketAddr) {
        self.upstream.set(upstream).unwrap();
    }

    /// From now on every `n`th request fails on its own (503 or UNAVAILABLE, no call made).
    pub fn fail_every(&self, n: usize) {
        self.own.every.store(n, Ordering::SeqCst);
    }

    /// From now on it takes `t` after each call's answer before it answers.
    pub fn think(&self, t: std::time::Duration) {
        let us = usize::try_from(t.as_micros()).unwrap();
        self.own.think.store(us, Ordering::SeqCst);
    }

    /// The requests it failed on its own.
    pub fn own_failures(&self) -> usize {
        self.own.failed.load(Ordering::SeqCst)
    }
}

/// Starts a middle app on 127.0.0.1:0.
pub async fn middle(passes: Passes, grpc: bool) -> Middle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let upstream = Arc::new(OnceLock::new());
    let caller_gone = Arc::new(AtomicUsize::new(0));
    let own = Arc::new(Own::default());
    let (up, gone, mine) = (upstream.clone(), caller_gone.clone(), own.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let (up, gone, mine) = (up.clone(), gone.clone(), mine.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let (up, gone) = (up.clone(), gone.clone());
                    let fails = mine.fails_now();
                    let think = mine.think.load(Ordering::SeqCst) as u64;
                    async move {
                        if fails {
                            let own = (503, HeaderMap::new(), Bytes::from_static(b"own"), None);
                            return Ok::<_, Infallible>(answer(Some(own), passes, grpc));
                        }
                        let to = *up.get().unwrap();
                        let answer = serve(req, passes, grpc, to, gone).await;
                        if think > 0 {
                            tokio::time::sleep(std::time::Duration::from_micros(think)).await;
                        }
                        Ok::<_, Infallible>(answer)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Middle {
        addr,
        upstream,
        caller_gone,
        own,
    }
}

/// What the call got: status, head, body, trailers; `None`: no answer at all.
type Got = Option<(u16, HeaderMap, Bytes, Option<HeaderMap>)>;

async fn serve(
    req: Request<Incoming>,
    passes: Passes,
    grpc: bool,
    to: SocketAddr,
    gone: Arc<AtomicUsize>,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut call = Request::builder()
        .method(parts.method.clone())
        .uri(format!("http://{to}{}", parts.uri.path()))
        .body(Full::new(body))
        .unwrap();
    let h = call.headers_mut();
    for name in ["content-type", "te"].iter().chain(passes.copies()) {
        if let Some(v) = parts.headers.get(*name) {
            h.insert(*name, v.clone());
        }
    }
    if passes == Passes::Otel
        && let Some(tp) = parts
            .headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
    {
        let span = format!("{:016x}", fastrand::u64(1..));
        let own = format!("{}-{span}{}", &tp[..35], &tp[52..]);
        h.insert("traceparent", HeaderValue::from_str(&own).unwrap());
    }
    // On a task of its own: the app's request ending does not end its call.
    let got = tokio::spawn(async move {
        let got = send(call, grpc).await;
        let ended = |h: &HeaderMap| h.get("x-hopwise-error").is_some_and(|v| v == "caller-gone");
        if got.as_ref().is_some_and(|(_, h, _, _)| ended(h)) {
            gone.fetch_add(1, Ordering::SeqCst);
        }
        got
    })
    .await
    .unwrap_or(None);
    answer(got, passes, grpc)
}

async fn send(call: Request<Full<Bytes>>, grpc: bool) -> Got {
    let addr = call
        .uri()
        .authority()?
        .as_str()
        .parse::<SocketAddr>()
        .ok()?;
    let tcp = TcpStream::connect(addr).await.ok()?;
    let _ = tcp.set_nodelay(true);
    let io = TokioIo::new(tcp);
    let resp = if grpc {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .ok()?;
        tokio::spawn(conn);
        send.send_request(call).await.ok()?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.ok()?;
        tokio::spawn(conn);
        send.send_request(call).await.ok()?
    };
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.ok()?;
    let trailers = collected.trailers().cloned();
    Some((
        parts.status.as_u16(),
        parts.headers,
        collected.to_bytes(),
        trailers,
    ))
}

/// The callee's answer passed up as it came (a failure to get one: 502 or UNAVAILABLE).
fn answer(got: Got, passes: Passes, grpc: bool) -> Response<Full<Bytes>> {
    let (status, head, body, trailers) = got.unwrap_or((
        502,
        HeaderMap::new(),
        Bytes::from_static(b"no answer"),
        None,
    ));
    let mut r = if grpc {
        let mut r = Response::new(Full::new(Bytes::new()));
        let find = |name: &str| {
            head.get(name)
                .or_else(|| trailers.as_ref().and_then(|t| t.get(name)))
                .cloned()
        };
        let h = r.headers_mut();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        h.insert(
            "grpc-status",
            find("grpc-status").unwrap_or(HeaderValue::from_static("14")),
        );
        if let Some(m) = find("grpc-message") {
            h.insert("grpc-message", m);
        }
        r
    } else {
        let mut r = Response::new(Full::new(body));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        r
    };
    if passes == Passes::Hopwise
        && let Some(mark) = head.get("x-hopwise-retries-exhausted")
    {
        r.headers_mut()
            .insert("x-hopwise-retries-exhausted", mark.clone());
    }
    r
}
