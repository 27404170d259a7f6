//! The policy applied to one call, fully resolved (no presets, no missing fields), and the rules
//! that decide, for one try's outcome, whether the proxy retries and what it answers when it
//! gives up. The analyser and the proxy both call these; neither re-implements them.
//!
//! Condition names and meanings follow Envoy (`../shared/semantics.md` §1.2): `5xx`,
//! `gateway-error` and `reset` also cover resets and per-try timeouts; the gRPC conditions only
//! look at a response's `grpc-status`.

use std::collections::BTreeSet;
use std::fmt;

use schemars::JsonSchema;
use serde::Serialize;

use crate::backoff::Backoff;
use crate::duration::Dur;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    Http,
    Grpc,
}

impl Protocol {
    pub const ALL: [(&'static str, Protocol); 2] =
        [("http", Protocol::Http), ("grpc", Protocol::Grpc)];
}

/// A retry condition, named as Envoy's `retry_on` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, JsonSchema)]
pub enum RetryOn {
    #[serde(rename = "connect-failure")]
    ConnectFailure,
    #[serde(rename = "refused-stream")]
    RefusedStream,
    #[serde(rename = "reset-before-request")]
    ResetBeforeRequest,
    #[serde(rename = "reset")]
    Reset,
    #[serde(rename = "gateway-error")]
    GatewayError,
    #[serde(rename = "5xx")]
    Any5xx,
    #[serde(rename = "retriable-4xx")]
    Retriable4xx,
    #[serde(rename = "retriable-status-codes")]
    RetriableStatusCodes,
    #[serde(rename = "cancelled")]
    Cancelled,
    #[serde(rename = "deadline-exceeded")]
    DeadlineExceeded,
    #[serde(rename = "resource-exhausted")]
    ResourceExhausted,
    #[serde(rename = "internal")]
    Internal,
    #[serde(rename = "unavailable")]
    Unavailable,
}

impl RetryOn {
    pub const ALL: [(&'static str, RetryOn); 13] = [
        ("connect-failure", RetryOn::ConnectFailure),
        ("refused-stream", RetryOn::RefusedStream),
        ("reset-before-request", RetryOn::ResetBeforeRequest),
        ("reset", RetryOn::Reset),
        ("gateway-error", RetryOn::GatewayError),
        ("5xx", RetryOn::Any5xx),
        ("retriable-4xx", RetryOn::Retriable4xx),
        ("retriable-status-codes", RetryOn::RetriableStatusCodes),
        ("cancelled", RetryOn::Cancelled),
        ("deadline-exceeded", RetryOn::DeadlineExceeded),
        ("resource-exhausted", RetryOn::ResourceExhausted),
        ("internal", RetryOn::Internal),
        ("unavailable", RetryOn::Unavailable),
    ];

    pub fn name(self) -> &'static str {
        RetryOn::ALL
            .iter()
            .find(|(_, c)| *c == self)
            .map_or("?", |(n, _)| n)
    }

    /// Is this one of the conditions that read a response's `grpc-status`?
    pub fn is_grpc(self) -> bool {
        matches!(
            self,
            RetryOn::Cancelled
                | RetryOn::DeadlineExceeded
                | RetryOn::ResourceExhausted
                | RetryOn::Internal
                | RetryOn::Unavailable
        )
    }

    /// Does this condition retry a try that ended by the per-try timeout? (Envoy: only
    /// `reset`, `gateway-error` and `5xx` — the trap in the seed's "timeouts" section.)
    pub fn covers_timeout(self) -> bool {
        matches!(
            self,
            RetryOn::Reset | RetryOn::GatewayError | RetryOn::Any5xx
        )
    }
}

impl fmt::Display for RetryOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// gRPC status codes that matter to retries and to what a proxy answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GrpcCode {
    Ok,
    Cancelled,
    Unknown,
    DeadlineExceeded,
    ResourceExhausted,
    Internal,
    Unavailable,
}

impl GrpcCode {
    pub fn number(self) -> u8 {
        match self {
            GrpcCode::Ok => 0,
            GrpcCode::Cancelled => 1,
            GrpcCode::Unknown => 2,
            GrpcCode::DeadlineExceeded => 4,
            GrpcCode::ResourceExhausted => 8,
            GrpcCode::Internal => 13,
            GrpcCode::Unavailable => 14,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GrpcCode::Ok => "OK",
            GrpcCode::Cancelled => "CANCELLED",
            GrpcCode::Unknown => "UNKNOWN",
            GrpcCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            GrpcCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            GrpcCode::Internal => "INTERNAL",
            GrpcCode::Unavailable => "UNAVAILABLE",
        }
    }
}

/// How one try ended, as the proxy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The connection could not be made (refused, unreachable, connect timeout).
    ConnectFailure,
    /// HTTP/2 `REFUSED_STREAM`: the server did not start processing the request.
    RefusedStream,
    /// The connection reset before any byte of the request was sent.
    ResetBeforeRequest,
    /// The connection or stream reset after the request was sent.
    Reset,
    /// The per-try timeout fired before a response arrived.
    Timeout,
    /// A response arrived. gRPC errors are `status: 200` with a `grpc-status`.
    Response { status: u16, grpc: Option<GrpcCode> },
}

