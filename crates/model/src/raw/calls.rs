//! Calls and routes as written, and the policy fields every layer (defaults → service → call →
//! route) shares: preset, timeouts, retries, budget, limits, outlier ejection, balancer.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use super::{OrNone, TimeoutStatus};
use crate::backoff::Strategy;
use crate::duration::Dur;
use crate::policy::{Balancer, Protocol, RetryOn};
use crate::preset::Preset;

/// One call from a service to another, with its policy and, optionally, named routes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCall {
    #[serde(flatten)]
    pub request: RawRequest,
    #[serde(flatten)]
    pub policy: RawPolicy,
    /// Routes within the call, by name; each inherits the call's settings.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub routes: IndexMap<String, RawRoute>,
}

/// A route within a call, matched by path prefix; it inherits the call's settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Path prefix the route matches, e.g. `/penalty/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(flatten)]
    pub request: RawRequest,
    #[serde(flatten)]
    pub policy: RawPolicy,
}

/// What the caller sends, which decides whether repeating it is safe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRequest {
    /// Overrides the callee's protocol for this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// HTTP method. Default: `GET` over HTTP, `POST` over gRPC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Safe to repeat? Default: the method is idempotent by RFC 9110 (GET, HEAD, OPTIONS,
    /// TRACE, PUT, DELETE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// Retries the calling application's own code makes around this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_retries: Option<u32>,
}

/// Policy fields; each layer (defaults → service → call → route) overrides the one above.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// Start from this product's defaults before applying this layer's fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    /// Route timeout: all tries and back-off together; `none` for no timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<OrNone<Dur>>,
    /// Timeout of each try; `none`: a try is bounded by the route timeout alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<OrNone<Dur>>,
    /// Time allowed to establish a connection to the upstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<Dur>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<RawRetries>,
    /// Retry budget; `none` to switch it off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<OrNone<RawBudget>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    /// gRPC status a proxy answers when its own timeout fires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_status_on_timeout: Option<TimeoutStatus>,
    /// Send the remaining time to the next hop and trim timeouts to the caller's deadline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagate_deadline: Option<bool>,
    /// Outlier ejection; `none` to switch it off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outlier: Option<OrNone<RawOutlier>>,
    /// How a copy is chosen for each try.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balancer: Option<Balancer>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRetries {
    /// Retries after the first try (Envoy's `num_retries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Conditions that are retried, named as Envoy's `retry_on` names them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on: Option<Vec<RetryOn>>,
    /// Status codes `retriable-status-codes` retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_codes: Option<Vec<u16>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<RawBackoff>,
    /// Retry outcomes where the request may have been processed (a response, a reset after
    /// sending, a timeout) only when the request is safe to repeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only_if_safe: Option<bool>,
    /// Treat a request carrying an `Idempotency-Key` header as safe to repeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub honor_idempotency_key: Option<bool>,
    /// Only one hop of a chain retries a given failure (the hop that gave up marks its answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub single_hop: Option<bool>,
    /// Request bodies up to this many bytes are kept for replay; larger ones are not retried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_replay_bytes: Option<u32>,
}

/// Outlier ejection: a copy that keeps failing is taken out of the rotation for a while.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOutlier {
    /// Consecutive 502/503/504 or connection failures that eject a copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consecutive_gateway_failures: Option<u32>,
    /// Ejection lasts this long times the number of times the copy has been ejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_ejection_time: Option<Dur>,
    /// Never eject more than this share (0–100) of a service's copies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ejection_percent: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBackoff {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<Dur>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<Dur>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    /// Retries allowed as a share of requests, 0.0–1.0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Retries always allowed per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_per_second: Option<u32>,
    /// The window over which requests are counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
}
