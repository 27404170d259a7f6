//! The fields of one call or route as the hopwise file writes them: its policy (timeouts,
//! retries, budget) and its destination's caps, connect timeout and ejection — only what the
//! input (or a fix) writes, each recorded with its origin so a finding can name its place.

use super::W;
use crate::ir::{Destination, Field, Route, Skipped};

pub(super) fn dur(d: Option<hopwise_model::Dur>) -> String {
    d.map_or("none".to_owned(), |d| d.to_string())
}

fn list<T: ToString>(items: &[T]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A route's policy fields (what it writes only).
pub(super) fn policy(w: &mut W, indent: usize, path: &str, r: &Route) {
    let (timeout, per_try) = (r.timeout.as_ref(), r.per_try_timeout.as_ref());
    if let Some(t) = timeout {
        w.field(indent, path, "timeout", &dur(t.value), Some(&t.at));
    }
    if let Some(p) = per_try {
        let longer = match (timeout.and_then(|t| t.value), p.value) {
            (Some(t), Some(p)) => p.get() > t.get(),
            _ => false,
        };
        if longer {
            w.written.skipped.push(Skipped {
                at: p.at.clone(),
                why: format!("a per-try timeout of {} is longer than the route's timeout, so it never fires: left out", dur(p.value)),
            });
        } else {
            w.field(indent, path, "per_try_timeout", &dur(p.value), Some(&p.at));
        }
    }
    let retries = [
        r.retry_count.is_some(),
        r.retry_on.is_some(),
        r.status_codes.as_ref().is_some_and(|s| !s.value.is_empty()),
        r.backoff_base.is_some(),
        r.only_if_safe.is_some(),
    ];
    if retries.iter().any(|b| *b) {
        let rpath = format!("{path}.retries");
        w.line(indent, "retries:");
        if let Some(at) = r
            .retry_count
            .as_ref()
            .map(|c| &c.at)
            .or(r.retry_on.as_ref().map(|o| &o.at))
        {
            w.origins.blocks.insert(rpath.clone(), at.clone());
        }
        if let Some(c) = &r.retry_count {
            w.field(
                indent + 2,
                &rpath,
                "count",
                &c.value.to_string(),
                Some(&c.at),
            );
        }
        if let Some(on) = &r.retry_on {
            w.field(indent + 2, &rpath, "on", &list(&on.value), Some(&on.at));
        }
        if let Some(codes) = r.status_codes.as_ref().filter(|s| !s.value.is_empty()) {
            w.field(
                indent + 2,
                &rpath,
                "status_codes",
                &list(&codes.value),
                Some(&codes.at),
            );
        }
        if let Some(o) = &r.only_if_safe {
            let v = o.value.to_string();
            w.field(indent + 2, &rpath, "only_if_safe", &v, Some(&o.at));
        }
        if let Some(b) = &r.backoff_base {
            w.line(indent + 2, &format!("backoff: {{ base: {} }}", b.value));
            w.origins
                .fields
                .insert(format!("{rpath}.backoff"), b.at.clone());
        }
    }
    if let Some(b) = &r.budget {
        let mut parts = Vec::new();
        if let Some(x) = b.value.ratio {
            parts.push(format!("ratio: {x}"));
        }
        if let Some(x) = b.value.min_per_second {
            parts.push(format!("min_per_second: {x}"));
        }
        if let Some(x) = b.value.window {
            parts.push(format!("window: {x}"));
        }
        w.field(
            indent,
            path,
            "budget",
            &format!("{{ {} }}", parts.join(", ")),
            Some(&b.at),
        );
    }
}

pub(super) fn destination(w: &mut W, indent: usize, path: &str, d: &Destination) {
    let caps: [(&str, &Option<Field<u64>>); 4] = [
        ("max_connections", &d.max_connections),
        ("max_pending", &d.max_pending),
        ("max_requests", &d.max_requests),
        ("max_retries", &d.max_retries),
    ];
    if caps.iter().any(|(_, f)| f.is_some()) {
        w.line(indent, "limits:");
        let lpath = format!("{path}.limits");
        for (k, f) in caps {
            if let Some(f) = f {
                // Istio writes 0 for "unset"; a cap of 0 is refused by hopwise.
                let v = if f.value == 0 {
                    u64::from(u32::MAX)
                } else {
                    f.value
                };
                w.field(indent + 2, &lpath, k, &v.to_string(), Some(&f.at));
            }
        }
    }
    if let Some(c) = &d.connect_timeout {
        w.field(
            indent,
            path,
            "connect_timeout",
            &c.value.to_string(),
            Some(&c.at),
        );
    }
    if let Some(o) = &d.outlier {
        // Istio's defaults for what outlierDetection leaves out: 5 errors, 30 s, 10 %.
        let v = o.value;
        let text = format!(
            "{{ consecutive_gateway_failures: {}, base_ejection_time: {}, max_ejection_percent: {} }}",
            v.consecutive.unwrap_or(5).max(1),
            v.base_ejection_time
                .map_or("30s".to_owned(), |d| d.to_string()),
            v.max_ejection_percent.unwrap_or(10)
        );
        w.field(indent, path, "outlier", &text, Some(&o.at));
    }
}
