//! The retry-chain report as the seed prints it: the table of attempts under both sets of
//! defaults, the reasons row by row, and the timeout trap. Pure.

use std::fmt::Write as _;

use super::{Defaults, ProxyCount, Report, Run, TRAP_REQUESTS};

/// "27" when every checkout saw the same; else the mean and the range.
fn figure(counts: &[u64]) -> String {
    let (Some(min), Some(max)) = (counts.iter().min(), counts.iter().max()) else {
        return "-".to_owned();
    };
    if min == max {
        min.to_string()
    } else {
        let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        format!("{mean:.2} ({min}–{max})")
    }
}

/// The width of each column of `rows`.
fn widths(rows: &[Vec<String>]) -> Vec<usize> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// A line over `rows`' columns with a title across columns `from..=to` for each span, drawn
/// as `── title ──`.
fn spans(rows: &[Vec<String>], gap: &[usize], titles: &[(usize, usize, &str)]) -> String {
    let w = widths(rows);
    // Where each column starts.
    let mut start = Vec::with_capacity(w.len());
    let mut at = 0;
    for (i, width) in w.iter().enumerate() {
        if i > 0 {
            at += gap.get(i - 1).copied().unwrap_or(2);
        }
        start.push(at);
        at += width;
    }
    let mut line = String::new();
    for &(from, to, title) in titles {
        let (Some(&a), Some(&b), Some(&wb)) = (start.get(from), start.get(to), w.get(to)) else {
            continue;
        };
        let text = format!(" {title} ");
        let fill = (b + wb - a).saturating_sub(text.chars().count());
        let pad = a.saturating_sub(line.chars().count());
        let _ = write!(
            line,
            "{:pad$}{}{text}{}",
            "",
            "─".repeat(fill / 2),
            "─".repeat(fill - fill / 2)
        );
    }
    line
}

/// Lays out `rows` in columns: those listed in `left` left-aligned, the others right-aligned;
/// `gap[i]` spaces before column i + 1.
fn columns(rows: &[Vec<String>], gap: &[usize], left: &[usize]) -> Vec<String> {
    let widths = widths(rows);
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (i, cell) in r.iter().enumerate() {
                let w = widths[i];
                if i > 0 {
                    let g = gap.get(i - 1).copied().unwrap_or(2);
                    let _ = write!(line, "{:g$}", "");
                }
                if left.contains(&i) {
                    let _ = write!(line, "{cell:<w$}");
                } else {
                    let _ = write!(line, "{cell:>w$}");
                }
            }
            line.trim_end().to_owned()
        })
        .collect()
}

/// The report as the seed prints it: a table, then the reasons.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Retry chain: frontend's, checkout's and pricing's proxies in a row (three `hopwise proxy` \
         processes from one mesh file per row) in front of inventory; checkouts per row: {}.",
        r.checkouts
    );
    let _ = writeln!(
        out,
        "Attempts at inventory per checkout, counted by pricing's proxy (its tries toward \
         inventory, from /metrics: connection attempts when inventory is down) and by inventory \
         itself (requests received; - when it is down), and what `hopwise check` predicts from \
         the same mesh file."
    );
    let _ = writeln!(out);
    let cells = |run: &Run| {
        [
            figure(&run.proxy_counts),
            run.inventory_counts
                .as_deref()
                .map_or("-".to_owned(), figure),
            run.check.map_or("-".to_owned(), |c| c.to_string()),
        ]
    };
    let mut rows: Vec<Vec<String>> = vec![
        [
            "inventory fails by",
            "proxy",
            "inventory",
            "check",
            "proxy",
            "inventory",
            "check",
            "most per call",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for row in &r.rows {
        let mut cols = vec![row.failure.to_owned()];
        cols.extend(cells(&row.istio));
        cols.extend(cells(&row.hopwise));
        cols.push(row.hopwise.max_per_call.to_string());
        rows.push(cols);
    }
    let gaps = [2, 2, 2, 4, 2, 2, 4];
    let titles = [(1, 3, "Istio's defaults"), (4, 7, "hopwise's defaults")];
    let _ = writeln!(out, "{}", spans(&rows, &gaps, &titles));
    for line in columns(&rows, &gaps, &[0]) {
        let _ = writeln!(out, "{line}");
    }
    let seed: Vec<String> = r.rows.iter().map(|row| row.seed.to_string()).collect();
    let _ = writeln!(
        out,
        "the seed's table (Istio's defaults): {}",
        seed.join(", ")
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "Why, row by row:");
    for (k, row) in r.rows.iter().enumerate() {
        let _ = writeln!(out, "{}. {}", k + 1, row.failure);
        for run in [&row.istio, &row.hopwise] {
            let who = match run.defaults {
                Defaults::Istio => "Istio  ",
                Defaults::Hopwise => "hopwise",
            };
            let _ = writeln!(out, "   {who}: {}.", run.why);
            let hops: Vec<String> = run
                .tries_per_hop
                .iter()
                .map(|h| format!("{} {}", h.call, trim_float(h.tries)))
                .collect();
            let pad = "            ";
            let _ = writeln!(out, "{pad}tries per checkout: {}", hops.join(", "));
            let counted = |c: &[ProxyCount]| {
                c.iter()
                    .map(|s| format!("{} {} ×{}", s.proxy, s.reason, s.count))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if !run.skipped.is_empty() {
                let _ = writeln!(out, "{pad}retries not made: {}", counted(&run.skipped));
            }
            if !run.local_replies.is_empty() {
                let _ = writeln!(
                    out,
                    "{pad}answers the proxies made themselves: {}",
                    counted(&run.local_replies)
                );
            }
            let _ = writeln!(out, "{pad}the app got: {}", run.client_got);
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Timeout trap: pricing's proxy alone, per-try timeout 300 ms, 2 retries, in front of an \
         inventory that accepts requests and never answers; {} requests each.",
        r.timeout_trap.first().map_or(TRAP_REQUESTS, |t| t.requests)
    );
    let mut rows: Vec<Vec<String>> = vec![
        [
            "retry list (retries.on)",
            "tries per request",
            "proxy tries",
            "inventory received",
            "the app got",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for t in &r.timeout_trap {
        rows.push(vec![
            t.retry_on.clone(),
            trim_float(t.tries_per_request),
            t.proxy_tries.to_string(),
            t.inventory_received.to_string(),
            t.client_got.clone(),
        ]);
    }
    for line in columns(&rows, &[2, 2, 2, 2], &[0, 4]) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(
        out,
        "A timed-out try is retried only under reset, gateway-error or 5xx (as Envoy does); \
         Istio's list names none of them, so \"2 retries\" make 1 try."
    );
    out
}

/// 27 rather than 27.0; two decimals otherwise.
fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_exact_when_every_checkout_agrees() {
        assert_eq!(figure(&[27, 27, 27]), "27");
        assert_eq!(figure(&[9, 9, 8]), "8.67 (8–9)");
        assert_eq!(figure(&[]), "-");
        assert_eq!(trim_float(3.0), "3");
    }
}
