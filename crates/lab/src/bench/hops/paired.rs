//! `bench hops --paired`: each pair ([`report::pairs`]: a recording configuration and its twin
//! recording nothing, a captured chain and the mTLS chain of its length) measured at the same
//! time. Per pair and run, both chains are started side by side (own ports, own directories,
//! each as `measure` starts one) and ONE client process alternates requests between them (the
//! order rotating each round: A, B, then B, A), one at a time, each on its own kept-alive
//! connection, warm-up on both (`load/paired.rs`). Only the pairs run: no solo chains, no CPU
//! or RSS phase.
//!
//! A captured pair: the client is not run inside the copy's namespace (then it could not reach
//! B on the host's loopback); its connection to A is made inside it (`--target-netns`), to
//! `callee:80`, so the namespace's rules redirect it to A's first proxy's capture listener as
//! they redirect a captured app's, while its connection to B goes to B's explicit port on the
//! host's loopback. Both first proxies run in the host's namespace (a captured copy's proxy
//! always does: only its capture listener is bound inside), both reached over a loopback,
//! both forwarding over the host's loopback: capture (the rules, the original destination,
//! finding the service) is the one difference. The client also calls B's backend directly,
//! the base of the percentage ([`report::paired`]).

use super::super::layout::CALLEE;
use super::super::load::PairedResult;
use super::super::report::paired::{BlockSample, SideSample};
use super::super::report::{self, Machine, Pair, PairSample, Report, pairs, summarise_pairs};
use super::client::check_errors;
use super::{Bench, Config, each_run, slug};
use crate::error::LabError;
use crate::samples::collector::Collector;

/// Measures every pair among `configs`, `plan.runs` times in rotated orders.
pub(super) fn run(
    bench: &Bench<'_>,
    configs: &[Config],
    machine: Machine,
) -> Result<Report, LabError> {
    let pairs = pairs(configs);
    if pairs.is_empty() {
        return Err(LabError::Failed(
            "--paired: nothing to pair; add --access-log, --tracing RATIO or --modes captured"
                .into(),
        ));
    }
    let plan = &bench.plan;
    let samples = each_run(bench.sup, plan.runs, &pairs, Pair::label, |p, run| {
        bench.measure_pair(p, run)
    })?;
    let mut r = report::summarise(machine, plan.clone(), &[], Vec::new());
    r.paired = summarise_pairs(&pairs, &samples);
    r.pair_samples = samples;
    Ok(r)
}

fn side(r: &super::super::load::ClientResult) -> SideSample {
    let us = |ns: u64| ns as f64 / 1000.0;
    SideSample {
        requests: r.requests,
        p50_us: us(r.p50_ns),
        p90_us: us(r.p90_ns),
        p99_us: us(r.p99_ns),
        reconnects: r.reconnects,
        errors: r.errors,
        first_error: r.first_error.clone(),
    }
}

impl Bench<'_> {
    fn measure_pair(&self, p: &Pair, run: usize) -> Result<PairSample, LabError> {
        let dir = self
            .dir
            .join("runs")
            .join(format!("pair-{}", slug(&p.config)));
        let (a, a_entry, _) = self.start_chain(&p.config, &dir.join("a"))?;
        let (b, b_entry, b_backend) = self.start_chain(&p.baseline, &dir.join("b"))?;
        let stderr = || a.proxy_stderr() + &b.proxy_stderr();
        let spans_before = self.collector.as_ref().map(Collector::count);
        let mut cmd = self.command(&self.exe);
        cmd.args(["bench", "client", "--target"]);
        match &a.captured {
            Some(cap) => {
                let (target, netns) = cap.paired_target();
                cmd.arg(target.to_string())
                    .arg("--target-netns")
                    .arg(netns)
                    .args(["--host", CALLEE]);
            }
            None => {
                cmd.arg(a_entry.to_string());
            }
        }
        cmd.arg("--also").arg(b_entry.to_string());
        if p.captured() {
            cmd.arg("--also").arg(b_backend.to_string());
        }
        cmd.arg("--requests")
            .arg(self.plan.requests.to_string())
            .arg("--warmup")
            .arg(self.plan.warmup.to_string())
            .arg("--blocks")
            .arg(self.plan.blocks.to_string());
        let (client, last) = self.run_client(cmd, &dir.join("client.stderr"))?;
        let r: PairedResult = self.finish_client(&stderr, &client, &last)?;
        let want = if p.captured() { 3 } else { 2 };
        if r.targets.len() != want || r.blocks.iter().any(|b| b.len() != want) {
            return Err(LabError::Failed(format!(
                "the paired client answered for {} target(s), not {want}",
                r.targets.len()
            )));
        }
        for t in &r.targets {
            check_errors(t, &stderr)?;
        }
        let captured = self.captured_count(&a)?;
        let spans = self.spans_since(p.config.observe, spans_before);
        let us = |ns: u64| ns as f64 / 1000.0;
        let blocks = r
            .blocks
            .iter()
            .map(|b| BlockSample {
                a_p50_us: us(b[0].p50_ns),
                a_p90_us: us(b[0].p90_ns),
                b_p50_us: us(b[1].p50_ns),
                b_p90_us: us(b[1].p90_ns),
                direct_p50_us: b.get(2).map(|d| us(d.p50_ns)),
            })
            .collect();
        Ok(PairSample {
            run,
            pair: *p,
            a: side(&r.targets[0]),
            b: side(&r.targets[1]),
            direct: r.targets.get(2).map(side),
            blocks,
            spans,
            captured: captured.as_ref().map(|(n, _)| *n),
            netns: captured.map(|(_, ns)| ns),
        })
    }
}
