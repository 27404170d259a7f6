//! The figure `--modes captured` is for: what a captured hop costs over the explicit-port hop.
//! Only a captured chain's first hop is taken by capture (`bench/hops/captured.rs`), the rest is
//! the mTLS chain, so in one run the captured chain of N hops less the mTLS chain of N hops is
//! what capture adds to its one hop; over the mTLS line's per-hop slope of that run (the
//! explicit-port hop) it is the percentage the issue bounds. Pure.

use serde::Serialize;

use super::super::Mode;
use super::super::stats::{Spread, slope};
use super::{Config, Observe, Sample, System};

/// Capture's cost at one hop, per run, median [min–max] of the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapturedCost {
    /// The explicit-port hop: the mTLS line's per-hop slope, µs.
    pub explicit_p50_us: Spread,
    pub explicit_p90_us: Spread,
    /// What capture adds to its hop, µs: the mean over chain lengths of captured(N) − mTLS(N).
    pub extra_p50_us: Spread,
    pub extra_p90_us: Spread,
    /// `extra / explicit`, %: a captured hop costs this much more than an explicit-port one.
    pub p50_percent: Spread,
    pub p90_percent: Spread,
}

fn line(mode: Mode) -> impl Fn(&Config) -> bool {
    move |c| c.system == System::Hopwise && c.mode == Some(mode) && c.observe == Observe::Off
}

/// One run's (explicit per-hop slope, capture's extra) for one percentile; `None` unless the
/// run has both lines at a common chain length.
fn per_run(samples: &[&Sample], f: &dyn Fn(&Sample) -> f64) -> Option<(f64, f64)> {
    let (mtls, captured) = (line(Mode::Mtls), line(Mode::Captured));
    let points: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.config == Config::DIRECT || mtls(&s.config))
        .map(|s| (s.config.hops as f64, f(s)))
        .collect();
    let explicit = slope(&points)?;
    let extras: Vec<f64> = samples
        .iter()
        .filter(|s| captured(&s.config))
        .filter_map(|c| {
            let m = samples
                .iter()
                .find(|s| mtls(&s.config) && s.config.hops == c.config.hops)?;
            Some(f(c) - f(m))
        })
        .collect();
    if extras.is_empty() {
        return None;
    }
    Some((explicit, extras.iter().sum::<f64>() / extras.len() as f64))
}

/// The captured hop's cost over the explicit-port hop, when the samples hold both lines.
pub fn captured_cost(samples: &[Sample]) -> Option<CapturedCost> {
    let runs = samples.iter().map(|s| s.run + 1).max().unwrap_or(0);
    let mut p50 = Vec::new();
    let mut p90 = Vec::new();
    for run in 0..runs {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.run == run).collect();
        p50.extend(per_run(&mine, &|s| s.p50_us));
        p90.extend(per_run(&mine, &|s| s.p90_us));
    }
    let spread = |v: &[(f64, f64)], pick: &dyn Fn(&(f64, f64)) -> f64| {
        Spread::of(&v.iter().map(pick).collect::<Vec<_>>())
    };
    let percent = |(explicit, extra): &(f64, f64)| {
        if *explicit > 0.0 {
            100.0 * extra / explicit
        } else {
            f64::NAN
        }
    };
    Some(CapturedCost {
        explicit_p50_us: spread(&p50, &|p| p.0)?,
        explicit_p90_us: spread(&p90, &|p| p.0)?,
        extra_p50_us: spread(&p50, &|p| p.1)?,
        extra_p90_us: spread(&p90, &|p| p.1)?,
        p50_percent: spread(&p50, &percent)?,
        p90_percent: spread(&p90, &percent)?,
    })
}
