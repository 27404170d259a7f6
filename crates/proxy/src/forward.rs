//! The request lifecycle, read top to bottom:
//!
//! outbound: pick the cluster (by listener, or by `Host`) → match the route → the deadline (route
//! timeout, trimmed to the caller's) → the limits (fail fast over a cap) → the tries
//! ([`crate::attempts`]: pick a copy, send, classify, retry if the policy, the request's
//! safety, the budget and the deadline allow) → record metrics → the upstream's answer, or one
//! local reply from [`ProxyError`].
//!
//! The inbound side is [`crate::inbound`]. Both sides strip hop-by-hop headers from what they
//! are sent before adding their own ([`crate::headers`]) and match routes on the canonical path.
//!

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hopwise_model::path::PathError;
use hopwise_model::{Balancer, Budget, GrpcCode, Limits, Outlier};
use http::header::{self, HeaderMap, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use indexmap::IndexMap;
use rustls_pki_types::ServerName;

use crate::attempts;
use crate::balance::Endpoints;
use crate::budget::RetryBudget;
use crate::config::{Cluster, ProxyConfig, Target};
use crate::deadline;
use crate::error::ProxyError;
use crate::limits::{Connections, Gauges};
use crate::metrics::{Direction, Metrics, RouteMetrics};
use crate::replay::Replay;
use crate::tls::{CertStore, TlsError, external_client_config};
use crate::upstream::{self, Connector, Dest, H1Pool, Pool};

pub use crate::body::Body;

use crate::headers::PEER;
pub use crate::headers::PEER_IDENTITY;
pub(crate) use crate::headers::strip_hop_by_hop;
pub use crate::inbound::{Caller, Inbound, Peer};

/// Which outbound listener a request arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A local port dedicated to one upstream.
    Upstream(String),
    /// The HTTP-proxy port: the upstream is named by `Host`.
    HttpProxy,
}

/// A listener's [`Entry`] resolved once, so a request does not hash the upstream's name: the
/// listener's index, which each configuration maps to its cluster (clusters come and go with
/// live policy changes; per-upstream listeners do not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// The index of the per-upstream listener (none: a name this proxy has no listener for).
    Port(Option<usize>),
    /// By `Host` / `:authority`.
    ByHost,
}

/// What all workers share about one upstream: its copies (load, ejections), the retry budget,
/// the caps. Each part is kept across a live policy change whose parameters for it are the same.
#[derive(Debug)]
pub struct ClusterShared {
    pub endpoints: Arc<Endpoints>,
    pub budget: Option<Arc<RetryBudget>>,
    pub gauges: Arc<Gauges>,
    /// The connections to it (`limits.max_connections`): always carried over, the cap updated.
    pub connections: Arc<Connections>,
    params: SharedParams,
}

/// The parameters the shared parts were made with: a part whose parameters change is rebuilt.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SharedParams {
    balancer: Balancer,
    outlier: Option<Outlier>,
    budget: Option<Budget>,
    limits: Limits,
}

impl SharedParams {
    /// Per-upstream policies come from its first route.
    fn of(cluster: &Cluster) -> SharedParams {
        let from = |p: &hopwise_model::Policy| SharedParams {
            balancer: p.balancer,
            outlier: p.outlier,
            budget: p.budget,
            limits: p.limits,
        };
        match cluster.routes.first() {
            Some(r) => from(&r.policy),
            None => from(&hopwise_model::Preset::Hopwise.policy()),
        }
    }
}

impl ClusterShared {
    /// One per upstream per proxy; policies that are per-upstream come from its first route.
    pub fn new(cluster: &Cluster) -> Arc<ClusterShared> {
        ClusterShared::next(cluster, None)
    }

