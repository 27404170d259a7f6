//! The inbound request lifecycle, read top to bottom: the caller's headers stripped of what
//! must not cross a hop → the path made canonical ([`hopwise_model::path`]: 400 if it cannot
//! be) → who the caller is ([`Caller`], from the handshake; fail closed) → authorise it on the
//! canonical path → the rate limits ([`rate`]: 429) → the caps on requests to the app
//! ([`limits`]) → the service's fault, if any ([`fault`]) → `x-hopwise-peer-identity` set
//! from the certificate alone → forward the canonical path to the local app in plain HTTP (h2c
//! for gRPC), waiting at most `inbound.timeout` for its answer. A protocol switch or CONNECT
//! takes the same checks, then [`crate::upgrade::inbound`].

mod fault;
pub mod limits;
pub mod rate;
mod switch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hopwise_model::ports::Target;
use hopwise_model::{GrpcCode, Protocol};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::uri::Scheme;
use http::{Request, Response};
use hyper::body::Incoming;
use rustls_pki_types::CertificateDer;
use tokio::time::Instant;

use crate::access_log::{self, LogEntry};
use crate::attempts::{self, Via};
use crate::body::Body;
use crate::config::ProxyConfig;
use crate::error::{ProxyError, local};
use crate::headers::{PEER, is_grpc, normalize_path, rewrite, rewrite_h1, strip_hop_by_hop};
use crate::link::Links;
use crate::metrics::{Direction, Metrics, RouteMetrics};
use crate::otlp::{self, Recording};
use crate::recorded::Recorded;
use crate::replay::{Replay, ReplayBody};
use crate::tls::{IdentityError, peer_identity};
use crate::trace::ProxySpan;
use crate::upgrade::Switch;
use crate::upstream::{self, Connector, Dest, Failed, H1Pool, Pool};

use limits::{CallerKey, InboundGauges};
use rate::RateLimiter;

/// The port a caller's app dialed (`hopwise_api::names::SERVICE_PORT`).
const SERVICE_PORT: HeaderName = HeaderName::from_static(hopwise_api::names::SERVICE_PORT);

/// The caller's `x-hopwise-service-port`, taken off the request (it never reaches the app).
fn asked_port(headers: &mut HeaderMap) -> Option<HeaderValue> {
    headers.remove(SERVICE_PORT)
}

/// Who is calling, as the connection's handshake established it.
#[derive(Debug)]
pub enum Caller {
    /// The proxy runs without TLS (`--plaintext`): there is no identity, and nothing to check.
    Plaintext,
    /// A certificate from the mesh's CA with a valid SPIFFE ID.
    Verified(Peer),
    /// A certificate from the mesh's CA that names nobody: refused, whatever the rules say.
    Unidentified(IdentityError),
}

/// The caller's verified identity, with its header value built once per connection.
#[derive(Debug)]
pub struct Peer {
    pub id: Arc<str>,
    header: HeaderValue,
    /// How the per-caller cap counts this identity, hashed once per connection.
    key: CallerKey,
}

impl Caller {
    /// The caller of a mutual-TLS connection, from the certificates it presented (already
    /// verified against the trust bundle by the handshake).
    pub fn of_tls(certs: Option<&[CertificateDer<'_>]>) -> Caller {
        let Some(cert) = certs.and_then(<[_]>::first) else {
            return Caller::Unidentified(IdentityError::NoCertificate);
        };
        match peer_identity(cert) {
            Ok(id) => Caller::verified(&id),
            Err(e) => Caller::Unidentified(e),
        }
    }

    /// A caller with identity `id` (a checked SPIFFE ID).
    pub fn verified(id: &str) -> Caller {
        match HeaderValue::from_str(id) {
            Ok(header) => Caller::Verified(Peer {
                id: Arc::from(id),
                header,
                key: CallerKey::of(id),
            }),
            // A checked SPIFFE ID is always a header value; if not, it names nobody.
            Err(_) => Caller::Unidentified(IdentityError::Unparsable),
        }
    }

    fn key(&self) -> Option<CallerKey> {
        match self {
            Caller::Verified(p) => Some(p.key),
            _ => None,
        }
    }
}

/// Inbound forwarding state of one worker: the pool to the local app.
pub struct Inbound {
    config: Arc<ProxyConfig>,
    app: Option<SocketAddr>,
    /// HTTP/1.1 apps.
    h1: Arc<H1Pool>,
    /// gRPC apps (h2c).
    h2: Pool,
    /// Metrics handles by index into `config.inbound_routes`, then the catch-all `inbound`
    /// (none when there is no inbound port).
    routes: Vec<RouteMetrics>,
    fallback: Option<RouteMetrics>,
    metrics: Arc<Metrics>,
    /// The caps, shared by every worker of the proxy.
    gauges: Arc<InboundGauges>,
    /// The rate limits, shared by every worker of the proxy (none when none is set).
    rates: Option<Arc<RateLimiter>>,
    /// Requests tied to the app's calls through trace context ([`crate::link`]).
    links: Option<Arc<Links>>,
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound").field("app", &self.app).finish()
    }
}

