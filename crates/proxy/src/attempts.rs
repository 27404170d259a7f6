//! The tries of one outbound request: pick a copy, send with the per-try timeout, classify the
//! outcome, and decide — with `hopwise-model`'s `Retry::decide_marked`, the same function
//! `hopwise check` uses — whether to try again. A retry also needs: retries left, a replayable
//! body, the budget, a free `max_retries` place, and time before the deadline for the back-off.
//! When the proxy gives up it returns the last upstream answer unchanged (as Envoy does) or one
//! local reply, marked "retries exhausted" when it retried, so single-hop proxies above do not
//! retry it again.

use std::sync::Arc;
use std::time::Duration;

use hopwise_model::{Decision, GrpcCode, Outcome, Protocol};
use http::header::{HeaderName, HeaderValue};
use http::uri::Scheme;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::balance::Endpoint;
use crate::body::Body;
use crate::cluster::ClusterState;
use crate::config::{Route, Target};
use crate::deadline;
use crate::error::{GRPC_STATUS, ProxyError};
use crate::headers::{rewrite, rewrite_h1};
use crate::metrics::RouteMetrics;
use crate::replay::{Replay, ReplayBody};
use crate::upstream::{self, Dest, H1Pool, Pool};

/// How much of a gRPC response the proxy reads ahead looking for its trailers.
const PEEK_LIMIT: usize = 64 * 1024;

/// Sent upstream on every try: 1, 2, 3 … (like `x-envoy-attempt-count`).
pub const ATTEMPT_HEADER: &str = "x-hopwise-attempt";
/// On an answer from a proxy that retried and gave up: the number of tries it made.
pub const EXHAUSTED_HEADER: &str = "x-hopwise-retries-exhausted";
const ATTEMPT: HeaderName = HeaderName::from_static(ATTEMPT_HEADER);
const EXHAUSTED: HeaderName = HeaderName::from_static(EXHAUSTED_HEADER);

/// What one request carries into its tries.
#[derive(Debug)]
pub struct Tries<'a> {
    pub state: &'a ClusterState,
    pub route: &'a Route,
    pub rm: &'a RouteMetrics,
    pub head: http::request::Parts,
    pub replay: Replay,
    pub grpc: bool,
    pub safe: bool,
    /// When the whole request must be done (route timeout, or the caller's deadline).
    pub deadline: Option<Instant>,
    /// Which of the two ended the request when time runs out.
    pub deadline_is_callers: bool,
}

/// The try's outcome: its status, and its `grpc-status` from the headers (a trailers-only
/// answer) or from trailers the proxy read ahead to.
fn outcome_of(resp: &Response<Body>) -> Outcome {
    let trailers = match resp.body() {
        Body::Peeked {
            trailers: Some(t), ..
        } => Some(t),
        _ => None,
    };
    let grpc = resp
        .headers()
        .get(GRPC_STATUS)
        .or_else(|| trailers.and_then(|t| t.get(GRPC_STATUS)))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u8>().ok())
        .map(|n| match n {
            0 => GrpcCode::Ok,
            1 => GrpcCode::Cancelled,
            4 => GrpcCode::DeadlineExceeded,
            8 => GrpcCode::ResourceExhausted,
            13 => GrpcCode::Internal,
            14 => GrpcCode::Unavailable,
            _ => GrpcCode::Unknown,
        });
    Outcome::Response {
        status: resp.status().as_u16(),
        grpc,
    }
}

/// Envoy's gateway failures: 502–504 and no answer at all. A gRPC answer counts by its status
/// mapped to HTTP as Envoy maps it (UNAVAILABLE → 503, DEADLINE_EXCEEDED → 504): otherwise a
/// copy that fails every call inside an HTTP 200 would never be ejected.
fn is_gateway_failure(o: Outcome) -> bool {
    match o {
        Outcome::Response { status, grpc } => {
            matches!(status, 502..=504)
                || matches!(
                    grpc,
                    Some(GrpcCode::Unavailable | GrpcCode::DeadlineExceeded)
                )
        }
        _ => true,
    }
}

/// Builds one try's request from the saved head.
fn try_request(r: &Tries<'_>, attempt: u32, left: Option<Duration>) -> Request<ReplayBody> {
    let mut req = Request::new(r.replay.body(attempt));
    *req.method_mut() = r.head.method.clone();
    *req.uri_mut() = r.head.uri.clone();
    *req.version_mut() = r.head.version;
    *req.headers_mut() = r.head.headers.clone();
    let h = req.headers_mut();
    h.insert(ATTEMPT, HeaderValue::from(attempt));
    if r.route.policy.propagate_deadline
        && let Some(left) = left
    {
        deadline::outgoing(h, r.grpc, left);
    }
    req
}

