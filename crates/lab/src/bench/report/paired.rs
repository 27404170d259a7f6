//! `bench hops --paired`'s figures. A pair is a configuration and the baseline it differs from
//! by one thing ([`pairs`]): recording (the access log, tracing) against the same chain
//! recording nothing, `captured` against `mtls` at the same length. Both were measured at the
//! same time by one client taking turns between them, so their difference is the one thing's
//! cost with the machine's drift cancelled. Per pair and run: p50(A) − p50(B) (and p90), ÷ hops
//! for recording (it costs at every hop), ÷ 1 for captured (only its first hop differs), and
//! for captured also as a % of the baseline's per-hop p50, (p50(B) − p50(backend)) ÷ hops, the
//! backend measured directly in the same alternation. Each run is split into blocks, each
//! block the same difference, so one run already has a spread.
//!
//! The verdict against the issues' bars ([`Pair::bar`]) reads a spread, never a median alone:
//! the runs' with 3 runs or more, else every block's ([`verdict`]). Pure.

use serde::Serialize;

use super::super::Mode;
use super::super::stats::Spread;
use super::{Config, Observe, System};

/// A configuration and the baseline measured beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Pair {
    pub config: Config,
    pub baseline: Config,
}

/// An issue's bar on a pair's difference: at most `limit` `unit` at p50.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bar {
    pub limit: f64,
    /// `µs/hop`, or `%` (of the baseline's per-hop p50).
    pub unit: &'static str,
}

/// What the report says of a pair against its bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The spread's upper end is under the bar.
    Meets,
    /// The spread's lower end is above the bar.
    Over,
    /// The bar lies inside the spread.
    CannotJudge,
    /// No issue sets a bar on this pair (tracing at a ratio other than 1 %).
    NoBar,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Meets => "meets the bar",
            Verdict::Over => "over",
            Verdict::CannotJudge => "cannot judge",
            Verdict::NoBar => "-",
        }
    }
}

/// Which spread a verdict read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Judged {
    Runs,
    Blocks,
}

/// Runs from which the runs' spread is read rather than the blocks'.
pub const RUNS_TO_JUDGE: usize = 3;

impl Pair {
    pub fn captured(&self) -> bool {
        self.config.mode == Some(Mode::Captured)
    }

    /// What the difference is divided by: recording costs at every hop, capture at the first.
    pub fn divisor(&self) -> usize {
        if self.captured() {
            1
        } else {
            self.config.hops.max(1)
        }
    }

    /// Issue 14's (access log 5 µs, tracing at 1 % 2 µs per hop) and issue 15's (a captured
    /// hop 5 % above the explicit-port hop).
    pub fn bar(&self) -> Option<Bar> {
        let us = |limit| {
            Some(Bar {
                limit,
                unit: "µs/hop",
            })
        };
        match self.config.observe {
            _ if self.captured() => Some(Bar {
                limit: 5.0,
                unit: "%",
            }),
            Observe::AccessLog => us(5.0),
            Observe::Tracing { ppm: 10_000 } => us(2.0),
            Observe::Tracing { .. } | Observe::Off => None,
        }
    }

    /// `plain + access log 2 hops − plain 2 hops`.
    pub fn label(&self) -> String {
        let short = |c: &Config| {
            let l = c.label();
            l.strip_prefix("hopwise ").map_or(l.clone(), str::to_owned)
        };
        format!("{} − {}", short(&self.config), short(&self.baseline))
    }
}

/// Every pair among `configs`: each of hopwise's recording configurations with its twin
/// recording nothing, each captured chain with the mTLS chain of its length.
pub fn pairs(configs: &[Config]) -> Vec<Pair> {
    configs
        .iter()
        .filter(|c| c.system == System::Hopwise)
        .filter_map(|c| {
            let baseline = match (c.mode?, c.observe) {
                (Mode::Captured, Observe::Off) => Config {
                    mode: Some(Mode::Mtls),
                    ..*c
                },
                (_, Observe::Off) => return None,
                (_, _) => Config {
                    observe: Observe::Off,
                    ..*c
                },
            };
            Some(Pair {
                config: *c,
                baseline,
            })
        })
        .collect()
}

/// One side of a paired measurement (A, B, or the backend directly).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideSample {
    pub requests: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub reconnects: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// One block of a paired measurement, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BlockSample {
    pub a_p50_us: f64,
    pub a_p90_us: f64,
    pub b_p50_us: f64,
    pub b_p90_us: f64,
    /// Captured: the backend measured directly in the same block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct_p50_us: Option<f64>,
}

/// One run of one pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSample {
    pub run: usize,
    pub pair: Pair,
    /// The configuration's chain.
    pub a: SideSample,
    /// The baseline's chain.
    pub b: SideSample,
    /// Captured: the baseline's backend, directly (the base of the percentage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<SideSample>,
    pub blocks: Vec<BlockSample>,
    /// Tracing: spans the collector received while the pair ran (only A exports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spans: Option<u64>,
    /// Captured: the connections A's first proxy took by capture.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub captured: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
}

