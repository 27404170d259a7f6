//! The tries of one outbound request, in order: the time left (the deadline `forward` set), the
//! try's timeout (`hopwise_model::attempt::try_timeout`), one try (`one.rs`: pick a copy, send,
//! classify), and what follows it (`decide.rs`: `hopwise_model::attempt::next`, the gate
//! `hopwise check` assumes too — the retry list, safety, the single-hop mark, retries left, a
//! replayable body, the budget, a free `max_retries` place, and time for the back-off).
//! When the proxy gives up it returns the last upstream answer unchanged (as Envoy does) or one
//! local reply, marked "retries exhausted" when it retried, so single-hop proxies above do not
//! retry it again.

use std::time::Duration;

use hopwise_model::Policy;
use hopwise_model::attempt::{self, Bound, Limit, Next, TryEnd};
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response};
use tokio::time::Instant;

use crate::access_log::LogEntry;
use crate::body::Body;
use crate::cluster::ClusterState;
use crate::deadline;
use crate::error::{GRPC_STATUS, ProxyError};
use crate::headers::{rewrite, rewrite_h1};
use crate::metrics::RouteMetrics;
use crate::otlp::Recording;
use crate::replay::{Replay, ReplayBody};

#[cfg(test)]
mod agree_tests;
mod decide;
mod one;

use decide::Live;
pub use decide::decide;
use one::{Answer, Made};
pub use one::{Via, send};

/// Sent upstream on every try: 1, 2, 3 … (like `x-envoy-attempt-count`).
pub const ATTEMPT_HEADER: &str = hopwise_api::names::ATTEMPT;
/// On an answer from a proxy that retried and gave up: the number of tries it made.
pub const EXHAUSTED_HEADER: &str = hopwise_api::names::RETRIES_EXHAUSTED;
const ATTEMPT: HeaderName = HeaderName::from_static(ATTEMPT_HEADER);
const EXHAUSTED: HeaderName = HeaderName::from_static(EXHAUSTED_HEADER);

/// What one request carries into its tries.
#[derive(Debug)]
pub struct Tries<'a> {
    pub state: &'a ClusterState,
    /// The request's policy: its call route's, or the rule's over it (`RulePolicy::over`).
    pub policy: &'a Policy,
    pub rm: &'a RouteMetrics,
    pub head: http::request::Parts,
    pub replay: Replay,
    pub grpc: bool,
    pub safe: bool,
    /// When the whole request must be done (route timeout, or the caller's deadline).
    pub deadline: Option<Instant>,
    /// Which of the two ended the request when time runs out.
    pub deadline_is_callers: bool,
    /// The request's access-log entry, when it is logged (or tapped).
    pub log: Option<&'a LogEntry<'a>>,
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
    if let Some(rec) = Recording::of(&r.head.extensions) {
        rec.inject_try(h);
    }
    if r.policy.propagate_deadline
        && let Some(left) = left
    {
        deadline::outgoing(h, r.grpc, left);
    }
    req
}

/// Runs the tries of one request and returns what the caller gets.
pub async fn run(r: Tries<'_>) -> Response<Body> {
    let policy = &r.policy;
    let per_try = policy.per_try_timeout.map(|d| d.get());
    let mut tried: Vec<std::net::SocketAddr> = Vec::new();
    let mut spend = Live::new(r.state.shared.budget.as_deref(), &r.state.shared.gauges);
    let mut attempt: u32 = 0;
    // A retry the budget or a cap refused: the answer is marked as if retried, so the hops
    // above do not make the retry this one was told not to make.
    let mut shed = false;
    let rec = Recording::of(&r.head.extensions);
    let log = r.log;
    let mut started_by = None;
    let result: Answer = loop {
        attempt += 1;
        let left = time_left(&r);
        if let Some(l) = left
            && l.time.is_zero()
        {
            break Err(expired(l.bound));
        }
        let limit = attempt::try_timeout(per_try, left);
        if let Some(rec) = rec {
            rec.begin_try();
        }
        let tried_once = one::make(&r, &mut tried, attempt, left.map(|l| l.time), limit).await;
        let Made {
            answer,
            outcome,
            marked,
        } = match tried_once {
            Ok(made) => made,
            Err(e) => break Err(e),
        };
        if let Some(rec) = rec {
            rec.end_try(attempt, tried.last().copied(), outcome, started_by);
        }
        if let Some(l) = log {
            l.tried(tried.last().copied(), started_by);
        }
        let end = TryEnd {
            attempt,
            outcome,
            limit,
            safe: r.safe,
            marked,
            replayable: r.replay.can_replay(),
            left: time_left(&r),
        };
        match decide(policy, &end, &mut spend) {
            Next::Done => break answer,
            Next::Skip(skip) => {
                spend.count(r.rm, &r.state.cluster.service, skip);
                if let Some(l) = log {
                    l.skipped(skip.label());
                }
                shed = skip.sheds();
                break answer;
            }
            Next::Retry { delay, .. } => {
                if let Some(c) = policy.retry.matching_condition(outcome) {
                    r.rm.retry(c.name());
                    started_by = Some(c.name());
                }
                drop(answer);
                tokio::time::sleep(delay).await;
            }
        }
    };
    give_up(&r, result, attempt, shed)
}

/// The request's deadline as of now: the time left and whose limit it is.
fn time_left(r: &Tries<'_>) -> Option<Limit> {
    let bound = if r.deadline_is_callers {
        Bound::Caller
    } else {
        Bound::Route
    };
    r.deadline.map(|d| Limit {
        time: d.saturating_duration_since(Instant::now()),
        bound,
    })
}

/// The error a try's (or the request's) limit running out becomes.
fn expired(bound: Bound) -> ProxyError {
    match bound {
        Bound::PerTry => ProxyError::PerTryTimeout,
        Bound::Route => ProxyError::RouteTimeout,
        Bound::Caller => ProxyError::DeadlineExceeded,
    }
}

/// Builds one try's request for where it goes: the head rewritten for the next hop.
fn request(
    r: &Tries<'_>,
    via: &Via<'_>,
    attempt: u32,
    left: Option<Duration>,
) -> Result<Request<ReplayBody>, ProxyError> {
    match via {
        Via::H1(..) => Ok(rewrite_h1(
            try_request(r, attempt, left),
            r.state.external_host.as_ref(),
        )),
        Via::H2(_, scheme, authority) => rewrite(
            try_request(r, attempt, left),
            scheme.clone(),
            authority,
            true,
            false,
        ),
    }
}

/// What the caller gets: the last answer, or the last failure as one local reply; marked
/// "retries exhausted" when this proxy retried (or was refused a retry) under `single_hop`.
fn give_up(r: &Tries<'_>, result: Answer, attempt: u32, shed: bool) -> Response<Body> {
    let policy = &r.policy;
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
            let mut resp = e.response(r.grpc, policy.grpc_status_on_timeout);
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
