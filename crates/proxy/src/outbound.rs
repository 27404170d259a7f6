//! The outbound request lifecycle, read top to bottom as the chart "The path of a request"
//! in ARCHITECTURE.md: a protocol switch or CONNECT to [`crate::upgrade`] → strip hop-by-hop
//! headers and make the path canonical → pick the cluster (by listener, or by `Host`) → when
//! that callee has routes of its own, the backend they pick ([`crate::route`]: rule, weighted
//! backend, request edits, or a local redirect, 404 or 500) → match the call's route (its
//! policy, with the rule's `timeouts`/`retry` laid over it) → remove a forged identity → decide the deadline, once (route timeout, trimmed to
//! the caller's) → the limits (fail fast over a cap) → the tries ([`crate::attempts`]: pick a
//! copy, send, classify, retry if the policy, the request's safety, the budget and the
//! deadline allow) → record metrics → the rule's answer edits → the upstream's answer, or one
//! local reply from [`ProxyError`].
//!
//! What it runs on is built elsewhere: each upstream's state and pools in [`crate::cluster`],
//! the rewrites of a request in [`crate::headers`]. The inbound side is [`crate::inbound`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hopwise_model::attempt::{self, Bound, Trim};
use hopwise_model::route::{HeaderModifier, RulePolicy, Target};
use hopwise_model::{GrpcCode, Policy};
use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use indexmap::IndexMap;
use tokio::time::Instant;

use crate::access_log::{self, LogEntry};
use crate::attempts;
use crate::body::Body;
use crate::cluster::{ClusterShared, ClusterState};
use crate::config::{ProxyConfig, Route};
use crate::deadline;
use crate::error::{ProxyError, local};
use crate::headers::{PEER, host_of, is_grpc, normalize_path, strip_hop_by_hop};
use crate::link::Links;
use crate::metrics::{Direction, Metrics, RouteMetrics};
use crate::mirror;
use crate::otlp::{self, Recording};
use crate::recorded::Recorded;
use crate::replay::{BodyCap, Replay};
use crate::route::{self, Decision, HeaderView, RouteTable};
use crate::tls::{CertStore, TlsError};
use crate::trace::ProxySpan;
use crate::upgrade::{self, Switch};

/// Which outbound listener a request arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A local port dedicated to one upstream.
    Upstream(String),
    /// The HTTP-proxy port: the upstream is named by `Host`.
    HttpProxy,
    /// A gateway's front door ([`crate::gateway`]): the gateway's own routes pick the upstream.
    Gateway,
}

/// A listener's [`Entry`] resolved once, so a request does not hash the upstream's name: the
/// listener's index, which each configuration maps to its cluster (clusters come and go with
/// live policy changes; per-upstream listeners do not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dispatch {
    /// The index of the per-upstream listener (none: a name this proxy has no listener for).
    Port(Option<usize>),
    /// By `Host` / `:authority`.
    ByHost,
    /// A captured connection's: the service its original destination belongs to, whatever
    /// name the app used (on Kubernetes `api.shop.svc.cluster.local`, or the ClusterIP itself),
    /// and the port it dialed there (sent on as `x-hopwise-service-port`).
    Service(Arc<str>, u16),
    /// By the gateway's own routes (its cluster is their parent).
    Gateway,
}

