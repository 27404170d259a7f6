//! `check`'s fixes as edits: each finding whose one-line fix names a value becomes a typed
//! [`Change`] to one call (or route), applied to the mesh, and the mesh checked again until no
//! more fix applies — so a writer (`hopwise convert`'s second file) can write what `check`
//! advises, and the result can be counted. Pure: `&Mesh → Fixed`.
//!
//! What each finding becomes (the values nobody wrote are hopwise's own defaults, the `hopwise`
//! preset):
//! - `retry-fanout`: retries at one layer only — every call on the way to the failing service
//!   but the one nearest it stops retrying (`retries.count: 0`), and that one retries no more
//!   than hopwise's default (2);
//! - `exceeds-caller` (on the tries): `per_try_timeout` set to the largest that fits, or, where
//!   the back-off alone fills the caller's window, only the tries that fit;
//! - `no-timeout`: hopwise's `timeout`; `no-budget`: hopwise's budget; `unbounded-limits`: hopwise's
//!   cap for each unbounded one;
//! - `unsafe-retry`: `retries.only_if_safe: true`; `timeout-not-retried`: `reset` added;
//!   `status-codes-unused`: `retriable-status-codes` added; `retries-without-conditions`:
//!   `connect-failure` and `refused-stream` added.
//!
//! Findings about what the mesh file cannot change (an application's own retries, an outside
//! client's wait, a thin margin, a shadowed rule) are left, and listed.

use std::time::Duration;

use hopwise_model::{Budget, Call, Dur, Limits, Mesh, Preset, RetryOn};
use serde::Serialize;

use crate::{Finding, Options, Report};

/// One edit to one call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fix {
    /// The finding it answers.
    pub code: &'static str,
    /// The call or route it changes: `services.a.calls.b[.routes.r]`.
    pub call: String,
    pub change: Change,
}

/// What a fix sets.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    RetryCount(u32),
    PerTryTimeout(Duration),
    Timeout(Duration),
    Budget(Budget),
    OnlyIfSafe,
    /// Conditions added to `retries.on`.
    RetryOn(Vec<RetryOn>),
    /// Caps set (by name: `max_pending`), the others kept.
    Limits(Vec<(&'static str, u32)>),
}

impl Change {
    /// The field it writes, relative to the call (`retries.count`).
    pub fn field(&self) -> &'static str {
        match self {
            Change::RetryCount(_) => "retries.count",
            Change::PerTryTimeout(_) => "per_try_timeout",
            Change::Timeout(_) => "timeout",
            Change::Budget(_) => "budget",
            Change::OnlyIfSafe => "retries.only_if_safe",
            Change::RetryOn(_) => "retries.on",
            Change::Limits(_) => "limits",
        }
    }
}

/// The mesh with every fix applied.
#[derive(Debug, Clone)]
pub struct Fixed {
    pub mesh: Mesh,
    /// In the order applied; a later fix of the same field of the same call replaces an earlier.
    pub fixes: Vec<Fix>,
    /// The fixed mesh's report: the findings left.
    pub report: Report,
}

/// At most this many rounds of check → fix (a fix can reveal another, as a timeout set on a
/// call makes its caller's window count).
const ROUNDS: usize = 4;

/// Applies `check`'s fixes to `mesh` until none is left to apply.
pub fn apply(mesh: &Mesh, opts: &Options) -> Fixed {
    let mut mesh = mesh.clone();
    let mut fixes: Vec<Fix> = Vec::new();
    let mut report = crate::check(&mesh, opts);
    for _ in 0..ROUNDS {
        let round: Vec<Fix> = plan(&mesh, &report, opts)
            .into_iter()
            .filter(|f| !fixes.contains(f))
            .collect();
        if round.is_empty() {
            break;
        }
        for f in round {
            edit(&mut mesh, &f);
            fixes.retain(|g| g.call != f.call || g.change.field() != f.change.field());
            fixes.push(f);
        }
        report = crate::check(&mesh, opts);
    }
    Fixed {
        mesh,
        fixes,
        report,
    }
}

