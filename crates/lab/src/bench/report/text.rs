//! The text report of `hopwise bench hops`: the per-hop table and the per-configuration table,
//! with their spreads. Pure.

use std::fmt::Write as _;

use super::super::stats::Spread;
use super::paired::{Judged, Verdict};
use super::{Report, Sample};

/// `60.2 [55.1–63.0]`, or just the value when there is one run.
pub fn spread(s: &Spread, decimals: usize) -> String {
    if s.n <= 1 || s.min == s.max {
        format!("{:.*}", decimals, s.median)
    } else {
        format!(
            "{:.*} [{:.*}–{:.*}]",
            decimals, s.median, decimals, s.min, decimals, s.max
        )
    }
}

pub(super) fn opt(s: Option<&Spread>, decimals: usize) -> String {
    s.map_or_else(|| "-".to_owned(), |s| spread(s, decimals))
}

fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let pad = widths[i].saturating_sub(cell.chars().count());
                if i < 3 {
                    format!("{cell}{}", " ".repeat(pad))
                } else {
                    format!("{}{cell}", " ".repeat(pad))
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The text report.
pub fn text(r: &Report) -> String {
    let o = &r.options;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "hopwise bench hops: {} run{}, {} requests one at a time (after {} warm-up), {} req/s for {} s, {} worker{} per proxy, {}",
        o.runs,
        if o.runs == 1 { "" } else { "s" },
        o.requests,
        o.warmup,
        o.rate,
        o.duration_s,
        o.workers,
        if o.workers == 1 { "" } else { "s" },
        if o.pinned {
            "every process pinned to CPU 0"
        } else {
            "unpinned"
        }
    );
    let peers = if r.machine.peers.is_empty() {
        String::new()
    } else {
        format!(
            "; peers: {}",
            r.machine
                .peers
                .iter()
                .map(|p| p.version.clone())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let _ = writeln!(
        s,
        "machine: {}, {} CPUs, Linux {}; hopwise {}{peers}",
        r.machine.cpu, r.machine.cpus, r.machine.kernel, r.machine.hopwise
    );
    let _ = writeln!(
        s,
        "load average (1, 5, 15 min): {} at the start, {} at the end\n",
        r.machine.load_start, r.machine.load_end
    );
    if !r.paired.is_empty() {
        s.push_str(&paired(r));
    }
    if !r.per_hop.is_empty() {
        let _ = writeln!(
            s,
            "Per hop: least-squares slope of latency over 0..{} hops, median [min–max] of runs",
            o.max_hops
        );
        let mut rows = vec![vec![
            "system".to_owned(),
            "mode".into(),
            "".into(),
            "p50 µs/hop".into(),
            "p90 µs/hop".into(),
            "p99 µs/hop".into(),
            format!("cores/proxy @{}/s", o.rate),
            "kernel %".into(),
            format!("peak RSS/proxy MiB, ≤{} conns", o.connections),
        ]];
        for p in &r.per_hop {
            rows.push(vec![
                p.system.name().to_owned(),
                format!("{}{}", p.mode.name(), p.observe.suffix()),
                String::new(),
                spread(&p.p50_us, 1),
                spread(&p.p90_us, 1),
                spread(&p.p99_us, 1),
                opt(p.cores_per_proxy.as_ref(), 3),
                p.kernel_share
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |k| format!("{:.0}", k.median * 100.0)),
                opt(p.rss_mib.as_ref(), 1),
            ]);
        }
        s.push_str(&table(&rows));
    }
    if let Some(c) = &r.captured {
        let _ = writeln!(
            s,
            "\nCaptured hop over the explicit-port (mtls) hop — only the client is captured, so \
             captured less mtls at equal length, per run:\n  p50 +{} µs over {} µs/hop: {} %\n  \
             p90 +{} µs over {} µs/hop: {} %",
            spread(&c.extra_p50_us, 1),
            spread(&c.explicit_p50_us, 1),
            spread(&c.p50_percent, 1),
            spread(&c.extra_p90_us, 1),
            spread(&c.explicit_p90_us, 1),
            spread(&c.p90_percent, 1),
        );
    }
    if r.configs.is_empty() {
        return s;
    }
    s.push_str("\nPer configuration: median [min–max] of runs\n");
    let mut rows = vec![vec![
        "system".to_owned(),
        "mode".into(),
        "hops".into(),
        "p50 µs".into(),
        "p90 µs".into(),
        "p99 µs".into(),
        "cores/proxy".into(),
        "req/s".into(),
        "peak RSS MiB".into(),
        "conns".into(),
    ]];
    for c in &r.configs {
        rows.push(vec![
            c.config.system.name().to_owned(),
            c.config.mode_label(),
            c.config.hops.to_string(),
            spread(&c.p50_us, 1),
            spread(&c.p90_us, 1),
            spread(&c.p99_us, 1),
            opt(c.cores_per_proxy.as_ref(), 3),
            c.rate.map_or_else(|| "-".to_owned(), |r| format!("{r:.0}")),
            opt(c.rss_mib.as_ref(), 1),
            c.connections
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        ]);
    }
    s.push_str(&table(&rows));
    let failed: Vec<&Sample> = r.samples.iter().filter(|s| s.errors > 0).collect();
    if !failed.is_empty() {
        s.push_str("\nFailed requests (tolerated up to 1 % of a measurement):\n");
        for f in failed {
            let _ = writeln!(
                s,
                "  {} (run {}): {} — {}",
                f.config.label(),
                f.run + 1,
                f.errors,
                f.first_error.as_deref().unwrap_or("?")
            );
        }
    }
    let reconnects: u64 = r
        .samples
        .iter()
        .map(|x| x.reconnects + x.cpu.as_ref().map_or(0, |c| c.reconnects))
        .sum();
    if reconnects > 0 {
        let _ = writeln!(
            s,
            "\nClient reconnects (a proxy had closed an idle kept-alive connection; the request went \
             out again on a new one): {reconnects}"
        );
    }
    for x in &r.samples {
        if let Some(c) = x.cpu.as_ref().filter(|c| c.missed > 0) {
            let _ = writeln!(
                s,
                "Stall: {} (run {}): {} request(s) not started at {}/s, every client connection \
                 was waiting",
                x.config.label(),
                x.run + 1,
                c.missed,
                r.options.rate
            );
        }
    }
    s
}

/// `--paired`'s table: each pair's difference, over runs and blocks, and the verdict.
fn paired(r: &Report) -> String {
    let o = &r.options;
    let mut s = format!(
        "Paired: each configuration measured at the same time as its baseline, one client\n\
         alternating requests between them (A, B, then B, A …). The difference A − B of p50 (p90),\n\
         ÷ hops for recording, ÷ 1 for captured (only its first hop differs), median [min–max]\n\
         of {} run{} and of every run's {} blocks. Captured %: 100 × (p50(captured) − p50(mtls))\n\
         ÷ ((p50(mtls) − p50(backend)) ÷ hops), the backend called in the same alternation.\n\
         Verdict: \"meets the bar\" only when the upper end of the spread (the runs' with {}\n\
         runs or more, else the blocks') is under the bar, \"over\" when its lower end is\n\
         above it, else \"cannot judge\".\n",
        o.runs,
        if o.runs == 1 { "" } else { "s" },
        o.blocks,
        super::paired::RUNS_TO_JUDGE,
    );
    let mut rows = vec![vec![
        "pair (A − B)".to_owned(),
        "".into(),
        "".into(),
        "p50 µs/hop, runs".into(),
        "p50, blocks".into(),
        "p90 µs/hop, runs".into(),
        "%, runs".into(),
        "%, blocks".into(),
        "bar".into(),
        "verdict".into(),
    ]];
    for p in &r.paired {
        rows.push(vec![
            p.label.clone(),
            String::new(),
            String::new(),
            spread(&p.p50_us, 2),
            spread(&p.p50_blocks_us, 2),
            spread(&p.p90_us, 2),
            opt(p.percent.as_ref(), 1),
            opt(p.percent_blocks.as_ref(), 1),
            p.bar
                .map_or_else(|| "-".to_owned(), |b| format!("≤ {} {}", b.limit, b.unit)),
            match (p.verdict, p.judged_on) {
                (Verdict::NoBar, _) => "-".to_owned(),
                (v, Judged::Runs) => format!("{} (runs)", v.text()),
                (v, Judged::Blocks) => format!("{} (blocks)", v.text()),
            },
        ]);
    }
    s.push_str(&table(&rows));
    s
}
