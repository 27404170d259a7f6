//! What `hopwise bench hops` reports, and how: the per-run samples, their summary (per-hop
//! slopes per system and mode, per-configuration medians), the text table, the JSON (serde of
//! the same structs) and the SVG plot of p50 latency against hops. Pure except
//! [`write_svg`].

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::Mode;
use super::stats::{Spread, slope};
use crate::error::{LabError, io};

/// What carries the chain: nothing (the client straight to the backend), or a proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    Direct,
    Hopwise,
    Nginx,
    Haproxy,
    Envoy,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Direct => "direct",
            System::Hopwise => "hopwise",
            System::Nginx => "nginx",
            System::Haproxy => "haproxy",
            System::Envoy => "envoy",
        }
    }

    fn colour(self) -> &'static str {
        match self {
            System::Direct => "#555555",
            System::Hopwise => "#1f77b4",
            System::Nginx => "#2ca02c",
            System::Haproxy => "#ff7f0e",
            System::Envoy => "#9467bd",
        }
    }
}

/// One configuration: 0 hops is [`System::Direct`], shared by every line (no proxy differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Config {
    pub system: System,
    pub mode: Option<Mode>,
    pub hops: usize,
}

impl Config {
    pub const DIRECT: Config = Config {
        system: System::Direct,
        mode: None,
        hops: 0,
    };

    pub fn label(&self) -> String {
        match self.mode {
            None => "direct, 0 hops".to_owned(),
            Some(m) => format!(
                "{} {} {} hop{}",
                self.system.name(),
                m.name(),
                self.hops,
                if self.hops == 1 { "" } else { "s" }
            ),
        }
    }
}

/// CPU at a fixed rate, from one run of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuSample {
    /// Requests per second achieved (answered 200) in the measured window.
    pub rate: f64,
    pub seconds: f64,
    /// Cores used by each proxy process (tree), in chain order: out1, in1, out2, …
    pub cores: Vec<f64>,
    /// The share of each proxy's CPU spent in the kernel (system calls, the TCP stack,
    /// scheduling), 0..1, in the same order: what a proxy's own code cannot save.
    pub kernel: Vec<f64>,
    /// Connections the client needed to keep the rate.
    pub connections: usize,
    /// Requests not sent because all the client's connections were waiting (a stall).
    pub missed: u64,
    /// Requests the client sent again on a new connection because a proxy had closed the
    /// kept-alive one before they went out.
    pub reconnects: u64,
}

impl CpuSample {
    pub fn mean_cores(&self) -> Option<f64> {
        mean(&self.cores)
    }

