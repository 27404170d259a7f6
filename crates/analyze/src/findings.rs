//! Findings: each with a code, a severity, the call it is about, and a one-line fix.

use std::time::Duration;

use hopwise_model::duration::{human, seconds};
use hopwise_model::{Call, Mesh, RetryOn};
use serde::Serialize;

use crate::fanout::FanoutRow;

mod fault;
mod rate;
mod tcp;
mod upgrade;
use crate::timeouts::{CallTiming, EntryTiming, Timeouts};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub code: &'static str,
    pub severity: Severity,
    /// The call or service it is about (`checkout → pricing`).
    pub subject: String,
    /// Where to change it in the mesh file.
    pub path: String,
    pub message: String,
    pub fix: String,
}

/// Thresholds the findings use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Attempts at one service per request above which fan-out is an error.
    pub max_fanout: u64,
    /// A spare share of the caller's window below which the margin is called thin.
    pub thin_margin: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_fanout: 10,
            thin_margin: 0.1,
        }
    }
}

/// Every finding of the mesh, errors first (within a severity, in the order they are found:
/// entries, then each call family by family, then fan-out, then shadowed route rules, then
/// route patterns that can never match, then route targets a caller cannot reach).
pub fn find(
    mesh: &Mesh,
    timeouts: &Timeouts,
    fanout: &[FanoutRow],
    opts: &Options,
) -> Vec<Finding> {
    let mut out = Out::default();
    for entry in &timeouts.entries {
        exceeds_client(&mut out, entry);
    }
    for (call, t) in mesh.calls().zip(&timeouts.calls) {
        if let Some(callee) = tcp::whole_tcp(mesh, call) {
            tcp::findings(&mut out, mesh, call, callee);
            continue;
        }
        upgrade::findings(&mut out, mesh, call);
        rate::findings(&mut out, mesh, call);
        caller_window(&mut out, mesh, call, t, opts);
        timeouts_unset(&mut out, call);
        unsafe_retries(&mut out, call);
        retry_settings(&mut out, call);
        unbounded_limits(&mut out, call);
    }
    for row in fanout {
        retry_fanout(&mut out, mesh, row, opts);
    }
    out.0.extend(crate::routes::shadowed(mesh));
    out.0.extend(crate::routes::never_matching(mesh));
    out.0.extend(crate::routes::unreachable(mesh));
    out.0.extend(fault::findings(mesh));
    let mut out = out.0;
    out.sort_by_key(|f| f.severity);
    out
}

/// The findings as they are found.
#[derive(Default)]
struct Out(Vec<Finding>);

impl Out {
    fn push(
        &mut self,
        code: &'static str,
        severity: Severity,
        subject: &str,
        path: &str,
        message: String,
        fix: String,
    ) {
        self.0.push(Finding {
            code,
            severity,
            subject: subject.to_owned(),
            path: path.to_owned(),
            message,
            fix,
        })
    }
}

/// `exceeds-client`: requests entering at a service outlast its outside client's wait.
fn exceeds_client(out: &mut Out, entry: &EntryTiming) {
    if let Some(wait) = entry.client_waits {
        let fits = entry.worst_case.is_some_and(|w| w <= wait);
        if !fits {
            let worst = entry.worst_case.map_or("forever".to_owned(), seconds);
            out.push(
                "exceeds-client",
                Severity::Error,
                &entry.service,
                &format!("services.{}.entry.timeout", entry.service),
                format!(
                    "a request entering at {} can take {worst} when the bottom hangs; its client waits {}",
                    entry.service,
                    seconds(wait)
                ),
                "shrink the timeouts below it until they nest inside the client's wait"
                    .to_owned(),
            );
        }
    }
}

/// `exceeds-caller` and `thin-margin`: a call's tries against its caller's window.
fn caller_window(out: &mut Out, mesh: &Mesh, call: &Call, t: &CallTiming, opts: &Options) {
    let app_overrun = call.app_retries > 0
        && t.tries_that_fit == t.tries_when_hung
        && matches!((t.caller_window, t.worst_case), (Some(w), Some(c)) if c > w)
        || (call.app_retries > 0 && t.caller_window.is_some() && t.worst_case.is_none());
    if let (true, Some(window)) = (app_overrun, t.caller_window) {
        app_retries_overrun(out, mesh, call, t, window);
    } else if let Some(window) = t.caller_window
        && t.tries_that_fit < t.tries_when_hung
    {
        tries_overrun(out, mesh, call, t, window);
    } else if let (Some(window), Some(worst)) = (t.caller_window, t.worst_case) {
        thin_margin(out, call, window, worst, opts);
    }
}

