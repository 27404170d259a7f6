//! Readers for the policy fields every layer shares (`read_policy`): retries, budget, limits,
//! outlier ejection.

use super::values::{or_none, positive_duration, positive_timeout, positive_u32, u32_field};
use super::{RawBackoff, RawBudget, RawLimits, RawOutlier, RawPolicy, RawRetries, TimeoutStatus};
use crate::backoff::Strategy;
use crate::policy::{Balancer, RetryOn};
use crate::preset::Preset;
use crate::read::{Fields, Reader};
use crate::yaml::Node;

pub(super) fn read_policy(r: &mut Reader, f: &mut Fields<'_>) -> RawPolicy {
    RawPolicy {
        preset: f.get(r, "preset", |r, n, p| r.word(n, p, &Preset::ALL)),
        timeout: f.get(r, "timeout", or_none(positive_timeout)),
        per_try_timeout: f.get(r, "per_try_timeout", or_none(positive_timeout)),
        connect_timeout: f.get(r, "connect_timeout", positive_duration),
        retries: f.get(r, "retries", read_retries),
        budget: f.get(r, "budget", or_none(read_budget)),
        limits: f.get(r, "limits", read_limits),
        grpc_status_on_timeout: f.get(r, "grpc_status_on_timeout", |r, n, p| {
            r.word(
                n,
                p,
                &[
                    ("unavailable", TimeoutStatus::Unavailable),
                    ("deadline-exceeded", TimeoutStatus::DeadlineExceeded),
                ],
            )
        }),
        propagate_deadline: f.get(r, "propagate_deadline", Reader::bool),
        outlier: f.get(r, "outlier", or_none(read_outlier)),
        balancer: f.get(r, "balancer", |r, n, p| r.word(n, p, &Balancer::ALL)),
    }
}

fn read_retries(r: &mut Reader, node: &Node, path: &str) -> Option<RawRetries> {
    let mut f = r.fields(node, path)?;
    let retries = RawRetries {
        count: f.get(r, "count", u32_field),
        on: f.get(r, "on", |r, n, p| {
            r.list(n, p, |r, n, p| r.word(n, p, &RetryOn::ALL))
        }),
        status_codes: f.get(r, "status_codes", |r, n, p| {
            r.list(n, p, |r, n, p| {
                let code = r.count(n, p, 999)?;
                if !(100..=599).contains(&code) {
                    r.error(p, n.pos, format!("{code} is not an HTTP status (100–599)"));
                    return None;
                }
                Some(code as u16)
            })
        }),
        backoff: f.get(r, "backoff", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let b = RawBackoff {
                strategy: f.get(r, "strategy", |r, n, p| r.word(n, p, &Strategy::ALL)),
                base: f.get(r, "base", positive_duration),
                max: f.get(r, "max", positive_duration),
            };
            f.finish(r);
            Some(b)
        }),
        only_if_safe: f.get(r, "only_if_safe", Reader::bool),
        honor_idempotency_key: f.get(r, "honor_idempotency_key", Reader::bool),
        single_hop: f.get(r, "single_hop", Reader::bool),
        max_replay_bytes: f.get(r, "max_replay_bytes", u32_field),
    };
    f.finish(r);
    Some(retries)
}

fn read_outlier(r: &mut Reader, node: &Node, path: &str) -> Option<RawOutlier> {
    let mut f = r.fields(node, path)?;
    let o = RawOutlier {
        consecutive_gateway_failures: f.get(r, "consecutive_gateway_failures", positive_u32),
        base_ejection_time: f.get(r, "base_ejection_time", positive_duration),
        max_ejection_percent: f.get(r, "max_ejection_percent", |r, n, p| {
            r.count(n, p, 100).map(|v| v as u32)
        }),
    };
    f.finish(r);
    Some(o)
}

fn read_budget(r: &mut Reader, node: &Node, path: &str) -> Option<RawBudget> {
    let mut f = r.fields(node, path)?;
    let budget = RawBudget {
        ratio: f.get(r, "ratio", |r, n, p| {
            let v = r.float(n, p)?;
            if !(0.0..=1.0).contains(&v) {
                r.error(
                    p,
                    n.pos,
                    format!("{v} is not a share between 0.0 and 1.0 (20 % is 0.2)"),
                );
                return None;
            }
            Some(v)
        }),
        min_per_second: f.get(r, "min_per_second", u32_field),
        window: f.get(r, "window", positive_duration),
    };
    f.finish(r);
    Some(budget)
}

fn read_limits(r: &mut Reader, node: &Node, path: &str) -> Option<RawLimits> {
    let mut f = r.fields(node, path)?;
    let limits = RawLimits {
        max_connections: f.get(r, "max_connections", positive_u32),
        max_pending: f.get(r, "max_pending", u32_field),
        max_requests: f.get(r, "max_requests", positive_u32),
        max_retries: f.get(r, "max_retries", u32_field),
    };
    f.finish(r);
    Some(limits)
}
