//! A rule's own policy: HTTPRoute's `timeouts` and `retry` mapped onto hopwise's [`Policy`]
//! fields, applied over the policy the caller calls the backend with ([`RulePolicy::over`]).
//! The rule overrides the fields it names — `timeout`, `per_try_timeout`, `retries.count`,
//! `retries.backoff.base`, the retried statuses — and inherits the rest from the call: budget,
//! limits, `max_replay_bytes`, `single_hop`, deadline propagation. The layering is the mesh's
//! own (`mesh::apply`, as a call route over its call), so back-off and safety follow the same
//! rules.
//!
//! Pure; the proxy applies it per request ([`super`]'s decision carries it), `check` counts its
//! retries.

use crate::duration::Dur;
use crate::policy::{Policy, RetryOn};
use crate::raw::{OrNone, RawBackoff, RawPolicy, RawRetries};

/// HTTPRoute's `timeouts` and `retry`, resolved. `None` in a field: the call's value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RulePolicy {
    /// `timeouts.request`: all tries together; `Some(None)` (`0s`) switches it off.
    pub timeout: Option<Option<Dur>>,
    /// `timeouts.backendRequest`: each try; `Some(None)` (`0s`) switches it off.
    pub per_try_timeout: Option<Option<Dur>>,
    pub retry: Option<RuleRetry>,
}

/// HTTPRoute's `retry`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleRetry {
    /// Retries after the first try.
    pub attempts: Option<u32>,
    /// The back-off's base (its max: 10 × base, as a call's `backoff.base` alone gives).
    pub backoff: Option<Dur>,
    /// The statuses retried; given, they replace every condition of the call's that reads a
    /// status ([`RulePolicy::CODES_WITH`]).
    pub codes: Option<Vec<u16>>,
}

impl RulePolicy {
    /// The most retries a rule may ask for: each hop that retries multiplies the tries below.
    pub const MAX_ATTEMPTS: u32 = 10;

    /// What a rule's `codes` retry besides them: connection failures, and a reset or a try's
    /// timeout (the Gateway API retries "after timing out or receiving a response code
    /// configured to be retryable", and connection errors). None of these reads a status, so
    /// the codes alone say which answers are retried.
    pub const CODES_WITH: [RetryOn; 4] = [
        RetryOn::ConnectFailure,
        RetryOn::RefusedStream,
        RetryOn::ResetBeforeRequest,
        RetryOn::Reset,
    ];

    /// The policy of a request this rule takes, to a backend the caller calls with `call`.
    /// A rule's retry only ever repeats what is safe: a request that may have been processed
    /// (a status, a reset, a timeout) is retried only when the call declares it idempotent or
    /// its method is (`only_if_safe`), whatever the call's own retries allow.
    pub fn over(&self, call: &Policy) -> Policy {
        let mut p = call.clone();
        crate::mesh::apply(&mut p, &self.layer());
        p
    }

    /// The rule as one layer of the mesh file's policy fields.
    fn layer(&self) -> RawPolicy {
        let or_none = |t: Option<Dur>| t.map_or(OrNone::None, OrNone::Some);
        RawPolicy {
            timeout: self.timeout.map(or_none),
            per_try_timeout: self.per_try_timeout.map(or_none),
            retries: self.retry.as_ref().map(|r| RawRetries {
                count: r.attempts,
                on: r.codes.as_ref().map(|_| {
                    let mut on = Self::CODES_WITH.to_vec();
                    on.push(RetryOn::RetriableStatusCodes);
                    on
                }),
                status_codes: r.codes.clone(),
                backoff: r.backoff.map(|base| RawBackoff {
                    base: Some(base),
                    ..RawBackoff::default()
                }),
                only_if_safe: Some(true),
                ..RawRetries::default()
            }),
            ..RawPolicy::default()
        }
    }
}