impl Outcome {
    pub fn http(status: u16) -> Self {
        Outcome::Response { status, grpc: None }
    }

    pub fn grpc(code: GrpcCode) -> Self {
        Outcome::Response {
            status: 200,
            grpc: Some(code),
        }
    }

    /// Could the upstream have acted on the request? A retry then repeats it, which is only
    /// harmless when the request is safe to repeat. Refused connections and refused streams
    /// are the protocol's proof that nothing was processed.
    pub fn may_have_been_processed(self) -> bool {
        !matches!(
            self,
            Outcome::ConnectFailure | Outcome::RefusedStream | Outcome::ResetBeforeRequest
        )
    }

    pub fn is_success(self) -> bool {
        match self {
            Outcome::Response { status, grpc } => {
                status < 500 && matches!(grpc, None | Some(GrpcCode::Ok))
            }
            _ => false,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::ConnectFailure => f.write_str("connection refused"),
            Outcome::RefusedStream => f.write_str("stream refused"),
            Outcome::ResetBeforeRequest => f.write_str("reset before the request"),
            Outcome::Reset => f.write_str("reset"),
            Outcome::Timeout => f.write_str("per-try timeout"),
            Outcome::Response {
                grpc: Some(code), ..
            } => write!(f, "gRPC {}", code.name()),
            Outcome::Response { status, .. } => write!(f, "HTTP {status}"),
        }
    }
}

/// The retry policy of a call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Retry {
    /// Retries after the first try (Envoy's `num_retries`).
    pub count: u32,
    pub on: BTreeSet<RetryOn>,
    /// The codes `retriable-status-codes` retries.
    pub status_codes: BTreeSet<u16>,
    pub backoff: Backoff,
    /// Retry outcomes where the request may have been processed only when it is safe to repeat.
    pub only_if_safe: bool,
    /// A request carrying an `Idempotency-Key` counts as safe to repeat (the key is passed on
    /// unchanged so the server can deduplicate).
    pub honor_idempotency_key: bool,
    /// Only one hop of a chain retries a given failure: a proxy that gave up after retrying
    /// marks its answer, and a proxy never retries a marked answer.
    pub single_hop: bool,
    /// Request bodies up to this size are kept for replay; a larger body is not retried.
    pub max_replay_bytes: u32,
}

/// Why a failed try is or is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    Retry,
    /// No condition in the retry list matches this outcome.
    NotListed,
    /// A condition matches, but the request may have been processed and is not safe to repeat.
    Unsafe,
    /// No retries are configured.
    NoRetries,
    /// Another hop already retried this failure (its answer carries the mark).
    RetriedBelow,
}

