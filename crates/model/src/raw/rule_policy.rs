//! A route rule's own policy as written: HTTPRoute's `timeouts` (`request`, `backend_request`)
//! and `retry` (`attempts`, `backoff`, `codes`), the Gateway API's fields in the file's snake
//! case, durations in the Gateway API's format (GEP-2257: `500ms`, `1h30m`; `0s` switches a
//! timeout off). Types and their reader; what they mean over the call's policy is
//! `crate::route::RulePolicy`'s, checks spanning fields `crate::route::resolve`'s.

use schemars::JsonSchema;
use serde::Serialize;

use crate::duration::{Dur, GatewayDur};
use crate::read::Reader;
use crate::route::RulePolicy;
use crate::yaml::{Node, Value};

/// HTTPRouteTimeouts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    /// All tries and back-off together (hopwise's `timeout`); `0s`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<GatewayDur>,
    /// Each try (hopwise's `per_try_timeout`), at most `request`; `0s`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_request: Option<GatewayDur>,
}

/// HTTPRouteRetry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRuleRetry {
    /// Retries after the first try (hopwise's `retries.count`), at most 10.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// The back-off's base (hopwise's `retries.backoff.base`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<GatewayDur>,
    /// Status codes retried, 400–599 (hopwise's `retriable-status-codes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codes: Option<Vec<u16>>,
}

pub(super) fn read_timeouts(r: &mut Reader, n: &Node, p: &str) -> Option<RawTimeouts> {
    let mut f = r.fields(n, p)?;
    let t = RawTimeouts {
        request: f.get(r, "request", gateway_duration),
        backend_request: f.get(r, "backend_request", gateway_duration),
    };
    f.finish(r);
    Some(t)
}

pub(super) fn read_retry(r: &mut Reader, n: &Node, p: &str) -> Option<RawRuleRetry> {
    let mut f = r.fields(n, p)?;
    let retry = RawRuleRetry {
        attempts: f.get(r, "attempts", |r, n, p| {
            let max = u64::from(RulePolicy::MAX_ATTEMPTS);
            match &n.value {
                Value::Int(i) if *i > max as i64 => {
                    let why = "each hop that retries multiplies the tries below it";
                    r.error(
                        p,
                        n.pos,
                        format!("{i} retries is too many: at most {max} ({why})"),
                    );
                    None
                }
                _ => r.count(n, p, max).map(|v| v as u32),
            }
        }),
        backoff: f.get(r, "backoff", |r, n, p| {
            let d = gateway_duration(r, n, p)?;
            if d.0.0.is_zero() {
                r.error(p, n.pos, "a back-off must be longer than zero");
                return None;
            }
            Some(d)
        }),
        codes: f.get(r, "codes", |r, n, p| {
            r.list(n, p, |r, n, p| {
                let code = r.count(n, p, 999)?;
                if !(400..=599).contains(&code) {
                    let why = "the Gateway API retries error statuses only";
                    r.error(
                        p,
                        n.pos,
                        format!("{code} is not a status from 400 to 599 ({why})"),
                    );
                    return None;
                }
                Some(code as u16)
            })
        }),
    };
    f.finish(r);
    Some(retry)
}

fn gateway_duration(r: &mut Reader, n: &Node, p: &str) -> Option<GatewayDur> {
    let Value::Str(s) = &n.value else {
        let found = n.value.kind();
        let msg = format!("expected a Gateway API duration such as `500ms` or `2s`, found {found}");
        r.error(p, n.pos, msg);
        return None;
    };
    match Dur::gateway(s) {
        Ok(d) => Some(GatewayDur(d)),
        Err(e) => {
            r.error(p, n.pos, e.to_string());
            None
        }
    }
}