impl Inbound {
    /// One worker's inbound state for `config`; the pools to the app are `previous`'s (the
    /// configuration this one replaces) when the app's address is the same.
    pub fn new(
        config: Arc<ProxyConfig>,
        metrics: Arc<Metrics>,
        gauges: Arc<InboundGauges>,
        previous: Option<&Inbound>,
    ) -> Self {
        let (h1, h2) = match previous.filter(|p| p.app == config.app) {
            Some(p) => (p.h1.clone(), p.h2.clone()),
            None => {
                let connector = Connector::plain(Duration::from_secs(1));
                (
                    Arc::new(H1Pool::new(connector.clone(), config.timeouts.pool_idle)),
                    upstream::pool(connector, true, config.timeouts.pool_idle),
                )
            }
        };
        let (routes, fallback) = if config.inbound.is_some() {
            let route = |name: &str| metrics.route(Direction::Inbound, &config.service, name);
            (
                config
                    .inbound_routes
                    .iter()
                    .map(|(n, _)| route(n))
                    .collect(),
                Some(route("inbound")),
            )
        } else {
            (Vec::new(), None)
        };
        Inbound {
            app: config.app,
            config,
            h1,
            h2,
            routes,
            fallback,
            metrics,
            gauges,
            rates: None,
            links: None,
        }
    }

    /// Where on the app's host this request goes: the app's own address, or the port of it
    /// that the caller's `x-hopwise-service-port` (the port its app dialed) maps to through this
    /// service's `ports` — never a port they do not list. The header never reaches the app.
    /// `asked` is the header's value, taken from the request ([`asked_port`]).
    fn app_for(&self, asked: Option<HeaderValue>) -> Result<Option<SocketAddr>, ProxyError> {
        let Some(value) = asked else {
            return Ok(self.app);
        };
        let port = (value.to_str().ok())
            .and_then(|v| v.parse::<u16>().ok())
            .ok_or(ProxyError::NoPort(0))?;
        match self.config.ports.target(port) {
            None => Err(ProxyError::NoPort(port)),
            Some(Target::App) => Ok(self.app),
            Some(Target::Port(p)) => Ok(self.app.map(|a| SocketAddr::new(a.ip(), p))),
        }
    }

    /// Links this proxy's inbound requests to the app's calls (the table outbound reads).
    #[must_use]
    pub fn linked(self, links: Arc<Links>) -> Self {
        Inbound {
            links: Some(links),
            ..self
        }
    }

    /// One request from `caller`, whose connection comes from `from`.
    pub async fn handle(
        &self,
        caller: &Caller,
        from: Option<SocketAddr>,
        mut req: Request<Incoming>,
    ) -> Response<Body> {
        let version = req.version();
        let (tracing, sink) = (self.config.tracing.as_ref(), self.metrics.span_sink());
        let service = &self.config.service;
        let scheme = match caller {
            Caller::Plaintext => "http",
            _ => "https",
        };
        let direction = otlp::Direction::Inbound;
        let traced = otlp::begin(tracing, sink, direction, service, scheme, &mut req);
        if let (Some(r), Some(from)) = (&traced.recording, from) {
            r.client(from);
        }
        let span = traced.span.as_ref();
        let peer = match caller {
            Caller::Verified(p) => Some(&p.id),
            _ => None,
        };
        let (logs, tap) = (self.metrics.log_sink(), self.metrics.tap());
        let log = access_log::begin(&self.config, logs, tap, "inbound", peer, span, &req);
        // Finished with the answer, or with how it ended if the caller goes first.
        let recorded = Recorded::new(traced.recording, log, req.headers());
        let resp = self.forward(caller, span, recorded.log(), req).await;
        let mut resp = recorded.finish(resp);
        *resp.version_mut() = version;
        resp
    }