/// The fixes one report asks for.
pub fn plan(mesh: &Mesh, report: &Report, opts: &Options) -> Vec<Fix> {
    let ours = Preset::Hopwise.policy();
    let mut out: Vec<Fix> = Vec::new();
    let mut push = |code, call: &Call, change| {
        let fix = Fix {
            code,
            call: call.path.clone(),
            change,
        };
        if !out.contains(&fix) {
            out.push(fix);
        }
    };
    // Retries at one layer: the calls above the one nearest each failing service stop.
    let mut quiet: Vec<String> = Vec::new();
    for row in report
        .fanout
        .iter()
        .filter(|r| r.attempts > opts.max_fanout)
    {
        for label in row.tries.keys() {
            let Some(c) = mesh.calls().find(|c| c.label() == *label) else {
                continue;
            };
            if c.to != row.service && c.policy.retry.count > 0 {
                quiet.push(c.path.clone());
                push("retry-fanout", c, Change::RetryCount(0));
            } else if c.to == row.service && c.policy.retry.count > ours.retry.count {
                // The layer that keeps retrying retries as hopwise's default does, not more.
                push("retry-fanout", c, Change::RetryCount(ours.retry.count));
            }
        }
    }
    for f in &report.findings {
        let Some(c) = call_of(mesh, f) else { continue };
        let p = &c.policy;
        // A call that stops retrying needs no fix of how it retries.
        let retrying = !quiet.contains(&c.path);
        let change = match f.code {
            "exceeds-caller" if f.path.ends_with(".per_try_timeout") => report
                .timeouts
                .calls
                .iter()
                .find(|t| t.path == c.path)
                .map(|t| match t.largest_fitting_per_try {
                    Some(d) => Change::PerTryTimeout(d),
                    // "Retry less": the back-off alone fills the window; keep the tries that fit.
                    None => Change::RetryCount(t.tries_that_fit.saturating_sub(1)),
                }),
            "no-timeout" => ours.timeout.map(|d| Change::Timeout(d.get())),
            "no-budget" if retrying => ours.budget.map(Change::Budget),
            "unsafe-retry" if retrying => Some(Change::OnlyIfSafe),
            "timeout-not-retried" if retrying => Some(Change::RetryOn(vec![RetryOn::Reset])),
            "status-codes-unused" if retrying => {
                Some(Change::RetryOn(vec![RetryOn::RetriableStatusCodes]))
            }
            "retries-without-conditions" if retrying => Some(Change::RetryOn(vec![
                RetryOn::ConnectFailure,
                RetryOn::RefusedStream,
            ])),
            "unbounded-limits" => Some(Change::Limits(bounded(&p.limits, &ours.limits))),
            _ => None,
        };
        if let Some(change) = change {
            push(f.code, c, change);
        }
    }
    out
}

/// The call a finding is about: the one whose path is the longest prefix of the finding's.
fn call_of<'m>(mesh: &'m Mesh, f: &Finding) -> Option<&'m Call> {
    mesh.calls()
        .filter(|c| f.path == c.path || f.path.starts_with(&format!("{}.", c.path)))
        .max_by_key(|c| c.path.len())
}

/// Each unbounded cap of `limits`, at `ours`.
fn bounded(limits: &Limits, ours: &Limits) -> Vec<(&'static str, u32)> {
    let pick = |name: &str| match name {
        "max_connections" => ours.max_connections,
        "max_pending" => ours.max_pending,
        "max_requests" => ours.max_requests,
        _ => ours.max_retries,
    };
    limits
        .unbounded()
        .into_iter()
        .map(|n| (n, pick(n)))
        .collect()
}

fn edit(mesh: &mut Mesh, fix: &Fix) {
    let Some(call) = mesh
        .services
        .values_mut()
        .flat_map(|s| s.calls.iter_mut())
        .find(|c| c.path == fix.call)
    else {
        return;
    };
    let p = &mut call.policy;
    match &fix.change {
        Change::RetryCount(n) => p.retry.count = *n,
        Change::PerTryTimeout(d) => p.per_try_timeout = Some(Dur(*d)),
        Change::Timeout(d) => p.timeout = Some(Dur(*d)),
        Change::Budget(b) => p.budget = Some(*b),
        Change::OnlyIfSafe => p.retry.only_if_safe = true,
        Change::RetryOn(on) => p.retry.on.extend(on.iter().copied()),
        Change::Limits(caps) => {
            for (name, v) in caps {
                let l = &mut p.limits;
                match *name {
                    "max_connections" => l.max_connections = *v,
                    "max_pending" => l.max_pending = *v,
                    "max_requests" => l.max_requests = *v,
                    _ => l.max_retries = *v,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