/// Outbound forwarding state of one worker: its own pools, shared metrics.
pub struct Outbound {
    service: String,
    clusters: IndexMap<String, ClusterState>,
    /// A route backend's or mirror's label subset of a cluster: that cluster's state over the
    /// view of the copies carrying its labels (its pools, budget and caps the cluster's).
    subsets: HashMap<Target, ClusterState>,
    /// By the index of a per-upstream listener (`Dispatch::Port`): the index of its cluster.
    ports: Vec<Option<usize>>,
    /// A gateway's own cluster (`Dispatch::Gateway`), the parent of its routes.
    gateway: Option<usize>,
    by_host: Arc<ProxyConfig>,
    metrics: Arc<Metrics>,
    /// Inbound requests the app's calls are made for ([`crate::link`]).
    links: Option<Arc<Links>>,
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
        let mut subsets = HashMap::new();
        let idle = config.timeouts.pool_idle;
        for (name, cluster) in &config.clusters {
            let shared = shared
                .get(name)
                .cloned()
                .unwrap_or_else(|| ClusterShared::new(cluster));
            let previous = previous.and_then(|p| p.clusters.get(name));
            let state = ClusterState::new(
                name,
                cluster,
                certs,
                &metrics,
                shared.clone(),
                idle,
                previous,
            )?;
            for (labels, view) in &shared.subsets {
                // The cluster's own state lends its pools: a subset connects as its service does.
                let sub = ClusterState::new(
                    name,
                    cluster,
                    certs,
                    &metrics,
                    view.clone(),
                    idle,
                    Some(&state),
                )?;
                let target = Target {
                    service: name.clone(),
                    subset: labels.clone(),
                };
                subsets.insert(target, sub);
            }
            clusters.insert(name.clone(), state);
        }
        let ports = ports.iter().map(|n| clusters.get_index_of(n)).collect();
        let gateway =
            (config.gateway.as_ref()).and_then(|_| clusters.get_index_of(&config.service));
        Ok(Outbound {
            service: config.service.clone(),
            clusters,
            subsets,
            ports,
            gateway,
            by_host: config,
            metrics,
            links: None,
        })
    }

    /// Ties the app's calls to the inbound requests they are made for (inbound fills the table).
    #[must_use]
    pub fn linked(self, links: Arc<Links>) -> Self {
        Outbound {
            links: Some(links),
            ..self
        }
    }

    /// Where requests from a listener for `entry` go, given the per-upstream listeners' names
    /// in order (the same list every [`Outbound`] of this proxy is built with).
    pub fn dispatch(entry: &Entry, ports: &[String]) -> Dispatch {
        match entry {
            Entry::Upstream(name) => Dispatch::Port(ports.iter().position(|p| p == name)),
            Entry::HttpProxy => Dispatch::ByHost,
            Entry::Gateway => Dispatch::Gateway,
        }
    }

    pub async fn handle(&self, dispatch: &Dispatch, mut req: Request<Incoming>) -> Response<Body> {
        let version = req.version();
        let (span, recorded) = self.record(&mut req);
        let resp = self
            .forward(dispatch, span.as_ref(), recorded.log(), req)
            .await;
        let mut resp = recorded.finish(resp);
        *resp.version_mut() = version;
        resp
    }

    /// A request a gateway's front door refused (`gateway::Front::admit`), answered `err` and
    /// recorded as every answer of this path is: its span, access-log line and tap line.
    pub fn refuse(&self, mut req: Request<Incoming>, err: ProxyError) -> Response<Body> {
        let (version, grpc) = (req.version(), is_grpc(req.headers()));
        let (_, recorded) = self.record(&mut req);
        let mut resp = recorded.finish(local(err, grpc, GrpcCode::Unavailable));
        *resp.version_mut() = version;
        resp
    }

    /// The request's records begun: its span (the trace context continued or started), and
    /// what finishes them with the answer, or with how it ended if the caller goes first.
    #[inline]
    fn record(&self, req: &mut Request<Incoming>) -> (Option<ProxySpan>, Recorded<'_>) {
        let tracing = self.by_host.tracing.as_ref();
        let sink = self.metrics.span_sink();
        let direction = otlp::Direction::Outbound;
        let traced = otlp::begin(tracing, sink, direction, &self.service, "http", req);
        let span = traced.span;
        let (logs, tap) = (self.metrics.log_sink(), self.metrics.tap());
        let log = access_log::begin(
            &self.by_host,
            logs,
            tap,
            "outbound",
            None,
            span.as_ref(),
            req,
        );
        (span, Recorded::new(traced.recording, log, req.headers()))
    }

    /// The lifecycle, one step per line of the chart.
    async fn forward(
        &self,
        dispatch: &Dispatch,
        span: Option<&ProxySpan>,
        log: Option<&LogEntry<'_>>,
        mut req: Request<Incoming>,
    ) -> Response<Body> {
        // The port a captured app dialed, for the callee's proxy to map through its `ports`
        // (an app's own claim to one never goes on).
        service_port(dispatch, req.headers_mut());
        // A protocol switch or CONNECT is carried, not forwarded: its own lifecycle.
        if let Some(switch) = Switch::of(&req) {
            let state = self.cluster(dispatch, &req);
            // Boxed, as inbound's: kept out of every request's future.
            return Box::pin(upgrade::outbound::serve(
                state,
                switch,
                req,
                &self.metrics,
                &self.service,
            ))
            .await;
        }
        let start = Instant::now();
        let grpc = is_grpc(req.headers());
        if let Err(err) = arrive(&mut req) {
            self.metrics
                .local_reply(Direction::Outbound, &self.service, err.reason());
            return local(err, grpc, GrpcCode::Unavailable);
        }
        let Some(parent) = self.cluster(dispatch, &req) else {
            let host = host_of(&req).unwrap_or_default().to_owned();
            self.metrics
                .local_reply(Direction::Outbound, &self.service, "no-route");
            return local(ProxyError::NoRoute(host), grpc, GrpcCode::Unavailable);
        };
        // The callee's own routes, if it has any, pick the backend (its parent is the callee
        // the `Host` or the listener named, GAMMA); without routes, the callee is the backend.
        let (state, answer_edits, mirrors, rule_policy) = match parent.cluster.table.as_deref() {
            None => (parent, None, Vec::new(), None),
            Some(table) => match self.route(parent, table, &mut req, grpc, log) {
                Ok(routed) => routed,
                Err(reply) => return *reply,
            },
        };
        let Some(route_index) = state.cluster.route_index(req.uri().path()) else {
            let err = ProxyError::NoRoute(state.cluster.service.clone());
            return local(err, grpc, GrpcCode::Unavailable);
        };
        let route = &state.cluster.routes[route_index];
        let rm = &state.routes[route_index];
        rm.request();
        if let Some(r) = Recording::of(req.extensions()) {
            r.route(
                Some(&state.cluster.service),
                &route.name,
                route.prefix.as_deref(),
                None,
            );
        }
        if let Some(l) = log {
            l.route(Some(&state.cluster.service), &route.name);
        }
        // A rule's `timeouts` and `retry` over the call route's policy, for this request alone.
        let ruled = rule_policy.map(|p| p.over(&route.policy));
        let policy = ruled.as_ref().unwrap_or(&route.policy);
        let on_timeout = policy.grpc_status_on_timeout;
        // The app's claim to an identity goes before anything is sent on.
        req.headers_mut().remove(PEER);

        // The inbound request this call is made for, if the app carried its trace context on.
        let link = self.links.as_deref().and_then(|l| l.call(span));
        let linked_left = link.as_ref().and_then(|s| s.left());
        // Decided once, here: the tries only count down to it.
        let (deadline, deadline_is_callers) =
            match request_deadline(policy, req.headers(), grpc, linked_left) {
                Trim::Unbounded => (None, false),
                Trim::Until(l) => (Some(start + l.time), l.bound == Bound::Caller),
                Trim::Passed => {
                    // The caller has given up already: do not start work nobody waits for.
                    if let Some(reason) = attempt::Skip::Deadline.label() {
                        rm.retry_skipped(reason);
                    }
                    return finish_local(rm, ProxyError::DeadlineExceeded, grpc, on_timeout, start);
                }
            };

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
        let safe = safe_to_repeat(route, policy, &req);
        let (head, body) = req.into_parts();
        // A mirror's copy needs the body kept; the tries still resend only what their policy
        // allows.
        let keep = if mirrors.is_empty() {
            0
        } else {
            mirror::BODY_LIMIT
        };
        // A gateway's request body is bounded as it streams (`gateway::Front::admit` says how).
        let replay = match head.extensions.get::<BodyCap>() {
            Some(cap) => Replay::capped(body, *cap, replay_bound(policy), keep),
            None => Replay::keeping(body, replay_bound(policy), keep),
        };
        for m in mirrors {
            mirror::spawn(m, &head, replay.follower());
        }
        let sent = Instant::now();
        let tries = attempts::run(attempts::Tries {
            state,
            policy,
            rm,
            head,
            replay,
            grpc,
            safe,
            deadline,
            deadline_is_callers,
            log,
        });
        let mut resp = match &link {
            None => tries.await,
            Some(served) => {
                let mut tries = std::pin::pin!(tries);
                tokio::select! {
                    biased;
                    r = &mut tries => r,
                    // Nobody waits for this call any more: end it, and tell the app plainly.
                    () = served.gone() => {
                        return finish_local(rm, ProxyError::CallerGone, grpc, on_timeout, start);
                    }
                }
            }
        };
        match (&link, &self.links) {
            (Some(served), _) => served.report(resp.headers()),
            (None, Some(links)) => links.report_unlinked(resp.status(), resp.headers(), grpc),
            (None, None) => {}
        }
        // The upstream's hop-by-hop headers went in `attempts::run`, before its own mark.
        let upstream_time = sent.elapsed();
        rm.answered(&resp, start.elapsed(), upstream_time);
        if let Some(l) = log {
            l.upstream(upstream_time);
        }
        if let Some(m) = answer_edits {
            route::apply_response(resp.headers_mut(), m);
        }
        resp
    }

    /// The route layer (`crate::route`): the decision for `req` among `table`'s routes, made
    /// from plain data, then carried out — the backend's cluster and the rule's answer edits,
    /// with the request edited; or the local reply that ends the request, counted: a redirect
    /// (`redirect`), no rule taking it (404, `no-route`), a rule without a backend with weight
    /// (500, `no-backend`) or a backend this proxy does not call (404, `no-route`). A label
    /// subset goes to its view of the service's copies, built with the configuration: one that
    /// no copy carries is answered as a service without copies is (503, `no-endpoint`).
    fn route<'s>(
        &'s self,
        parent: &'s ClusterState,
        table: &'s RouteTable,
        req: &mut Request<Incoming>,
        grpc: bool,
        log: Option<&LogEntry<'_>>,
    ) -> Result<Routed<'s>, Box<Response<Body>>> {
        let headers = HeaderView(req.headers());
        let decision = route::decide(table, &route::view(req, &headers), fastrand::u32(..));
        // The route and rule that took it, in its records (also when it is answered here).
        let taken = match &decision {
            Decision::Forward(f) => Some((f.route, f.rule, f.index)),
            Decision::NoBackend { route, rule, index } => Some((*route, *rule, *index)),
            Decision::Redirect { .. } | Decision::NoMatch => None,
        };
        if let Some((route, rule, index)) = taken {
            if let Some(c) = parent.rules.get(index) {
                c.inc();
            }
            if let Some(l) = log {
                l.rule(route, rule);
            }
            if let Some(r) = Recording::of(req.extensions()) {
                r.rule(route, rule);
            }
        }
        let parent_name = &parent.cluster.service;
        // Boxed: a local reply is rare, and a large `Err` would widen every routed request's.
        let refuse = |err: ProxyError| {
            self.metrics
                .local_reply(Direction::Outbound, parent_name, err.reason());
            Box::new(local(err, grpc, GrpcCode::Unavailable))
        };
        let forward = match decision {
            Decision::Forward(f) => f,
            Decision::NoMatch => return Err(refuse(ProxyError::NoRoute(parent_name.clone()))),
            Decision::NoBackend { route, .. } => {
                return Err(refuse(ProxyError::NoBackend(route.to_owned())));
            }
            Decision::Redirect { status, location } => {
                return Err(match route::redirect(status, &location) {
                    Ok(reply) => {
                        self.metrics
                            .local_reply(Direction::Outbound, parent_name, route::REDIRECT);
                        Box::new(reply)
                    }
                    Err(err) => refuse(err),
                });
            }
        };
        let Some(state) = self.target(forward.backend) else {
            return Err(refuse(ProxyError::NoRoute(forward.backend.service.clone())));
        };
        if let Err(err) = route::apply_request(req, &forward) {
            return Err(refuse(err));
        }
        // A mirror this proxy does not call gets no copy.
        let mirrors = (forward.mirrors.iter())
            .filter_map(|t| self.target(t))
            .collect();
        Ok((state, forward.response_headers, mirrors, forward.policy))
    }

    /// The state a route's target goes to: its service's cluster, or for a label subset that
    /// cluster's view of it (a lookup only when a subset is named: a whole service's costs what
    /// it did).
    fn target(&self, t: &Target) -> Option<&ClusterState> {
        if t.subset.is_empty() {
            self.clusters.get(&t.service)
        } else {
            self.subsets.get(t)
        }
    }

    /// The cluster of a per-upstream listener (an opaque TCP one's, [`crate::opaque`]), or
    /// of a name (a captured connection's destination).
    pub fn cluster_of(&self, dispatch: &Dispatch) -> Option<&ClusterState> {
        match dispatch {
            Dispatch::Port(p) => p
                .and_then(|p| self.ports.get(p).copied().flatten())
                .and_then(|i| self.clusters.get_index(i))
                .map(|(_, s)| s),
            Dispatch::Gateway => self
                .gateway
                .and_then(|i| self.clusters.get_index(i))
                .map(|(_, s)| s),
            Dispatch::ByHost => None,
            Dispatch::Service(name, _) => self.clusters.get(&**name),
        }
    }

    pub fn cluster_named(&self, service: &str) -> Option<&ClusterState> {
        self.clusters.get(service)
    }

    /// The cluster a request goes to: its listener's or destination's, or the one its `Host`
    /// names.
    fn cluster(&self, dispatch: &Dispatch, req: &Request<Incoming>) -> Option<&ClusterState> {
        match dispatch {
            Dispatch::Port(_) | Dispatch::Service(..) | Dispatch::Gateway => {
                self.cluster_of(dispatch)
            }
            Dispatch::ByHost => host_of(req)
                .and_then(|h| self.by_host.cluster_for_host(h))
                .and_then(|c| self.clusters.get(&c.service)),
        }
    }
}