    /// A local reply, counted (and recorded on the route when one matched).
    fn refuse(
        &self,
        rm: Option<&RouteMetrics>,
        err: ProxyError,
        grpc: bool,
        start: Instant,
    ) -> Response<Body> {
        self.metrics
            .local_reply(Direction::Inbound, &self.config.service, err.reason());
        let resp = local(err, grpc, GrpcCode::DeadlineExceeded);
        if let Some(rm) = rm {
            rm.answered(&resp, start.elapsed(), Duration::ZERO);
        }
        resp
    }

    async fn forward(
        &self,
        caller: &Caller,
        span: Option<&ProxySpan>,
        log: Option<&LogEntry<'_>>,
        mut req: Request<Incoming>,
    ) -> Response<Body> {
        if let Some(switch) = Switch::of(&req) {
            // Boxed: the carried connection's state inline made every request's future ~8 KiB
            // bigger, and hyper moves that future once per request (memcpy).
            return Box::pin(self.switch(caller, switch, req)).await;
        }
        let start = Instant::now();
        let grpc = is_grpc(req.headers());
        // Before anything of ours is added: nothing the caller sends can name our headers.
        strip_hop_by_hop(req.headers_mut());
        let asked = asked_port(req.headers_mut());
        if let Err(e) = normalize_path(&mut req) {
            return self.refuse(None, ProxyError::BadPath(e), grpc, start);
        }
        let path = req.uri().path();
        let rm = self
            .config
            .inbound_route_index(path)
            .and_then(|i| self.routes.get(i))
            .or(self.fallback.as_ref());
        if let Some(rm) = rm {
            rm.request();
        }
        let recording = Recording::of(req.extensions()).cloned();
        if let Some(r) = &recording {
            let peer = match caller {
                Caller::Verified(p) => Some(&*p.id),
                _ => None,
            };
            let index = self.config.inbound_route_index(path);
            let template = index.map(|i| self.config.inbound_routes[i].1.as_str());
            r.route(None, self.config.inbound_route(path), template, peer);
        }
        if let Some(l) = log {
            l.route(None, self.config.inbound_route(path));
        }
        if let Some(err) = self.refused(caller, path) {
            return self.refuse(rm, err, grpc, start);
        }
        let app = match self.app_for(asked) {
            Ok(app) => app,
            Err(err) => return self.refuse(rm, err, grpc, start),
        };
        let Some(app) = app else {
            return local(
                ProxyError::NoEndpoint(self.config.service.clone()),
                grpc,
                GrpcCode::DeadlineExceeded,
            );
        };
        if let Err(err) = self.within_rate(caller, path) {
            return self.refuse(rm, err, grpc, start);
        }
        let _admitted = match self.gauges.admit(caller.key()) {
            Ok(a) => a,
            Err(cap) => {
                self.metrics.limit_tripped(&self.config.service, cap);
                return self.refuse(rm, ProxyError::InboundOverflow(cap), grpc, start);
            }
        };
        // Decided (and counted) only for a request that got its place: one refused by a cap
        // was not delayed nor aborted by the fault.
        let injected = self.injected(req.headers());
        if let Some(delay) = injected.delay {
            tokio::time::sleep(delay).await;
        }
        if let Some(answer) = injected.abort {
            return self.refuse(rm, ProxyError::Fault(answer), grpc, start);
        }
        set_identity(caller, req.headers_mut());
        let sent = Instant::now();
        // The app's deadline, decided once: `inbound.timeout` from now.
        let deadline = self.gauges.limits().timeout.map(|t| sent + t.get());
        // The app's calls for this request are tied to it until it ends: by trace context
        // when they carry it, else by time (`link`).
        let mut answering =
            (self.links.as_deref()).map(|l| l.begin(span, req.headers(), deadline, grpc));
        // Pinned where it is: handing it to `tokio::time::timeout` by value moved it (a
        // memcpy of the whole future per request, measured).
        let mut send = std::pin::pin!(async {
            if self.config.protocol == Protocol::Grpc {
                self.send_h2c(app, req).await
            } else {
                self.send_h1(app, req).await
            }
        });
        // Dropping the request on expiry drops its connection to the app (or resets its
        // stream): the app's work for a caller who holds on is bounded too.
        let result = match deadline {
            Some(d) => tokio::select! {
                biased;
                r = &mut send => r,
                () = tokio::time::sleep_until(d) => Err(ProxyError::AppTimeout),
            },
            None => send.await,
        };
        let upstream_time = sent.elapsed();
        if let Some(l) = log {
            l.upstream(upstream_time);
        }
        if let Some(r) = recording {
            r.app_time(upstream_time);
        }
        let resp = match result {
            Ok(resp) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                if let Some(a) = answering.as_mut() {
                    a.answered(parts.status, &mut parts.headers);
                }
                Response::from_parts(parts, Body::Upstream(body))
            }
            Err(e) => {
                self.metrics
                    .local_reply(Direction::Inbound, &self.config.service, e.reason());
                local(e, grpc, GrpcCode::DeadlineExceeded)
            }
        };
        if let Some(rm) = rm {
            rm.answered(&resp, start.elapsed(), upstream_time);
        }
        resp
    }

    /// Why `caller` may not call `path`, if it may not: a caller the handshake could not
    /// identify never may; a verified one as the rules say; without TLS there is no one to check.
    fn refused(&self, caller: &Caller, path: &str) -> Option<ProxyError> {
        match caller {
            Caller::Plaintext => None,
            Caller::Verified(p) if self.config.authorizes(&p.id, path) => None,
            Caller::Verified(p) => Some(ProxyError::Forbidden(p.id.to_string())),
            Caller::Unidentified(e) => Some(ProxyError::NoIdentity(e.to_string())),
        }
    }

    /// HTTP/1.1 to the app. A request the connection never took (the app closed it just as we
    /// picked it: its idle timeout) comes back from the pool and goes once more — always safe,
    /// and no copy of the request is made in advance.
    async fn send_h1(
        &self,
        app: SocketAddr,
        req: Request<Incoming>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let dest = Dest::Addr(app);
        let req = rewrite_h1(req.map(ReplayBody::passthrough), None);
        match self.h1.try_send(&dest, req).await {
            Ok(resp) => Ok(resp),
            Err(Failed {
                error: ProxyError::ResetBeforeRequest,
                unsent: Some(req),
            }) => self.h1.send(&dest, req).await,
            Err(f) => Err(f.error),
        }
    }

    /// gRPC to the app (h2c); a request that was never sent goes once more.
    async fn send_h2c(
        &self,
        app: SocketAddr,
        req: Request<Incoming>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let (head, body) = req.into_parts();
        // Nothing is kept for replay: only a request that was never sent is sent again.
        let replay = Replay::new(body, 0);
        let authority = app.to_string();
        let via = Via::H2(&self.h2, Scheme::HTTP, authority.clone());
        let mut result = Err(ProxyError::ResetBeforeRequest);
        for attempt in 1..=2 {
            let mut req = Request::new(replay.body(attempt));
            *req.method_mut() = head.method.clone();
            *req.uri_mut() = head.uri.clone();
            *req.version_mut() = head.version;
            *req.headers_mut() = head.headers.clone();
            let req = rewrite(req, Scheme::HTTP, &authority, true, false)?;
            result = attempts::send(&via, req, None, ProxyError::RouteTimeout).await;
            if !matches!(result, Err(ProxyError::ResetBeforeRequest)) || !replay.can_replay() {
                break;
            }
        }
        result
    }
}

/// `x-hopwise-peer-identity` from the certificate alone: `insert` replaces whatever the caller
/// claimed, and without a verified caller any claim is removed.
fn set_identity(caller: &Caller, headers: &mut http::HeaderMap) {
    match caller {
        Caller::Verified(p) => {
            headers.insert(PEER, p.header.clone());
        }
        _ => {
            headers.remove(PEER);
        }
    }
}