    pub fn mean_kernel(&self) -> Option<f64> {
        mean(&self.kernel)
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// One run of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    pub run: usize,
    pub config: Config,
    pub requests: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub max_us: f64,
    pub cpu: Option<CpuSample>,
    /// Peak RSS (`VmHWM`) of each proxy process (tree), KiB, in chain order.
    pub rss_kib: Vec<u64>,
    /// Requests sent again on a new connection in the latency phase (see [`CpuSample`]).
    pub reconnects: u64,
    /// Requests that failed (latency and CPU phases; tolerated up to 1 %), and the first reason.
    pub errors: u64,
    pub first_error: Option<String>,
}

/// The per-hop cost of one system in one mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerHop {
    pub system: System,
    pub mode: Mode,
    /// Slope of p50 against hops, per run.
    pub p50_us: Spread,
    pub p90_us: Spread,
    pub p99_us: Spread,
    /// Mean cores per proxy at the fixed rate, over every chain length and run.
    pub cores_per_proxy: Option<Spread>,
    /// The kernel's share of that CPU (see [`CpuSample::kernel`]).
    pub kernel_share: Option<Spread>,
    /// The largest proxy's peak RSS, per chain and run, MiB.
    pub rss_mib: Option<Spread>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigSummary {
    pub config: Config,
    pub p50_us: Spread,
    pub p90_us: Spread,
    pub p99_us: Spread,
    pub cores_per_proxy: Option<Spread>,
    pub rate: Option<f64>,
    pub rss_mib: Option<Spread>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerInfo {
    pub name: String,
    pub path: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cpus: usize,
    pub kernel: String,
    pub hopwise: String,
    pub peers: Vec<PeerInfo>,
    /// `/proc/loadavg` when the bench started and ended: other work on the machine shows here.
    pub load_start: String,
    pub load_end: String,
}

/// The options in force (after `--quick`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub runs: usize,
    pub requests: u64,
    pub warmup: u64,
    pub rate: u64,
    pub duration_s: f64,
    pub max_hops: usize,
    pub workers: usize,
    pub modes: Vec<Mode>,
    pub pinned: bool,
    pub peers: bool,
    pub quick: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub options: Plan,
    pub per_hop: Vec<PerHop>,
    pub configs: Vec<ConfigSummary>,
    pub samples: Vec<Sample>,
}

fn spread_of(samples: &[&Sample], f: impl Fn(&Sample) -> Option<f64>) -> Option<Spread> {
    Spread::of(&samples.iter().filter_map(|s| f(s)).collect::<Vec<_>>())
}

fn max_rss_mib(s: &Sample) -> Option<f64> {
    s.rss_kib.iter().max().map(|k| *k as f64 / 1024.0)
}

/// Summarises samples: per configuration (in `configs` order) and per system × mode.
pub fn summarise(
    machine: Machine,
    options: Plan,
    configs: &[Config],
    samples: Vec<Sample>,
) -> Report {
    let mut summaries = Vec::new();
    for c in configs {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.config == *c).collect();
        let Some(p50) = spread_of(&mine, |s| Some(s.p50_us)) else {
            continue;
        };
        summaries.push(ConfigSummary {
            config: *c,
            p50_us: p50,
            p90_us: spread_of(&mine, |s| Some(s.p90_us)).unwrap_or(p50),
            p99_us: spread_of(&mine, |s| Some(s.p99_us)).unwrap_or(p50),
            cores_per_proxy: spread_of(&mine, |s| s.cpu.as_ref()?.mean_cores()),
            rate: spread_of(&mine, |s| Some(s.cpu.as_ref()?.rate)).map(|s| s.median),
            rss_mib: spread_of(&mine, max_rss_mib),
        });
    }
    let mut lines: Vec<(System, Mode)> = configs
        .iter()
        .filter_map(|c| Some((c.system, c.mode?)))
        .collect();
    lines.dedup();
    let runs = samples.iter().map(|s| s.run + 1).max().unwrap_or(0);
    let mut per_hop = Vec::new();
    for (system, mode) in lines {
        let slopes = |f: &dyn Fn(&Sample) -> f64| -> Vec<f64> {
            (0..runs)
                .filter_map(|run| {
                    let points: Vec<(f64, f64)> = samples
                        .iter()
                        .filter(|s| {
                            s.run == run
                                && (s.config == Config::DIRECT
                                    || (s.config.system == system && s.config.mode == Some(mode)))
                        })
                        .map(|s| (s.config.hops as f64, f(s)))
                        .collect();
                    slope(&points)
                })
                .collect()
        };
        let Some(p50) = Spread::of(&slopes(&|s| s.p50_us)) else {
            continue;
        };
        let chains: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.config.system == system && s.config.mode == Some(mode))
            .collect();
        per_hop.push(PerHop {
            system,
            mode,
            p50_us: p50,
            p90_us: Spread::of(&slopes(&|s| s.p90_us)).unwrap_or(p50),
            p99_us: Spread::of(&slopes(&|s| s.p99_us)).unwrap_or(p50),
            cores_per_proxy: spread_of(&chains, |s| s.cpu.as_ref()?.mean_cores()),
            kernel_share: spread_of(&chains, |s| s.cpu.as_ref()?.mean_kernel()),
            rss_mib: spread_of(&chains, max_rss_mib),
        });
    }
    Report {
        machine,
        options,
        per_hop,
        configs: summaries,
        samples,
    }
}

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