/// `exceeds-caller` on `app_retries`: the application's retries outlast the caller's window.
fn app_retries_overrun(out: &mut Out, mesh: &Mesh, call: &Call, t: &CallTiming, window: Duration) {
    let label = call.label();
    let caller = caller_of(mesh, &call.from);
    let per = if caller == "the client" {
        "in all"
    } else {
        "per try"
    };
    out.push(
        "exceeds-caller",
        Severity::Error,
        &label,
        &format!("{}.app_retries", call.path),
        format!(
            "{caller} gives {} {} {per}, but {}'s call with its {} application retries can take {}: the later ones are work nobody waits for",
            call.from,
            human(window),
            call.from,
            call.app_retries,
            t.worst_case.map_or("forever".to_owned(), human),
        ),
        "retry in one place: drop the application's retries or shrink the timeouts"
            .to_owned(),
    );
}

/// `exceeds-caller` on `per_try_timeout`: some tries cannot finish in the caller's window.
fn tries_overrun(out: &mut Out, mesh: &Mesh, call: &Call, t: &CallTiming, window: Duration) {
    let label = call.label();
    let need = t.worst_case.map_or("forever".to_owned(), human);
    let fit = match t.tries_that_fit {
        0 => "none can finish".to_owned(),
        n => format!("only {n} can finish"),
    };
    let lost = t.tries_when_hung - t.tries_that_fit;
    let rest = if t.tries_that_fit == 0 {
        format!("so all {lost} are work nobody waits for")
    } else {
        format!(
            "and the other {lost} {} work nobody waits for",
            if lost == 1 { "is" } else { "are" }
        )
    };
    let fix = match t.largest_fitting_per_try {
        Some(d) => format!(
            "set per_try_timeout to {} or less (or retry less)",
            human(d)
        ),
        None => "retry less: the back-off alone fills the caller's window".to_owned(),
    };
    let message = {
        let caller = caller_of(mesh, &call.from);
        let per = if caller == "the client" {
            "in all"
        } else {
            "per try"
        };
        if t.tries_when_hung == 1 {
            format!(
                "{caller} gives {} {} {per}, but {}'s one try can take {need}: work nobody waits for",
                call.from,
                human(window),
                call.from,
            )
        } else {
            format!(
                "{caller} gives {} {} {per}, but {}'s {} tries need {need}: {fit}, {rest}",
                call.from,
                human(window),
                call.from,
                t.tries_when_hung
            )
        }
    };
    out.push(
        "exceeds-caller",
        Severity::Error,
        &label,
        &format!("{}.per_try_timeout", call.path),
        message,
        fix,
    );
}

/// `thin-margin`: the tries fit the caller's window with little to spare.
fn thin_margin(out: &mut Out, call: &Call, window: Duration, worst: Duration, opts: &Options) {
    let label = call.label();
    let spare = window.saturating_sub(worst);
    if (spare.as_secs_f64()) < opts.thin_margin * window.as_secs_f64() {
        out.push(
            "thin-margin",
            Severity::Info,
            &label,
            &format!("{}.per_try_timeout", call.path),
            format!(
                "{}'s tries take at most {} of the {} it is given: {} to spare",
                call.from,
                human(worst),
                human(window),
                human(spare)
            ),
            "leave room for slow lookups and pauses: shrink the per-try timeout".to_owned(),
        );
    }
}

/// `no-timeout` and `timeout-not-retried`.
fn timeouts_unset(out: &mut Out, call: &Call) {
    let label = call.label();
    let p = &call.policy;
    if p.try_window().is_none() {
        out.push(
            "no-timeout",
            Severity::Warning,
            &label,
            &format!("{}.timeout", call.path),
            format!(
                "{label} has no timeout: when {} hangs, so does {}",
                call.to, call.from
            ),
            "set `timeout` (all tries) or `per_try_timeout`".to_owned(),
        );
    }
    if p.per_try_timeout.is_some() && p.retry.count > 0 && !p.retry.covers_timeout() {
        out.push(
            "timeout-not-retried",
            Severity::Warning,
            &label,
            &format!("{}.retries.on", call.path),
            format!(
                "a try that times out is not retried: none of `reset`, `gateway-error`, `5xx` is in the retry list, so {} retries on timeouts never happen",
                p.retry.count
            ),
            "add `reset` to `retries.on` (it does not make a fast 503 retriable)".to_owned(),
        );
    }
}

/// `unsafe-retry` and `unsafe-retry-skipped`: retries of a call not safe to repeat.
fn unsafe_retries(out: &mut Out, call: &Call) {
    let label = call.label();
    let p = &call.policy;
    let processed_conditions: Vec<RetryOn> = p
        .retry
        .on
        .iter()
        .copied()
        .filter(|c| retries_processed(*c, &p.retry.status_codes))
        .collect();
    if !call.idempotent && p.retry.count > 0 && !processed_conditions.is_empty() {
        let names: Vec<&str> = processed_conditions.iter().map(|c| c.name()).collect();
        if p.retry.only_if_safe {
            out.push(
                "unsafe-retry-skipped",
                Severity::Info,
                &label,
                &format!("{}.retries.on", call.path),
                format!(
                    "{} is not safe to repeat, so `{}` will not be retried on it; only failures where nothing was processed are",
                    call.method,
                    names.join("`, `")
                ),
                "if the callee deduplicates, declare `idempotent: true` or send an Idempotency-Key".to_owned(),
            );
        } else {
            out.push(
                "unsafe-retry",
                Severity::Error,
                &label,
                &format!("{}.retries.only_if_safe", call.path),
                format!(
                    "{} {} is not safe to repeat, but it is retried on `{}`, where the callee may already have acted: a payment can be collected twice",
                    call.method,
                    call.route_path.as_deref().unwrap_or(&call.to),
                    names.join("`, `")
                ),
                "set `retries.only_if_safe: true`, or make the call idempotent and declare it"
                    .to_owned(),
            );
        }
    }
}

