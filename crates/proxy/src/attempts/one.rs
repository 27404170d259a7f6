//! One try: pick a copy (or the external address), send the request on the right pool bounded
//! by the try's timeout, read a gRPC answer ahead to its trailers when a retry could depend on
//! them, classify the outcome, and tell the balancer how the copy did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hopwise_model::attempt::{Bound, Limit};
use hopwise_model::{GrpcCode, Outcome, Protocol};
use http::uri::Scheme;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::{Body, EXHAUSTED, GRPC_STATUS, ProxyError, ReplayBody, Tries};
use crate::balance::Endpoint;
use crate::config::Target;
use crate::upstream::{self, Dest, H1Pool, Pool};

/// How much of a gRPC response the proxy reads ahead looking for its trailers.
const PEEK_LIMIT: usize = 64 * 1024;

/// What a try got: the upstream's answer or the failure to get one.
pub(super) type Answer = Result<Response<Body>, ProxyError>;

/// A try that was made: its answer, outcome, and whether the answer carries a proxy below's
/// "retries exhausted" mark.
pub(super) struct Made {
    pub answer: Answer,
    pub outcome: Outcome,
    pub marked: bool,
}

/// Makes try `attempt` within `limit`, telling the callee the request's time `left`. `Err`: no
/// try could be made (no copy, a request that cannot be rewritten), which ends the request.
pub(super) async fn make(
    r: &Tries<'_>,
    tried: &mut Vec<SocketAddr>,
    attempt: u32,
    left: Option<Duration>,
    limit: Option<Limit>,
) -> Result<Made, ProxyError> {
    let Destination { via, endpoint } = pick(r, tried)?;
    if let Some(e) = &endpoint {
        tried.push(e.addr);
    }
    let req = super::request(r, &via, attempt, left)?;
    r.rm.try_sent();
    let in_flight = endpoint.as_ref().map(crate::balance::Endpoints::start);
    let sent = Instant::now();
    let time = limit.map(|l| l.time);
    let on_expiry = super::expired(limit.map_or(Bound::Route, |l| l.bound));
    let mut answer = send(&via, req, time, on_expiry)
        .await
        .map(|resp| resp.map(Body::Upstream));
    if worth_reading_ahead(r, attempt, &answer) {
        answer = read_ahead(answer, time.map(|l| l.saturating_sub(sent.elapsed()))).await;
    }
    drop(in_flight);
    let (outcome, marked) = match &answer {
        Ok(resp) => (outcome_of(resp), resp.headers().contains_key(EXHAUSTED)),
        Err(e) => (e.outcome(), false),
    };
    if let Some(e) = &endpoint {
        record(r, e, sent.elapsed(), outcome);
    }
    Ok(Made {
        answer,
        outcome,
        marked,
    })
}

/// A gRPC error may come in trailers after a 200: read ahead to them (bounded) when a gRPC
/// condition could retry it, so the decision sees the real status. Only when a retry could
/// follow, and never for a call still streaming its request.
fn worth_reading_ahead(r: &Tries<'_>, attempt: u32, answer: &Answer) -> bool {
    let retry = &r.policy.retry;
    r.grpc
        && attempt <= retry.count
        && retry.on.iter().any(|c| c.is_grpc())
        && (r.safe || !retry.only_if_safe)
        && r.replay.can_replay()
        && r.replay.complete()
        && answer.as_ref().is_ok_and(|resp| {
            resp.status() == http::StatusCode::OK && !resp.headers().contains_key(GRPC_STATUS)
        })
}

/// Reads an upstream answer ahead to its trailers (up to [`PEEK_LIMIT`], within `within`).
async fn read_ahead(answer: Answer, within: Option<Duration>) -> Answer {
    let resp = answer?;
    let (parts, body) = resp.into_parts();
    match body {
        Body::Upstream(incoming) => match crate::body::peek(incoming, PEEK_LIMIT, within).await {
            Ok(p) => Ok(Response::from_parts(parts, p.body)),
            Err(_) => Err(ProxyError::Reset),
        },
        other => Ok(Response::from_parts(parts, other)),
    }
}

/// Tells the balancer how the copy did; an ejection is counted and logged.
fn record(r: &Tries<'_>, e: &Arc<Endpoint>, took: Duration, outcome: Outcome) {
    let Some(ej) = r
        .state
        .shared
        .endpoints
        .record(e, took, is_gateway_failure(outcome))
    else {
        return;
    };
    r.rm.metrics().ejection(&r.state.cluster.service);
    tracing::warn!(
        "ejected {} of {} for {:?}",
        ej.addr,
        r.state.cluster.service,
        ej.for_
    );
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
fn pick<'s>(r: &'s Tries<'_>, tried: &[SocketAddr]) -> Result<Destination<'s>, ProxyError> {
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
