//! What `hopwise bench hops` reports: the per-run samples and their summary (per-hop slopes
//! per system and mode, per-configuration medians); the JSON is serde of these structs. Pure.
//! The text table is [`text`]'s (`report/text.rs`), the SVG plot of p50 latency against hops
//! [`svg`]'s (`report/svg.rs`, which also writes it); a captured hop's cost over the explicit
//! one [`captured`]'s (`report/captured.rs`); `--paired`'s differences [`paired`]'s
//! (`report/paired.rs`).

use serde::Serialize;

use super::Mode;
pub use super::hops::Observe;
use super::stats::{Spread, slope};

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

    pub(super) fn colour(self) -> &'static str {
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
    /// What hopwise's proxies record (`--access-log`, `--tracing`); off for everyone else.
    pub observe: Observe,
}

impl Config {
    pub const DIRECT: Config = Config {
        system: System::Direct,
        mode: None,
        hops: 0,
        observe: Observe::Off,
    };

    pub fn label(&self) -> String {
        match self.mode {
            None => "direct, 0 hops".to_owned(),
            Some(m) => format!(
                "{} {}{} {} hop{}",
                self.system.name(),
                m.name(),
                self.observe.suffix(),
                self.hops,
                if self.hops == 1 { "" } else { "s" }
            ),
        }
    }

    /// The mode and what is recorded: `plain`, `mtls + tracing 1%`.
    pub fn mode_label(&self) -> String {
        self.mode.map_or_else(
            || "-".to_owned(),
            |m| format!("{}{}", m.name(), self.observe.suffix()),
        )
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
    /// With tracing: the spans the bench's collector received while this configuration ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spans: Option<u64>,
    /// Captured: the connections hop 1's proxy took by capture and sent to a service
    /// (`hopwise_captured_connections_total{outcome="service"}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub captured: Option<u64>,
    /// Captured: the client's network namespace (removed after the measurement).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
}

/// The per-hop cost of one system in one mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerHop {
    pub system: System,
    pub mode: Mode,
    pub observe: Observe,
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
    /// Most connections the client opened in the CPU phase, over the runs: the load at which
    /// the peak RSS was read.
    pub connections: Option<usize>,
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
    /// Most connections the client opens in the CPU phase.
    pub connections: usize,
    pub duration_s: f64,
    pub max_hops: usize,
    pub workers: usize,
    pub modes: Vec<Mode>,
    pub pinned: bool,
    pub peers: bool,
    pub quick: bool,
    /// What hopwise's chains are measured with, off first (`--access-log`, `--tracing`).
    pub observe: Vec<Observe>,
    /// `--paired`: only the pairs, each beside its baseline; and the blocks of each run.
    pub paired: bool,
    pub blocks: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub options: Plan,
    pub per_hop: Vec<PerHop>,
    pub configs: Vec<ConfigSummary>,
    /// With `captured` and `mtls` both measured: a captured hop's cost over the explicit one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub captured: Option<CapturedCost>,
    pub samples: Vec<Sample>,
    /// `--paired`: each pair's difference ([`paired`]), and every run of every pair.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paired: Vec<PairSummary>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pair_samples: Vec<PairSample>,
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
            connections: mine
                .iter()
                .filter_map(|s| Some(s.cpu.as_ref()?.connections))
                .max(),
        });
    }
    let mut lines: Vec<(System, Mode, Observe)> = configs
        .iter()
        .filter_map(|c| Some((c.system, c.mode?, c.observe)))
        .collect();
    lines.dedup();
    let runs = samples.iter().map(|s| s.run + 1).max().unwrap_or(0);
    let mut per_hop = Vec::new();
    for (system, mode, observe) in lines {
        let on_line =
            |c: &Config| c.system == system && c.mode == Some(mode) && c.observe == observe;
        let slopes = |f: &dyn Fn(&Sample) -> f64| -> Vec<f64> {
            (0..runs)
                .filter_map(|run| {
                    let points: Vec<(f64, f64)> = samples
                        .iter()
                        .filter(|s| {
                            s.run == run && (s.config == Config::DIRECT || on_line(&s.config))
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
        let chains: Vec<&Sample> = samples.iter().filter(|s| on_line(&s.config)).collect();
        per_hop.push(PerHop {
            system,
            mode,
            observe,
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
        captured: captured_cost(&samples),
        samples,
        paired: Vec::new(),
        pair_samples: Vec::new(),
    }
}

mod captured;
pub mod paired;
mod svg;
#[cfg(test)]
mod tests;
mod text;

pub use captured::{CapturedCost, captured_cost};
pub use paired::{Pair, PairSample, PairSummary, pairs, summarise_pairs};
pub use svg::{svg, write_svg};
pub use text::{spread, text};