fn opt(s: Option<&Spread>, decimals: usize) -> String {
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
        "peak RSS/proxy MiB".into(),
    ]];
    for p in &r.per_hop {
        rows.push(vec![
            p.system.name().to_owned(),
            p.mode.name().to_owned(),
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
    ]];
    for c in &r.configs {
        rows.push(vec![
            c.config.system.name().to_owned(),
            c.config.mode.map_or("-", Mode::name).to_owned(),
            c.config.hops.to_string(),
            spread(&c.p50_us, 1),
            spread(&c.p90_us, 1),
            spread(&c.p99_us, 1),
            opt(c.cores_per_proxy.as_ref(), 3),
            c.rate.map_or_else(|| "-".to_owned(), |r| format!("{r:.0}")),
            opt(c.rss_mib.as_ref(), 1),
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

/// The SVG plot: p50 (median of runs) against hops, one line per system and mode (mTLS solid,
/// plain dashed), all starting from the shared 0-hop point.
pub fn svg(r: &Report) -> String {
    let (w, h) = (760.0_f64, 460.0_f64);
    let (left, right, top, bottom) = (70.0, 190.0, 50.0, 55.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let max_hops = r.options.max_hops.max(1) as f64;
    let direct = r
        .configs
        .iter()
        .find(|c| c.config == Config::DIRECT)
        .map(|c| c.p50_us.median);
    let ymax_data = r
        .configs
        .iter()
        .map(|c| c.p50_us.median)
        .fold(0.0_f64, f64::max);
    let step = nice_step(ymax_data / 5.0);
    let ymax = ((ymax_data / step).ceil() * step).max(step);
    let x = |hops: f64| left + pw * hops / max_hops;
    let y = |us: f64| top + ph * (1.0 - us / ymax);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let title = format!(
        "p50 latency against hops ({}, {} worker{}, median of {} run{})",
        if r.options.pinned {
            "pinned to one CPU"
        } else {
            "unpinned"
        },
        r.options.workers,
        if r.options.workers == 1 { "" } else { "s" },
        r.options.runs,
        if r.options.runs == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="14">{}</text>"#,
        left + pw / 2.0,
        escape(&title)
    );
    // Grid and axes.
    let mut v = 0.0;
    while v <= ymax + step / 2.0 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            yy + 4.0,
            fmt_tick(v)
        );
        v += step;
    }
    for hop in 0..=r.options.max_hops {
        let xx = x(hop as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{hop}</text>"##,
            top + ph,
            top + ph + 18.0
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">hops (out ─▶ in)</text>"#,
        left + pw / 2.0,
        h - 14.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">p50 latency, µs</text>"#,
        top + ph / 2.0
    );
    // Lines.
    let mut legend_y = top + 10.0;
    for p in &r.per_hop {
        let mut pts: Vec<(f64, f64)> = direct.map(|d| (0.0, d)).into_iter().collect();
        pts.extend(
            r.configs
                .iter()
                .filter(|c| c.config.system == p.system && c.config.mode == Some(p.mode))
                .map(|c| (c.config.hops as f64, c.p50_us.median)),
        );
        let colour = p.system.colour();
        let dash = if p.mode == Mode::Plain {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let path: Vec<String> = pts
            .iter()
            .map(|(hx, us)| format!("{:.1},{:.1}", x(*hx), y(*us)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        for (hx, us) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{} {} {} hops: {:.1} µs</title></circle>"#,
                x(*hx),
                y(*us),
                p.system.name(),
                p.mode.name(),
                hx,
                us
            );
        }
        let lx = left + pw + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{} {}: {:.0} µs/hop</text>"#,
            lx + 24.0,
            lx + 30.0,
            legend_y + 4.0,
            p.system.name(),
            p.mode.name(),
            p.p50_us.median
        );
        legend_y += 20.0;
    }
    s.push_str("</svg>\n");
    s
}

fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn fmt_tick(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes [`svg`] to `path`.
pub fn write_svg(r: &Report, path: &Path) -> Result<(), LabError> {
    std::fs::write(path, svg(r)).map_err(io(format!("cannot write the plot {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(run: usize, config: Config, p50: f64) -> Sample {
        Sample {
            run,
            config,
            requests: 100,
            p50_us: p50,
            p90_us: p50 * 1.2,
            p99_us: p50 * 2.0,
            mean_us: p50,
            max_us: p50 * 3.0,
            cpu: (config.hops > 0).then(|| CpuSample {
                rate: 1000.0,
                seconds: 10.0,
                cores: vec![0.05, 0.07],
                kernel: vec![0.6, 0.8],
                connections: 1,
                missed: 0,
                reconnects: 0,
            }),
            rss_kib: if config.hops > 0 {
                vec![4096, 5120]
            } else {
                vec![]
            },
            reconnects: 0,
            errors: 0,
            first_error: None,
        }
    }

    fn chain(system: System, mode: Mode, hops: usize) -> Config {
        Config {
            system,
            mode: Some(mode),
            hops,
        }
    }

    fn report() -> Report {
        let mut configs = vec![Config::DIRECT];
        for m in [Mode::Plain, Mode::Mtls] {
            for h in 1..=2 {
                configs.push(chain(System::Hopwise, m, h));
            }
        }
        let mut samples = Vec::new();
        for run in 0..3 {
            let floor = 20.0 + run as f64;
            samples.push(sample(run, Config::DIRECT, floor));
            for h in 1..=2 {
                let hf = h as f64;
                samples.push(sample(
                    run,
                    chain(System::Hopwise, Mode::Plain, h),
                    floor + (60.0 + run as f64) * hf,
                ));
                samples.push(sample(
                    run,
                    chain(System::Hopwise, Mode::Mtls, h),
                    floor + 70.0 * hf,
                ));
            }
        }
        let machine = Machine {
            cpu: "AMD EPYC".into(),
            cpus: 2,
            kernel: "6.1.0".into(),
            hopwise: "0.1.0".into(),
            peers: vec![],
            load_start: "0.10 0.20 0.30".into(),
            load_end: "1.00 0.50 0.40".into(),
        };
        let plan = Plan {
            runs: 3,
            requests: 100,
            warmup: 50,
            rate: 1000,
            duration_s: 10.0,
            max_hops: 2,
            workers: 2,
            modes: vec![Mode::Plain, Mode::Mtls],
            pinned: false,
            peers: false,
            quick: false,
        };
        summarise(machine, plan, &configs, samples)
    }

    #[test]
    fn per_hop_is_the_median_slope_of_the_runs() {
        let r = report();
        assert_eq!(r.per_hop.len(), 2);
        let plain = &r.per_hop[0];
        assert_eq!((plain.system, plain.mode), (System::Hopwise, Mode::Plain));
        let s = plain.p50_us;
        assert!((s.median - 61.0).abs() < 1e-9 && (s.min - 60.0).abs() < 1e-9);
        assert!((s.max - 62.0).abs() < 1e-9 && s.n == 3);
        assert!((r.per_hop[1].p50_us.median - 70.0).abs() < 1e-9);
        // p90 is 1.2 × p50 everywhere, so its slope is 1.2 × too.
        assert!((plain.p90_us.median - 73.2).abs() < 1e-9);
        let cores = plain.cores_per_proxy.unwrap();
        assert!((cores.median - 0.06).abs() < 1e-12);
        assert!((plain.kernel_share.unwrap().median - 0.7).abs() < 1e-12);
        assert_eq!(plain.rss_mib.unwrap().median, 5.0);
    }

    #[test]
    fn configurations_summarise_across_runs() {
        let r = report();
        assert_eq!(r.configs.len(), 5);
        let d = &r.configs[0];
        assert_eq!(d.config, Config::DIRECT);
        assert_eq!(
            (d.p50_us.median, d.p50_us.min, d.p50_us.max),
            (21.0, 20.0, 22.0)
        );
        assert!(d.cores_per_proxy.is_none() && d.rss_mib.is_none() && d.rate.is_none());
        assert_eq!(r.configs[1].rate, Some(1000.0));
    }

    #[test]
    fn spreads_are_formatted_with_their_range() {
        let s = Spread {
            median: 60.24,
            min: 55.11,
            max: 63.0,
            n: 5,
        };
        assert_eq!(spread(&s, 1), "60.2 [55.1–63.0]");
        let one = Spread {
            median: 0.0712,
            min: 0.0712,
            max: 0.0712,
            n: 1,
        };
        assert_eq!(spread(&one, 3), "0.071");
        assert_eq!(opt(None, 1), "-");
    }

    #[test]
    fn the_table_has_a_row_per_line_and_configuration() {
        let t = text(&report());
        assert!(t.contains("3 runs, 100 requests one at a time"), "{t}");
        assert!(t.contains("p50 µs/hop"), "{t}");
        let plain_row = t
            .lines()
            .find(|l| l.starts_with("hopwise  plain") && l.contains("61.0 [60.0–62.0]"));
        assert!(plain_row.is_some(), "{t}");
        assert!(t.lines().any(|l| l.starts_with("direct   -      0")), "{t}");
        assert!(t.contains("0.060"), "{t}");
        assert!(!t.contains("Failed requests"), "{t}");
        let mut r = report();
        r.samples[2].errors = 2;
        r.samples[2].first_error = Some("HTTP 503".into());
        let t = text(&r);
        assert!(
            t.contains("hopwise mtls 1 hop (run 1): 2 — HTTP 503"),
            "{t}"
        );
    }

    #[test]
    fn the_plot_has_a_line_per_system_and_mode() {
        let s = svg(&report());
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("hopwise mtls: 70 µs/hop"));
        assert!(s.contains("stroke-dasharray"));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(37.0), 50.0);
        assert_eq!(nice_step(120.0), 200.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(fmt_tick(200.0), "200");
    }
}