/// Runs the tries of one request and returns what the caller gets.
pub async fn run(r: Tries<'_>) -> Response<Body> {
    let policy = &r.route.policy;
    let on_timeout = policy.grpc_status_on_timeout;
    let mut tried: Vec<std::net::SocketAddr> = Vec::new();
    let mut attempt: u32 = 0;
    let mut _retry_place = None;
    // A retry the budget or a cap refused: the answer is marked as if retried, so the hops
    // above do not make the retry this one was told not to make.
    let mut shed = false;
    let result: Result<Response<Body>, ProxyError> = loop {
        attempt += 1;
        let now = Instant::now();
        let left = r.deadline.map(|d| d.saturating_duration_since(now));
        if left.is_some_and(|l| l.is_zero()) {
            break Err(if r.deadline_is_callers {
                ProxyError::DeadlineExceeded
            } else {
                ProxyError::RouteTimeout
            });
        }
        let Destination { via, endpoint } = match pick(&r, &tried) {
            Ok(d) => d,
            Err(e) => break Err(e),
        };
        if let Some(e) = &endpoint {
            tried.push(e.addr);
        }
        let req = match &via {
            Via::H1(..) => Ok(rewrite_h1(
                try_request(&r, attempt, left),
                r.state.external_host.as_ref(),
            )),
            Via::H2(_, scheme, authority) => rewrite(
                try_request(&r, attempt, left),
                scheme.clone(),
                authority,
                true,
                false,
            ),
        };
        let req = match req {
            Ok(req) => req,
            Err(e) => break Err(e),
        };
        // The shorter of the per-try timeout and the time left decides, and names the error.
        let per_try = policy.per_try_timeout.map(|d| d.get());
        let (limit, on_expiry) = match (per_try, left) {
            (Some(p), Some(l)) if p < l => (Some(p), ProxyError::PerTryTimeout),
            (Some(p), None) => (Some(p), ProxyError::PerTryTimeout),
            (_, Some(l)) if r.deadline_is_callers => (Some(l), ProxyError::DeadlineExceeded),
            (_, Some(l)) => (Some(l), ProxyError::RouteTimeout),
            (None, None) => (None, ProxyError::RouteTimeout),
        };
        r.rm.try_sent();
        let in_flight = endpoint.as_ref().map(crate::balance::Endpoints::start);
        let sent = Instant::now();
        let mut result = send(&via, req, limit, on_expiry)
            .await
            .map(|resp| resp.map(Body::Upstream));
        // A gRPC error may come in trailers after a 200: read ahead to them (bounded) when a
        // gRPC condition could retry it, so the decision sees the real status.
        // Only when a retry could follow, and never for a call still streaming its request.
        let read_ahead = r.grpc
            && attempt <= policy.retry.count
            && policy.retry.on.iter().any(|c| c.is_grpc())
            && (r.safe || !policy.retry.only_if_safe)
            && r.replay.can_replay()
            && r.replay.complete()
            && result.as_ref().is_ok_and(|resp| {
                resp.status() == http::StatusCode::OK && !resp.headers().contains_key(GRPC_STATUS)
            });
        if read_ahead && let Ok(resp) = result {
            let (parts, body) = resp.into_parts();
            result = match body {
                Body::Upstream(incoming) => match crate::body::peek(
                    incoming,
                    PEEK_LIMIT,
                    limit.map(|l| l.saturating_sub(sent.elapsed())),
                )
                .await
                {
                    Ok(p) => Ok(Response::from_parts(parts, p.body)),
                    Err(_) => Err(ProxyError::Reset),
                },
                other => Ok(Response::from_parts(parts, other)),
            };
        }
        drop(in_flight);
        let (outcome, marked) = match &result {
            Ok(resp) => (outcome_of(resp), resp.headers().contains_key(EXHAUSTED)),
            Err(e) => (e.outcome(), false),
        };
        if let Some(e) = &endpoint
            && let Some(ej) =
                r.state
                    .shared
                    .endpoints
                    .record(e, sent.elapsed(), is_gateway_failure(outcome))
        {
            r.rm.metrics().ejection(&r.state.cluster.service);
            tracing::warn!(
                "ejected {} of {} for {:?}",
                ej.addr,
                r.state.cluster.service,
                ej.for_
            );
        }
        if outcome.is_success() {
            break result;
        }
        // The route timeout and the caller's deadline end the request; they are never retried.
        if matches!(
            result,
            Err(ProxyError::RouteTimeout | ProxyError::DeadlineExceeded)
        ) {
            break result;
        }
        match policy.retry.decide_marked(outcome, r.safe, marked) {
            Decision::Retry => {}
            Decision::Unsafe => {
                r.rm.retry_skipped("unsafe");
                break result;
            }
            Decision::RetriedBelow => {
                r.rm.retry_skipped("retried-below");
                break result;
            }
            Decision::NotListed | Decision::NoRetries => break result,
        }
        if attempt > policy.retry.count {
            break result;
        }
        if !r.replay.can_replay() {
            r.rm.retry_skipped("body-too-large");
            break result;
        }
        if let Some(b) = &r.state.shared.budget
            && !b.withdraw()
        {
            r.rm.retry_skipped("budget");
            shed = true;
            break result;
        }
        match r.state.shared.gauges.admit_retry() {
            Ok(place) => _retry_place = Some(place),
            Err(t) => {
                r.rm.retry_skipped("limit");
                r.rm.metrics()
                    .limit_tripped(&r.state.cluster.service, t.name());
                shed = true;
                break result;
            }
        }
        let delay = policy.retry.backoff.delay(attempt, fastrand::u64(..));
        if r.deadline
            .is_some_and(|d| d.saturating_duration_since(Instant::now()) <= delay)
        {
            r.rm.retry_skipped("deadline");
            break result;
        }
        if let Some(c) = policy.retry.matching_condition(outcome) {
            r.rm.retry(c.name());
        }
        drop(result);
        tokio::time::sleep(delay).await;
    };
    let exhausted = policy.retry.single_hop && (attempt > 1 || shed);
    match result {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            crate::headers::strip_hop_by_hop(&mut parts.headers);
            if exhausted && !outcome_is_success(&parts) {
                parts.headers.insert(EXHAUSTED, HeaderValue::from(attempt));
            }
            Response::from_parts(parts, body)
        }
        Err(e) => {
            r.rm.local_reply(e.reason());
            let mut resp = e.response(r.grpc, on_timeout);
            if exhausted {
                resp.headers_mut()
                    .insert(EXHAUSTED, HeaderValue::from(attempt));
            }
            resp.map(Body::from)
        }
    }
}