/// `retries-without-conditions`, `status-codes-unused` and `no-budget`.
fn retry_settings(out: &mut Out, call: &Call) {
    let label = call.label();
    let p = &call.policy;
    if p.retry.count > 0 && p.retry.on.is_empty() {
        out.push(
            "retries-without-conditions",
            Severity::Warning,
            &label,
            &format!("{}.retries.on", call.path),
            format!(
                "{} retries are configured but no condition is listed, so nothing is retried",
                p.retry.count
            ),
            "list the conditions in `retries.on`, e.g. [connect-failure, refused-stream]"
                .to_owned(),
        );
    }
    if !p.retry.status_codes.is_empty() && !p.retry.on.contains(&RetryOn::RetriableStatusCodes) {
        out.push(
            "status-codes-unused",
            Severity::Warning,
            &label,
            &format!("{}.retries.status_codes", call.path),
            "status codes are listed but `retriable-status-codes` is not in `retries.on`, so they are never retried".to_owned(),
            "add `retriable-status-codes` to `retries.on`, or remove the codes".to_owned(),
        );
    }
    if p.retry.count > 0 && p.budget.is_none() {
        out.push(
            "no-budget",
            Severity::Warning,
            &label,
            &format!("{}.budget", call.path),
            format!(
                "retries are not budgeted: under a failure this call can send {}× its traffic",
                u64::from(p.tries()).saturating_mul(u64::from(call.app_retries) + 1)
            ),
            "set `budget: {ratio: 0.2}` so retries stay a share of requests".to_owned(),
        );
    }
}

/// `unbounded-limits`: caps at Istio's "no cap".
fn unbounded_limits(out: &mut Out, call: &Call) {
    let label = call.label();
    let p = &call.policy;
    let unbounded = p.limits.unbounded();
    if !unbounded.is_empty() {
        out.push(
            "unbounded-limits",
            Severity::Warning,
            &label,
            &format!("{}.limits", call.path),
            format!(
                "{} {} no real cap (4294967295): requests to {} can queue without limit instead of failing fast",
                unbounded.join(", "),
                if unbounded.len() == 1 { "is" } else { "are" },
                call.to
            ),
            "set limits near what the callee can really serve, e.g. max_pending: 128"
                .to_owned(),
        );
    }
}

/// `retry-fanout`: more attempts reach one service per request than `--max-fanout`.
fn retry_fanout(out: &mut Out, mesh: &Mesh, row: &FanoutRow, opts: &Options) {
    if row.attempts <= opts.max_fanout {
        return;
    }
    let path = mesh
        .calls()
        .find(|c| c.to == row.service)
        .map_or(format!("services.{}", row.service), |c| {
            format!("{}.retries", c.path)
        });
    let (chain, bound) = chain_and_bound(row);
    out.push(
        "retry-fanout",
        Severity::Error,
        &row.service,
        &path,
        format!(
            "when {} {}, one request entering at {} makes {} attempts at it ({}); {bound}",
            row.service,
            row.failure.label(),
            row.entry,
            row.attempts,
            chain.join(", "),
        ),
        "retry at one layer only (usually the one nearest the failure), and budget retries"
            .to_owned(),
    );
}

/// The tries per call on the way, and what budgets bound the attempts to.
fn chain_and_bound(row: &FanoutRow) -> (Vec<String>, String) {
    let chain: Vec<String> = row.tries.iter().map(|(c, t)| format!("{c} ×{t}")).collect();
    let bound = if row.with_budgets + 1e-9 < row.attempts as f64 {
        format!("with budgets at steady load about {:.1}", row.with_budgets)
    } else {
        "no retry budget bounds it".to_owned()
    };
    (chain, bound)
}

/// Does this condition retry outcomes where the request may already have been processed?
fn retries_processed(c: RetryOn, codes: &std::collections::BTreeSet<u16>) -> bool {
    match c {
        RetryOn::ConnectFailure | RetryOn::RefusedStream | RetryOn::ResetBeforeRequest => false,
        RetryOn::RetriableStatusCodes => !codes.is_empty(),
        _ => true,
    }
}

fn caller_of(mesh: &Mesh, service: &str) -> String {
    let mut callers: Vec<&str> = Vec::new();
    // A caller whose call has several routes is named once.
    for c in mesh.calls().filter(|c| c.to == service) {
        if !callers.contains(&c.from.as_str()) {
            callers.push(&c.from);
        }
    }
    match callers.as_slice() {
        [] => "the client".to_owned(),
        [one] => (*one).to_owned(),
        many => many.join(" and "),
    }
}