impl Retry {
    /// Does any listed condition match this outcome? (Envoy's `wouldRetryFromHeaders` /
    /// `wouldRetryFromReset`, without the rate-limit and HTTP/3 special cases.)
    pub fn matches(&self, outcome: Outcome) -> bool {
        let has = |c| self.on.contains(&c);
        let any_reset = has(RetryOn::Reset) || has(RetryOn::Any5xx) || has(RetryOn::GatewayError);
        match outcome {
            Outcome::ConnectFailure => {
                any_reset || has(RetryOn::ConnectFailure) || has(RetryOn::ResetBeforeRequest)
            }
            Outcome::RefusedStream => any_reset || has(RetryOn::RefusedStream),
            Outcome::ResetBeforeRequest => any_reset || has(RetryOn::ResetBeforeRequest),
            Outcome::Reset | Outcome::Timeout => any_reset,
            Outcome::Response { status, grpc } => {
                (has(RetryOn::Any5xx) && (500..=599).contains(&status))
                    || (has(RetryOn::GatewayError) && matches!(status, 502..=504))
                    || (has(RetryOn::Retriable4xx) && status == 409)
                    || (has(RetryOn::RetriableStatusCodes) && self.status_codes.contains(&status))
                    || match grpc {
                        Some(GrpcCode::Cancelled) => has(RetryOn::Cancelled),
                        Some(GrpcCode::DeadlineExceeded) => has(RetryOn::DeadlineExceeded),
                        Some(GrpcCode::ResourceExhausted) => has(RetryOn::ResourceExhausted),
                        Some(GrpcCode::Internal) => has(RetryOn::Internal),
                        Some(GrpcCode::Unavailable) => has(RetryOn::Unavailable),
                        _ => false,
                    }
            }
        }
    }

    /// Would a try ending in `outcome` be retried, for a request that is (or is not) safe to
    /// repeat? Counts, budgets and deadlines are checked by the caller.
    pub fn decide(&self, outcome: Outcome, safe_to_repeat: bool) -> Decision {
        self.decide_marked(outcome, safe_to_repeat, false)
    }

    /// As [`Retry::decide`], for an answer that may carry another hop's "retries exhausted"
    /// mark, which a `single_hop` policy never retries.
    pub fn decide_marked(&self, outcome: Outcome, safe_to_repeat: bool, marked: bool) -> Decision {
        if self.count == 0 {
            Decision::NoRetries
        } else if !self.matches(outcome) {
            Decision::NotListed
        } else if self.only_if_safe && !safe_to_repeat && outcome.may_have_been_processed() {
            Decision::Unsafe
        } else if marked && self.single_hop {
            Decision::RetriedBelow
        } else {
            Decision::Retry
        }
    }

    /// The first listed condition that matches `outcome` (for "retries by condition" metrics).
    pub fn matching_condition(&self, outcome: Outcome) -> Option<RetryOn> {
        self.on.iter().copied().find(|c| {
            let single = Retry {
                on: std::iter::once(*c).collect(),
                status_codes: self.status_codes.clone(),
                ..self.clone()
            };
            single.matches(outcome)
        })
    }

    /// Does the list retry a try that timed out? Without this a per-try timeout ends the call.
    pub fn covers_timeout(&self) -> bool {
        self.on.iter().any(|c| c.covers_timeout())
    }
}

/// Retries allowed only while they stay under a share of recent requests plus a floor
/// (Linkerd/Finagle style: 20 %, 10 per second, over 10 s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Budget {
    /// Retries as a share of requests, 0.0–1.0.
    pub ratio: f64,
    /// Retries always allowed per second, whatever the ratio says.
    pub min_per_second: u32,
    pub window: Dur,
}

/// Caps on what may be in flight to one upstream service (Envoy's circuit-breaker thresholds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub max_connections: u32,
    pub max_pending: u32,
    pub max_requests: u32,
    pub max_retries: u32,
}

impl Limits {
    /// Istio's value for every cap: the largest the field can hold, i.e. no cap.
    pub const UNLIMITED: u32 = u32::MAX;

    pub fn unbounded(&self) -> Vec<&'static str> {
        [
            ("max_connections", self.max_connections),
            ("max_pending", self.max_pending),
            ("max_requests", self.max_requests),
            ("max_retries", self.max_retries),
        ]
        .into_iter()
        .filter(|(_, v)| *v >= Limits::UNLIMITED / 2)
        .map(|(n, _)| n)
        .collect()
    }
}