fn outcome_is_success(parts: &http::response::Parts) -> bool {
    let grpc_ok = parts
        .headers
        .get(GRPC_STATUS)
        .is_none_or(|v| v.as_bytes() == b"0");
    parts.status.as_u16() < 500 && grpc_ok
}

/// How one try travels: on a kept-alive HTTP/1.1 connection to a destination, or on the h2
/// pool (HTTP/2 and gRPC) with the scheme and authority of its absolute URI.
#[derive(Debug)]
pub enum Via<'s> {
    H1(&'s H1Pool, Dest),
    H2(&'s Pool, Scheme, String),
}

/// Where one try goes, and the copy (mesh services only).
struct Destination<'s> {
    via: Via<'s>,
    endpoint: Option<Arc<Endpoint>>,
}

/// Where the next try goes.
fn pick<'s>(
    r: &'s Tries<'_>,
    tried: &[std::net::SocketAddr],
) -> Result<Destination<'s>, ProxyError> {
    let state = r.state;
    match &state.cluster.target {
        Target::Mesh { .. } => {
            let e = state
                .shared
                .endpoints
                .pick(tried)
                .ok_or_else(|| ProxyError::NoEndpoint(state.cluster.service.clone()))?;
            let h2 =
                r.head.version == http::Version::HTTP_2 || state.cluster.protocol == Protocol::Grpc;
            let via = if h2 {
                Via::H2(&state.h2, Scheme::HTTPS, e.addr.to_string())
            } else {
                Via::H1(&state.h1, Dest::Addr(e.addr))
            };
            Ok(Destination {
                via,
                endpoint: Some(e),
            })
        }
        Target::External { address, tls } => {
            let scheme = if tls.is_some() {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            };
            // gRPC outside the mesh is h2c (or h2 over TLS); everything else HTTP/1.1.
            let via = if state.cluster.protocol == Protocol::Grpc {
                Via::H2(&state.h2, scheme, address.clone())
            } else {
                let (Some(dest), Some(_)) = (&state.external_dest, &state.external_host) else {
                    return Err(ProxyError::NoRoute(address.clone()));
                };
                Via::H1(&state.h1, dest.clone())
            };
            Ok(Destination {
                via,
                endpoint: None,
            })
        }
    }
}

/// Sends one try, bounded by `limit`.
pub async fn send(
    via: &Via<'_>,
    req: Request<ReplayBody>,
    limit: Option<Duration>,
    on_expiry: ProxyError,
) -> Result<Response<Incoming>, ProxyError> {
    let fut = async {
        match via {
            Via::H1(pool, dest) => pool.send(dest, req).await,
            Via::H2(pool, ..) => pool.request(req).await.map_err(|e| upstream::classify(&e)),
        }
    };
    match limit {
        Some(l) => tokio::time::timeout(l, fut).await.unwrap_or(Err(on_expiry)),
        None => fut.await,
    }
}