    /// The shared state of `cluster` under a new configuration: what `previous` knows (copies
    /// with their load, latency and ejections; the budget's counts; requests in flight for the
    /// caps) is kept for each part whose parameters did not change, and the copies are those of
    /// `cluster`.
    pub fn next(cluster: &Cluster, previous: Option<&ClusterShared>) -> Arc<ClusterShared> {
        let params = SharedParams::of(cluster);
        let addrs: &[SocketAddr] = match &cluster.target {
            Target::Mesh { endpoints, .. } => endpoints,
            Target::External { .. } => &[],
        };
        let endpoints = match previous {
            Some(p)
                if p.params.balancer == params.balancer && p.params.outlier == params.outlier =>
            {
                p.endpoints.update(addrs);
                p.endpoints.clone()
            }
            _ => Arc::new(Endpoints::new(addrs, params.balancer, params.outlier)),
        };
        let budget = match previous {
            Some(p) if p.params.budget == params.budget => p.budget.clone(),
            _ => params
                .budget
                .as_ref()
                .map(|b| Arc::new(RetryBudget::new(b))),
        };
        let gauges = match previous {
            Some(p) if p.params.limits == params.limits => p.gauges.clone(),
            _ => Arc::new(Gauges::new(params.limits)),
        };
        // The pools that stay keep their connections, so the count of them stays too.
        let connections = match previous {
            Some(p) => {
                p.connections.set_max(params.limits.max_connections);
                p.connections.clone()
            }
            None => Connections::new(params.limits.max_connections),
        };
        Arc::new(ClusterShared {
            endpoints,
            budget,
            gauges,
            connections,
            params,
        })
    }

    /// Whether `next` kept `previous`'s copies, budget and caps (for tests and logs).
    pub fn kept_from(&self, previous: &ClusterShared) -> [bool; 3] {
        [
            Arc::ptr_eq(&self.endpoints, &previous.endpoints),
            match (&self.budget, &previous.budget) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            },
            Arc::ptr_eq(&self.gauges, &previous.gauges),
        ]
    }
}

#[derive(Debug)]
pub struct ClusterState {
    pub cluster: Cluster,
    /// Shared with the next configuration's when the connection parameters stay the same.
    pub h1: Arc<H1Pool>,
    pub h2: Pool,
    /// A service outside the mesh: where HTTP/1.1 connections go, and the `Host` they carry
    /// (none if its address is not a valid authority). Built once, not per request.
    pub external_dest: Option<Dest>,
    pub external_host: Option<HeaderValue>,
    pub shared: Arc<ClusterShared>,
    routes: Vec<RouteMetrics>,
}

