//! Reports as text tables for people. (Machines get `serde_json` of the same structs.)

use std::time::Duration;

use hopwise_model::duration::human;

use crate::Report;

fn opt(d: Option<Duration>, none: &str) -> String {
    d.map_or(none.to_owned(), human)
}

/// A left-aligned table with a header row; widths by character count.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            s.push_str(c);
            if i + 1 < cells.len() {
                let pad = widths[i] - c.chars().count() + 2;
                s.push_str(&" ".repeat(pad));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// `3 × 3 × 3` when the calls form a chain (the product is the fan-out); otherwise each call
/// named, since a product would mislead.
fn tries_column(tries: &indexmap::IndexMap<String, u32>) -> String {
    let ends: Vec<(&str, &str)> = tries
        .keys()
        .filter_map(|label| label.split_once(" → "))
        .map(|(from, to)| (from, to.split('/').next().unwrap_or(to)))
        .collect();
    let chain = ends.len() == tries.len() && ends.windows(2).all(|w| w[0].1 == w[1].0);
    if chain {
        tries
            .values()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" × ")
    } else {
        tries
            .iter()
            .map(|(c, t)| format!("{c} ×{t}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

pub fn text(report: &Report) -> String {
    let mut out = tables(report);
    out.push_str(&findings(report, |f| f.path.clone()));
    out
}

/// The timeout and fan-out tables, without the findings.
pub fn tables(report: &Report) -> String {
    let mut out = String::new();
    let t = &report.timeouts;
    out.push_str("Timeout budgets, when everything below hangs\n");
    let rows: Vec<Vec<String>> = t
        .calls
        .iter()
        .map(|c| {
            vec![
                c.call.clone(),
                opt(c.per_try_timeout, "none"),
                opt(c.timeout, "none"),
                if c.tries_when_hung == c.tries {
                    c.tries.to_string()
                } else {
                    format!("{} of {}", c.tries_when_hung, c.tries)
                },
                opt(c.worst_case, "forever"),
                match c.caller_window {
                    Some(w) => format!(
                        "{} of {} in {}",
                        c.tries_that_fit,
                        c.tries_when_hung,
                        human(w)
                    ),
                    None => "-".to_owned(),
                },
                c.callee_tries_that_fit
                    .map_or(String::new(), |(fit, of)| format!("{fit} of {of}")),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "call",
            "per try",
            "timeout",
            "tries",
            "worst case",
            "tries that fit its caller",
            "callee's tries that fit in one of its tries",
        ],
        &rows,
    ));
    for e in &t.entries {
        out.push_str(&format!(
            "requests entering at {}: worst case {}; the client waits {}{}\n",
            e.service,
            opt(e.worst_case, "forever"),
            opt(e.client_waits, "forever"),
            if e.client_retries > 0 {
                format!(" and retries {} times", e.client_retries)
            } else {
                String::new()
            }
        ));
    }

    out.push_str(
        "\nRetry fan-out: attempts reaching a failing service per request entering the mesh \
         (late: started after the client gave up)\n",
    );
    let rows: Vec<Vec<String>> = report
        .fanout
        .iter()
        .map(|r| {
            vec![
                r.entry.clone(),
                r.service.clone(),
                r.failure.label().to_owned(),
                r.attempts.to_string(),
                r.late.to_string(),
                format!("{:.2}", r.with_budgets),
                r.client_gets
                    .clone()
                    .unwrap_or_else(|| "success".to_owned()),
                tries_column(&r.tries),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "entry",
            "failing service",
            "failure",
            "attempts",
            "late",
            "with budgets",
            "client gets",
            "tries per call on the way",
        ],
        &rows,
    ));
    if !report.splits.is_empty() {
        out.push_str(&splits(&report.splits));
    }
    out
}

/// Each split, a row per backend, then the weighted expectation.
fn splits(splits: &[crate::Split]) -> String {
    let mut out = String::from(
        "\nSplits: each backend of a rule as its caller's proxy sends to it, everything below \
         failing at its worst\n",
    );
    let mut rows = Vec::new();
    for s in splits {
        for b in &s.backends {
            let (tries, worst, attempts) = match &b.count {
                Some(c) => (
                    c.tries.to_string(),
                    opt(c.worst_case, "never"),
                    format!("{} when {}", c.attempts, c.attempts_at),
                ),
                None => (
                    "-".into(),
                    "-".into(),
                    format!("0 ({} does not call it)", s.caller),
                ),
            };
            let share = &b.share;
            let subset = (share.subset.iter()).map(|(k, v)| format!("{k}={v}"));
            let backend = std::iter::once(share.service.clone()).chain(subset);
            rows.push(vec![
                format!("{} → {}", s.caller, s.service),
                s.rule.clone(),
                backend.collect::<Vec<_>>().join(" "),
                format!("{:.1} %", share.percent),
                tries,
                worst,
                attempts,
            ]);
        }
        let expected = s
            .expected_attempts
            .map_or("none (every weight 0)".into(), |e| format!("{e:.2}"));
        let mut mean = vec![String::new(); 7];
        (mean[2], mean[6]) = ("expected, by weight".into(), expected);
        rows.push(mean);
    }
    let header = [
        "call",
        "rule",
        "backend",
        "share",
        "tries when hung",
        "worst case",
        "most attempts at one service",
    ];
    out.push_str(&table(&header, &rows));
    out
}

/// The findings and their count, each fix followed by `place` of the finding (its path in the
/// mesh file, or where an imported configuration wrote it).
pub fn findings(report: &Report, place: impl Fn(&crate::Finding) -> String) -> String {
    let mut out = String::from("\nFindings\n");
    if report.findings.is_empty() {
        out.push_str("none\n");
    }
    for f in &report.findings {
        out.push_str(&format!(
            "{:<7}  {}  {}: {}\n         fix: {} ({})\n",
            f.severity.label(),
            f.code,
            f.subject,
            f.message,
            f.fix,
            place(f)
        ));
    }
    let errors = report
        .findings
        .iter()
        .filter(|f| f.severity == crate::Severity::Error)
        .count();
    let warnings = report
        .findings
        .iter()
        .filter(|f| f.severity == crate::Severity::Warning)
        .count();
    out.push_str(&format!("\n{errors} error(s), {warnings} warning(s)\n"));
    out
}

/// What `hopwise check --request` prints: where the request goes, or why nowhere.
pub fn routing(request: &str, routing: &crate::routes::Routing) -> String {
    use crate::routes::Routing;
    let mut out = format!("{request}\n");
    match routing {
        Routing::NoRoutes { service } => {
            out += &format!("  {service} has no routes: the request goes to {service} as it is\n");
        }
        Routing::NoMatch { service } => {
            out += &format!(
                "  no rule of {service}'s routes takes it: the caller's proxy answers 404 \
                 (no-route; gRPC: UNIMPLEMENTED)\n"
            );
        }
        Routing::Rule(t) => {
            let name = t
                .rule_name
                .as_ref()
                .map_or(String::new(), |n| format!(" ({n})"));
            out += &format!(
                "  {}: route {}, rule {}{name}  [{}]\n",
                t.service, t.route, t.rule, t.path
            );
            if !t.filters.is_empty() {
                out += &format!("  filters: {}\n", t.filters.join(", "));
            }
            if let Some(status) = t.redirect {
                out += &format!(
                    "  answered {status} by the caller's proxy (RequestRedirect): no backend is called\n"
                );
                return out;
            }
            if t.backends.iter().all(|b| b.weight == 0) {
                out += "  no backend has weight: the caller's proxy answers 500 (no-backend)\n";
                return out;
            }
            let rows: Vec<Vec<String>> = t
                .backends
                .iter()
                .map(|b| {
                    let subset: Vec<String> =
                        b.subset.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    vec![
                        format!("  {}", b.service),
                        subset.join(","),
                        b.weight.to_string(),
                        format!("{:.1} %", b.percent),
                    ]
                })
                .collect();
            out += &table(&["  backend", "subset", "weight", "share"], &rows);
        }
    }
    out
}