/// Caps on what a service's inbound proxy lets through to its local app, and how long it waits
/// for the app's answer. Not layered with presets: they protect the callee, whoever calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InboundLimits {
    /// Requests to the app in flight at once, per proxy (every caller together).
    pub max_requests: u32,
    /// Requests to the app in flight at once from one calling identity.
    pub max_requests_per_caller: u32,
    /// How long the app may take to start its answer (the response head); `None`: no limit.
    pub timeout: Option<Dur>,
}

impl InboundLimits {
    /// The defaults: as many requests as the outbound caps allow toward one upstream (so a
    /// caller's default caps never trip ours first), a quarter of them per caller (four callers
    /// at their cap fill the app; one cannot), 30 s for the app to answer (longer than the
    /// default route timeout of 10 s, so it fires only when a caller does not give up).
    pub const DEFAULT: InboundLimits = InboundLimits {
        max_requests: 1024,
        max_requests_per_caller: 256,
        timeout: Some(Dur::from_millis(30_000)),
    };
}

impl Default for InboundLimits {
    fn default() -> Self {
        InboundLimits::DEFAULT
    }
}

/// Taking a copy that keeps failing out of the rotation (Envoy's outlier detection, the
/// consecutive-gateway-failure detector).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Outlier {
    /// Consecutive 502/503/504 or connection failures that eject a copy.
    pub consecutive_gateway_failures: u32,
    /// Ejected for this long times the number of times it has been ejected.
    pub base_ejection_time: Dur,
    /// Never eject more than this share of a service's copies.
    pub max_ejection_percent: u32,
}

/// How a copy is chosen for each try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Balancer {
    RoundRobin,
    /// Power of two choices on the fewest requests in flight.
    LeastRequests,
    /// Power of two choices on peak EWMA latency × requests in flight (Linkerd's).
    PeakEwma,
}

impl Balancer {
    pub const ALL: [(&'static str, Balancer); 3] = [
        ("round-robin", Balancer::RoundRobin),
        ("least-requests", Balancer::LeastRequests),
        ("peak-ewma", Balancer::PeakEwma),
    ];
}

/// Everything the proxy applies to one call (or one route of it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    /// The route timeout: all tries and back-off together. `None`: no timeout.
    pub timeout: Option<Dur>,
    /// Each try's timeout. `None`: a try is bounded only by the route timeout.
    pub per_try_timeout: Option<Dur>,
    pub connect_timeout: Dur,
    pub retry: Retry,
    pub budget: Option<Budget>,
    pub limits: Limits,
    /// The `grpc-status` a proxy answers a gRPC caller with when its own timeout fires:
    /// Envoy says UNAVAILABLE, Linkerd (and hopwise) DEADLINE_EXCEEDED.
    pub grpc_status_on_timeout: GrpcCode,
    /// Send the remaining time to the next hop and trim our timeouts to what the caller has
    /// left (`grpc-timeout` for gRPC, `x-hopwise-timeout-ms` for HTTP).
    pub propagate_deadline: bool,
    pub outlier: Option<Outlier>,
    pub balancer: Balancer,
}

impl Policy {
    /// Tries in all: the first and the retries.
    pub fn tries(&self) -> u32 {
        self.retry.count.saturating_add(1)
    }

    /// What the proxy answers its caller when it stops trying after `last`.
    /// A response is passed on unchanged (as Envoy does); a failure to get one becomes
    /// 503 (or gRPC UNAVAILABLE); a timeout becomes 504 (or the configured gRPC status).
    pub fn give_up_answer(&self, last: Outcome, protocol: Protocol) -> Outcome {
        match (last, protocol) {
            (Outcome::Response { .. }, _) => last,
            (Outcome::Timeout, Protocol::Http) => Outcome::http(504),
            (Outcome::Timeout, Protocol::Grpc) => Outcome::grpc(self.grpc_status_on_timeout),
            (_, Protocol::Http) => Outcome::http(503),
            (_, Protocol::Grpc) => Outcome::grpc(GrpcCode::Unavailable),
        }
    }

    // `try_window`, the first try's timeout, is in `attempt.rs` with the rest of that arithmetic.
}

/// RFC 9110 §9.2.2: the idempotent methods (the safe ones, PUT and DELETE).
pub fn idempotent_method(method: &str) -> bool {
    matches!(
        method.to_ascii_uppercase().as_str(),
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    )
}

#[cfg(test)]
mod tests;
