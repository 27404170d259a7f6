//! Names that several crates must spell the same: the `x-hopwise-*` headers a proxy sets or
//! reads, and the metric names a proxy exposes on `/metrics` that the dashboard and the lab's
//! demos read back. A rename here is a rename everywhere.

/// Every header the proxy owns starts with this; an app's own are never stripped by it.
pub const HEADER_PREFIX: &str = "x-hopwise-";
/// The caller's verified SPIFFE identity, set by the inbound proxy only (invariant 7).
pub const PEER_IDENTITY: &str = "x-hopwise-peer-identity";
/// Why the proxy answered itself (a local reply).
pub const ERROR: &str = "x-hopwise-error";
/// The try number of a request sent again.
pub const ATTEMPT: &str = "x-hopwise-attempt";
/// On an answer given up on after retries: how many tries were made.
pub const RETRIES_EXHAUSTED: &str = "x-hopwise-retries-exhausted";
/// Which cap refused a request.
pub const LIMIT: &str = "x-hopwise-limit";
/// The deadline travelling with a request, in milliseconds.
pub const TIMEOUT_MS: &str = "x-hopwise-timeout-ms";
/// The port a captured app dialed at its callee's address, set by the caller's proxy only
/// (an app's own is removed) and read by the callee's, which maps it through its service's
/// `ports` to the app port the request goes to; never passed to an app.
pub const SERVICE_PORT: &str = "x-hopwise-service-port";

/// The metric names as `/metrics` exposes them (counters with `_total`, histograms' buckets
/// with `_bucket`).
pub mod metric {
    pub const REQUESTS: &str = "hopwise_requests_total";
    pub const RESPONSES: &str = "hopwise_responses_total";
    pub const TRIES: &str = "hopwise_tries_total";
    pub const RETRIES: &str = "hopwise_retries_total";
    pub const RETRIES_SKIPPED: &str = "hopwise_retries_skipped_total";
    pub const LIMITS_TRIPPED: &str = "hopwise_limits_tripped_total";
    pub const EJECTIONS: &str = "hopwise_ejections_total";
    pub const LOCAL_REPLIES: &str = "hopwise_local_replies_total";
    pub const REQUEST_DURATION_BUCKET: &str = "hopwise_request_duration_seconds_bucket";
    /// Calls an app made while serving requests, by `trace_context` (`carried` / `absent`).
    pub const APP_CALLS: &str = "hopwise_app_calls_total";
    /// An app's failed answers its proxy marked, by `link` (`trace` / `time`).
    pub const APP_FAILURES_MARKED: &str = "hopwise_app_failures_marked_total";
}