/// A routed request: the backend's cluster, the rule's answer edits, the clusters a copy of it
/// goes to (`RequestMirror`), and the rule's own policy (`timeouts`, `retry`).
type Routed<'s> = (
    &'s ClusterState,
    Option<&'s HeaderModifier>,
    Vec<&'s ClusterState>,
    Option<&'s RulePolicy>,
);

/// The request as it arrives from the app (CONNECT and protocol switches went to
/// [`crate::upgrade`]): hop-by-hop headers stripped before anything of ours is added (nothing
/// the app sends can name our headers), the path made canonical (routes match it, and it is
/// what goes on).
fn arrive(req: &mut Request<Incoming>) -> Result<(), ProxyError> {
    strip_hop_by_hop(req.headers_mut());
    normalize_path(req).map_err(ProxyError::BadPath)
}

/// `x-hopwise-service-port`: removed from what the app sent, and set to the port a captured
/// connection dialed.
fn service_port(dispatch: &Dispatch, headers: &mut http::HeaderMap) {
    let name = http::HeaderName::from_static(hopwise_api::names::SERVICE_PORT);
    match dispatch {
        Dispatch::Service(_, port) => {
            headers.insert(name, http::HeaderValue::from(*port));
        }
        _ => {
            headers.remove(name);
        }
    }
}