/// A pair's difference over the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSummary {
    pub pair: Pair,
    pub label: String,
    /// What the µs differences are divided by (hops for recording, 1 for captured).
    pub divided_by: usize,
    /// (p50(A) − p50(B)) ÷ `divided_by`, one value per run, µs.
    pub p50_us: Spread,
    pub p90_us: Spread,
    /// The same per block, every block of every run.
    pub p50_blocks_us: Spread,
    pub p90_blocks_us: Spread,
    /// Captured: the baseline's per-hop p50, (p50(B) − p50(backend)) ÷ hops, per run, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_per_hop_us: Option<Spread>,
    /// Captured: 100 × (p50(A) − p50(B)) ÷ the baseline's per-hop p50, per run and per block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<Spread>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent_blocks: Option<Spread>,
    pub bar: Option<Bar>,
    pub judged_on: Judged,
    pub verdict: Verdict,
}

/// 100 × (a − b) ÷ ((b − direct) ÷ hops); NaN when the baseline's hops cost nothing.
fn percent(a: f64, b: f64, direct: f64, hops: usize) -> f64 {
    let per_hop = (b - direct) / hops.max(1) as f64;
    if per_hop > 0.0 {
        100.0 * (a - b) / per_hop
    } else {
        f64::NAN
    }
}

/// The verdict of `spread` against `bar`: meets only when its upper end is under the bar.
pub fn verdict(spread: &Spread, bar: Option<Bar>) -> Verdict {
    match bar {
        None => Verdict::NoBar,
        Some(b) if spread.max < b.limit => Verdict::Meets,
        Some(b) if spread.min > b.limit => Verdict::Over,
        Some(_) => Verdict::CannotJudge,
    }
}

/// One pair's summary; `None` without samples.
fn summary(pair: &Pair, mine: &[&PairSample]) -> Option<PairSummary> {
    let d = pair.divisor() as f64;
    let hops = pair.config.hops;
    let runs = |f: &dyn Fn(&PairSample) -> Option<f64>| {
        Spread::of(&mine.iter().filter_map(|s| f(s)).collect::<Vec<_>>())
    };
    let blocks = |f: &dyn Fn(&BlockSample) -> Option<f64>| {
        let v: Vec<f64> = mine
            .iter()
            .flat_map(|s| s.blocks.iter().filter_map(f))
            .collect();
        Spread::of(&v)
    };
    let p50_us = runs(&|s| Some((s.a.p50_us - s.b.p50_us) / d))?;
    let p50_blocks_us = blocks(&|b| Some((b.a_p50_us - b.b_p50_us) / d))?;
    let (baseline_per_hop_us, pct, pct_blocks) = if pair.captured() {
        (
            runs(&|s| Some((s.b.p50_us - s.direct.as_ref()?.p50_us) / hops.max(1) as f64)),
            runs(&|s| {
                Some(percent(
                    s.a.p50_us,
                    s.b.p50_us,
                    s.direct.as_ref()?.p50_us,
                    hops,
                ))
            }),
            blocks(&|b| Some(percent(b.a_p50_us, b.b_p50_us, b.direct_p50_us?, hops))),
        )
    } else {
        (None, None, None)
    };
    let judged_on = if mine.len() >= RUNS_TO_JUDGE {
        Judged::Runs
    } else {
        Judged::Blocks
    };
    let judged = match (pair.captured(), judged_on) {
        (false, Judged::Runs) => Some(p50_us),
        (false, Judged::Blocks) => Some(p50_blocks_us),
        (true, Judged::Runs) => pct,
        (true, Judged::Blocks) => pct_blocks,
    };
    let bar = pair.bar();
    Some(PairSummary {
        pair: *pair,
        label: pair.label(),
        divided_by: pair.divisor(),
        p50_us,
        p90_us: runs(&|s| Some((s.a.p90_us - s.b.p90_us) / d))?,
        p50_blocks_us,
        p90_blocks_us: blocks(&|b| Some((b.a_p90_us - b.b_p90_us) / d))?,
        baseline_per_hop_us,
        percent: pct,
        percent_blocks: pct_blocks,
        bar,
        judged_on,
        // A captured pair without its base (no backend figure) cannot be judged.
        verdict: judged.map_or(Verdict::CannotJudge, |s| verdict(&s, bar)),
    })
}

/// Every pair's summary, in `pairs` order.
pub fn summarise_pairs(pairs: &[Pair], samples: &[PairSample]) -> Vec<PairSummary> {
    pairs
        .iter()
        .filter_map(|p| {
            let mine: Vec<&PairSample> = samples.iter().filter(|s| s.pair == *p).collect();
            summary(p, &mine)
        })
        .collect()
}

#[cfg(test)]
mod tests;