/// Outbound forwarding state of one worker: its own pools, shared metrics.
pub struct Outbound {
    service: String,
    clusters: IndexMap<String, ClusterState>,
    /// By the index of a per-upstream listener (`Dispatch::Port`): the index of its cluster.
    ports: Vec<Option<usize>>,
    by_host: Arc<ProxyConfig>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("service", &self.service)
            .field("clusters", &self.clusters.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Outbound {
    /// One worker's outbound state for `config`. `ports` names the per-upstream listeners in
    /// the order their [`Dispatch::Port`] indices refer to. A cluster of `previous` (the
    /// configuration this one replaces) that connects the same way lends its pools, so a
    /// policy change does not drop warm connections.
    pub fn new(
        config: Arc<ProxyConfig>,
        certs: Option<&Arc<CertStore>>,
        metrics: Arc<Metrics>,
        shared: &IndexMap<String, Arc<ClusterShared>>,
        ports: &[String],
        previous: Option<&Outbound>,
    ) -> Result<Self, TlsError> {
        let mut clusters = IndexMap::new();
        let idle = config.timeouts.pool_idle;
        for (name, cluster) in &config.clusters {
            let connect_timeout = connect_timeout(cluster);
            let reuse = previous
                .and_then(|p| p.clusters.get(name))
                .filter(|p| connects_alike(&p.cluster, cluster));
            let shared = shared
                .get(name)
                .cloned()
                .unwrap_or_else(|| ClusterShared::new(cluster));
            let (h1, h2) = match reuse {
                Some(p) => (p.h1.clone(), p.h2.clone()),
                None => {
                    let slots = &shared.connections;
                    pools(cluster, certs, &metrics, connect_timeout, idle, slots)?
                }
            };
            let routes = cluster
                .routes
                .iter()
                .map(|r| metrics.route(Direction::Outbound, name, &r.name))
                .collect();
            let (external_dest, external_host) = match &cluster.target {
                Target::External { address, .. } => (
                    Some(Dest::Name(Arc::from(address.as_str()))),
                    address
                        .parse::<Authority>()
                        .ok()
                        .and_then(|a| HeaderValue::from_str(a.as_str()).ok()),
                ),
                Target::Mesh { .. } => (None, None),
            };
            clusters.insert(
                name.clone(),
                ClusterState {
                    cluster: cluster.clone(),
                    h1,
                    h2,
                    external_dest,
                    external_host,
                    shared,
                    routes,
                },
            );
        }
        let ports = ports.iter().map(|n| clusters.get_index_of(n)).collect();
        Ok(Outbound {
            service: config.service.clone(),
            clusters,
            ports,
            by_host: config,
            metrics,
        })
    }
    /// Where requests from a listener for `entry` go.
    /// Where requests from a listener for `entry` go, given the per-upstream listeners' names
    /// in order (the same list every [`Outbound`] of this proxy is built with).
    pub fn dispatch(entry: &Entry, ports: &[String]) -> Dispatch {
        match entry {
            Entry::Upstream(name) => Dispatch::Port(ports.iter().position(|p| p == name)),
            Entry::HttpProxy => Dispatch::ByHost,
        }
    }

    pub async fn handle(&self, dispatch: Dispatch, req: Request<Incoming>) -> Response<Body> {
        let version = req.version();
        let mut resp = self.forward(dispatch, req).await;
        *resp.version_mut() = version;
        resp
    }

    async fn forward(&self, dispatch: Dispatch, mut req: Request<Incoming>) -> Response<Body> {
        let start = Instant::now();
        let grpc = is_grpc(req.headers());
        // Tunnels would carry traffic past every policy: refused here, before any upstream.
        if req.method() == http::Method::CONNECT {
            self.metrics
                .local_reply(Direction::Outbound, &self.service, "connect-unsupported");
            return local(ProxyError::ConnectMethod, grpc, GrpcCode::Unavailable);
        }
        // Before anything of ours is added: nothing the app sends can name our headers.
        strip_hop_by_hop(req.headers_mut());
        // Routes match the canonical path, and it is what goes on.
        if let Err(e) = normalize_path(&mut req) {
            let err = ProxyError::BadPath(e);
            self.metrics
                .local_reply(Direction::Outbound, &self.service, err.reason());
            return local(err, grpc, GrpcCode::Unavailable);
        }
        let state = match dispatch {
            Dispatch::Port(p) => p
                .and_then(|p| self.ports.get(p).copied().flatten())
                .and_then(|i| self.clusters.get_index(i))
                .map(|(_, s)| s),
            Dispatch::ByHost => host_of(&req)
                .and_then(|h| self.by_host.cluster_for_host(&h))
                .and_then(|c| self.clusters.get(&c.service)),
        };
        let Some(state) = state else {
            let host = host_of(&req).unwrap_or_default();
            self.metrics
                .local_reply(Direction::Outbound, &self.service, "no-route");
            return local(ProxyError::NoRoute(host), grpc, GrpcCode::Unavailable);
        };
        let Some(route_index) = state.cluster.route_index(req.uri().path()) else {
            return local(
                ProxyError::NoRoute(state.cluster.service.clone()),
                grpc,
                GrpcCode::Unavailable,
            );
        };
        let route = &state.cluster.routes[route_index];
        let rm = &state.routes[route_index];
        rm.request();
        let policy = &route.policy;
        let on_timeout = policy.grpc_status_on_timeout;

        // The deadline: our route timeout, trimmed to what the caller has left.
        let callers = if policy.propagate_deadline {
            deadline::incoming(req.headers(), grpc)
        } else {
            None
        };
        let ours = policy.timeout.map(|d| d.get());
        let (limit, deadline_is_callers) = match (ours, callers) {
            (Some(o), Some(c)) if c < o => (Some(c), true),
            (None, Some(c)) => (Some(c), true),
            (o, _) => (o, false),
        };
        if limit.is_some_and(|l| l.is_zero()) {
            // The caller has given up already: do not start work nobody waits for.
            rm.retry_skipped("deadline");
            return finish_local(rm, ProxyError::DeadlineExceeded, grpc, on_timeout, start);
        }
        let deadline = limit.map(|l| tokio::time::Instant::from_std(start) + l);

        let _admitted = match state.shared.gauges.admit() {
            Ok(a) => a,
            Err(t) => {
                self.metrics.limit_tripped(&state.cluster.service, t.name());
                return finish_local(rm, ProxyError::Overflow(t.name()), grpc, on_timeout, start);
            }
        };
        if let Some(b) = &state.shared.budget {
            b.deposit();
        }
        // Safe to repeat: as declared for the route, else by this request's method (RFC 9110),
        // or because the caller sent an Idempotency-Key the server can deduplicate with.
        let safe = route
            .idempotent
            .unwrap_or_else(|| hopwise_model::policy::idempotent_method(req.method().as_str()))
            || (policy.retry.honor_idempotency_key
                && req.headers().contains_key("idempotency-key"));
        let (mut head, body) = req.into_parts();
        head.headers.remove(PEER);
        let keep = if policy.retry.count > 0 {
            policy.retry.max_replay_bytes as usize
        } else {
            0
        };
        let sent = Instant::now();
        let resp = attempts::run(attempts::Tries {
            state,
            route,
            rm,
            head,
            replay: Replay::new(body, keep),
            grpc,
            safe,
            deadline,
            deadline_is_callers,
        })
        .await;
        // The upstream's hop-by-hop headers went in `attempts::run`, before its own mark.
        let upstream_time = sent.elapsed();
        rm.response(
            resp.status().as_u16(),
            resp.headers(),
            start.elapsed(),
            upstream_time,
        );
        resp
    }
}

fn connect_timeout(cluster: &Cluster) -> Duration {
    cluster
        .routes
        .first()
        .map_or(Duration::from_secs(1), |r| r.policy.connect_timeout.get())
}

/// Whether two versions of a cluster connect the same way (same identity or address, TLS and
/// connect timeout), so the new one may use the old one's pooled connections.
fn connects_alike(old: &Cluster, new: &Cluster) -> bool {
    let target = match (&old.target, &new.target) {
        (Target::Mesh { identity: a, .. }, Target::Mesh { identity: b, .. }) => a == b,
        (a @ Target::External { .. }, b @ Target::External { .. }) => a == b,
        _ => false,
    };
    target && connect_timeout(old) == connect_timeout(new)
}

/// A cluster's HTTP/1.1 pool and its HTTP/2 (and gRPC) pool.
fn pools(
    cluster: &Cluster,
    certs: Option<&Arc<CertStore>>,
    metrics: &Arc<Metrics>,
    connect_timeout: Duration,
    idle: Duration,
    slots: &Arc<Connections>,
) -> Result<(Arc<H1Pool>, Pool), TlsError> {
    let h1 = |c: Connector| Arc::new(H1Pool::capped(c, idle, slots.clone()));
    Ok(match &cluster.target {
        Target::Mesh { identity, .. } => match certs {
            Some(store) => {
                let c1 = Connector::tls(
                    store.client_config(identity, b"http/1.1")?,
                    None,
                    connect_timeout,
                    metrics.clone(),
                );
                let c2 = Connector::tls(
                    store.client_config(identity, b"h2")?,
                    None,
                    connect_timeout,
                    metrics.clone(),
                );
                (h1(c1), upstream::pool(c2, true, idle))
            }
            // Without certificates the mesh runs in plain text (tests, benchmarks).
            None => {
                let c = Connector::plain(connect_timeout);
                (h1(c.clone()), upstream::pool(c, true, idle))
            }
        },
        Target::External { tls, .. } => {
            let connector = |alpn: &[u8]| -> Result<Connector, TlsError> {
                Ok(match tls {
                    Some(t) => {
                        let name = ServerName::try_from(t.server_name.clone()).map_err(|_| {
                            TlsError::Bundle {
                                path: t.ca_file.clone(),
                                reason: format!("`{}` is not a server name", t.server_name),
                            }
                        })?;
                        Connector::tls(
                            external_client_config(&t.ca_file, alpn)?,
                            Some(name),
                            connect_timeout,
                            metrics.clone(),
                        )
                    }
                    None => Connector::plain(connect_timeout),
                })
            };
            (
                h1(connector(b"http/1.1")?),
                upstream::pool(connector(b"h2")?, true, idle),
            )
        }
    })
}

fn finish_local(
    rm: &RouteMetrics,
    err: ProxyError,
    grpc: bool,
    on_timeout: GrpcCode,
    start: Instant,
) -> Response<Body> {
    rm.local_reply(err.reason());
    let resp = err.response(grpc, on_timeout);
    rm.response(
        resp.status().as_u16(),
        resp.headers(),
        start.elapsed(),
        Duration::ZERO,
    );
    resp.map(Body::from)
}

pub(crate) fn local(err: ProxyError, grpc: bool, on_timeout: GrpcCode) -> Response<Body> {
    err.response(grpc, on_timeout).map(Body::from)
}

pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// Puts the canonical form of the request's path ([`hopwise_model::path`]) in its URI, the
/// query untouched, so what path rules decide on is what the next hop gets.
pub(crate) fn normalize_path<B>(req: &mut Request<B>) -> Result<(), PathError> {
    let fresh = match hopwise_model::path::normalize(req.uri().path())? {
        Cow::Borrowed(_) => return Ok(()),
        Cow::Owned(p) => p,
    };
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{fresh}?{q}"),
        None => fresh,
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query =
        Some(PathAndQuery::try_from(path_and_query).map_err(|_| PathError::BadPercent)?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| PathError::BadPercent)?;
    Ok(())
}

/// The destination named by an absolute URI (`http_proxy` clients), or `Host`/`:authority`.
fn host_of<B>(req: &Request<B>) -> Option<String> {
    req.uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
}

/// Points the request at `authority`, in the version the chosen pool speaks. The caller's
/// `Host` is kept; for an external service it becomes the service's address. What must not
/// cross a hop was stripped when the request arrived (`strip_hop_by_hop`, before the proxy
/// added its own headers), once for all its tries.
pub(crate) fn rewrite<B>(
    req: Request<B>,
    scheme: Scheme,
    authority: &str,
    h2: bool,
    replace_host: bool,
) -> Result<Request<B>, ProxyError> {
    let (mut parts, body) = req.into_parts();
    let original_host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.as_str().to_owned()));
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let authority: Authority = authority
        .parse()
        .map_err(|_| ProxyError::NoRoute(authority.to_owned()))?;
    parts.uri = Uri::builder()
        .scheme(scheme)
        .authority(authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|_| ProxyError::Protocol)?;
    if h2 {
        parts.version = Version::HTTP_2;
        parts.headers.remove(header::HOST);
    } else {
        parts.version = Version::HTTP_11;
        let host = if replace_host {
            Some(authority.as_str().to_owned())
        } else {
            original_host
        };
        if let Some(h) = host.and_then(|h| HeaderValue::from_str(&h).ok()) {
            parts.headers.insert(header::HOST, h);
        }
    }
    Ok(Request::from_parts(parts, body))
}

/// An HTTP/1.1 request for a kept-alive connection to its destination: origin-form (the
/// connection says where), the caller's `Host` kept — from the URI's authority if it sent
/// none (HTTP/2 callers) — or `host` for a service outside the mesh (hop-by-hop headers went
/// when the request arrived). The endpoint's address is never formatted or parsed here.
pub(crate) fn rewrite_h1<B>(req: Request<B>, host: Option<&HeaderValue>) -> Request<B> {
    let (mut parts, body) = req.into_parts();
    if let Some(h) = host {
        parts.headers.insert(header::HOST, h.clone());
    } else if !parts.headers.contains_key(header::HOST)
        && let Some(h) = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        parts.headers.insert(header::HOST, h);
    }
    if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
        parts.uri = match parts.uri.path_and_query() {
            Some(p) if p.as_str() != "/" => Uri::from(p.clone()),
            _ => Uri::default(),
        };
    }
    parts.version = Version::HTTP_11;
    Request::from_parts(parts, body)
}