/// How long the whole request may take, and whose limit that is: the route timeout, trimmed to
/// what the caller has left when the route propagates deadlines (`hopwise-model`'s `trim`, as
/// `hopwise check` assumes it). The caller's time is the shorter of what the app's request says
/// and what is left of the inbound request it was `linked` to.
fn request_deadline(
    policy: &Policy,
    headers: &HeaderMap,
    grpc: bool,
    linked: Option<Duration>,
) -> Trim {
    let callers = if policy.propagate_deadline {
        let said = deadline::incoming(headers, grpc);
        match (said, linked) {
            (Some(s), Some(l)) => Some(s.min(l)),
            (s, l) => s.or(l),
        }
    } else {
        None
    };
    attempt::trim(policy.timeout.map(|d| d.get()), callers)
}

/// Safe to repeat: as declared for the route, else by the request's method (RFC 9110), or
/// because the caller sent an Idempotency-Key the server can deduplicate with.
fn safe_to_repeat<B>(route: &Route, policy: &Policy, req: &Request<B>) -> bool {
    route
        .idempotent
        .unwrap_or_else(|| hopwise_model::policy::idempotent_method(req.method().as_str()))
        || (policy.retry.honor_idempotency_key && req.headers().contains_key("idempotency-key"))
}

/// How much of the request body is kept for a retry: nothing when the route never retries.
fn replay_bound(policy: &Policy) -> usize {
    if policy.retry.count > 0 {
        policy.retry.max_replay_bytes as usize
    } else {
        0
    }
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
    rm.answered(&resp, start.elapsed(), Duration::ZERO);
    resp.map(Body::from)
}
