//! `report/paired.rs`'s tests: which pairs, the differences, the blocks and the verdict.

use super::*;
use crate::bench::hops::configurations;

fn config(mode: Mode, observe: Observe, hops: usize) -> Config {
    Config {
        system: System::Hopwise,
        mode: Some(mode),
        hops,
        observe,
    }
}

const LOG: Observe = Observe::AccessLog;
const ONE: Observe = Observe::Tracing { ppm: 10_000 };
const ALL: Observe = Observe::Tracing { ppm: 1_000_000 };

#[test]
fn recording_pairs_with_its_twin_and_captured_with_mtls() {
    let modes = [Mode::Plain, Mode::Mtls, Mode::Tcp, Mode::Captured];
    let configs = configurations(&[System::Hopwise], &modes, 2, &[Observe::Off, LOG, ONE]);
    let p = pairs(&configs);
    let labels: Vec<String> = p.iter().map(Pair::label).collect();
    assert_eq!(
        labels,
        [
            "plain + access log 1 hop − plain 1 hop",
            "plain + access log 2 hops − plain 2 hops",
            "plain + tracing 1% 1 hop − plain 1 hop",
            "plain + tracing 1% 2 hops − plain 2 hops",
            "mtls + access log 1 hop − mtls 1 hop",
            "mtls + access log 2 hops − mtls 2 hops",
            "mtls + tracing 1% 1 hop − mtls 1 hop",
            "mtls + tracing 1% 2 hops − mtls 2 hops",
            "captured 1 hop − mtls 1 hop",
            "captured 2 hops − mtls 2 hops",
        ]
    );
    // Nothing but the one thing differs.
    for pair in &p {
        let (c, b) = (pair.config, pair.baseline);
        assert_eq!((c.system, c.hops), (b.system, b.hops));
        assert_eq!(b.observe, Observe::Off);
        assert!(c.mode == b.mode || (c.mode, b.mode) == (Some(Mode::Captured), Some(Mode::Mtls)));
    }
    assert!(pairs(&[Config::DIRECT, config(Mode::Plain, Observe::Off, 1)]).is_empty());
}

#[test]
fn divisors_and_bars() {
    let pair = |c: Config| pairs(&[c])[0];
    let log2 = pair(config(Mode::Plain, LOG, 2));
    assert_eq!((log2.divisor(), log2.bar().unwrap().limit), (2, 5.0));
    assert_eq!(pair(config(Mode::Mtls, ONE, 3)).bar().unwrap().limit, 2.0);
    assert_eq!(pair(config(Mode::Mtls, ALL, 3)).bar(), None);
    let cap = pair(config(Mode::Captured, Observe::Off, 2));
    assert_eq!(cap.divisor(), 1);
    assert_eq!(
        cap.bar().unwrap(),
        Bar {
            limit: 5.0,
            unit: "%"
        }
    );
}

#[test]
fn the_verdict_reads_the_spread_never_the_median_alone() {
    let bar = Some(Bar {
        limit: 2.0,
        unit: "µs/hop",
    });
    let s = |min, median, max| Spread {
        median,
        min,
        max,
        n: 3,
    };
    assert_eq!(verdict(&s(0.5, 1.0, 1.9), bar), Verdict::Meets);
    // The median is under the bar, the upper end is not.
    assert_eq!(verdict(&s(0.5, 1.0, 2.5), bar), Verdict::CannotJudge);
    assert_eq!(verdict(&s(-3.0, 1.0, 2.0), bar), Verdict::CannotJudge);
    assert_eq!(verdict(&s(2.1, 3.0, 4.0), bar), Verdict::Over);
    assert_eq!(verdict(&s(0.0, 0.0, 0.0), None), Verdict::NoBar);
}

fn side(p50: f64) -> SideSample {
    SideSample {
        requests: 100,
        p50_us: p50,
        p90_us: p50 + 10.0,
        p99_us: p50 + 50.0,
        reconnects: 0,
        errors: 0,
        first_error: None,
    }
}

/// A run of `pair` whose A is `extra` µs above B, its blocks `extra ± spread`.
fn sample(
    run: usize,
    pair: Pair,
    b: f64,
    extra: f64,
    spread: f64,
    direct: Option<f64>,
) -> PairSample {
    let blocks = [-spread, 0.0, spread]
        .iter()
        .map(|d| BlockSample {
            a_p50_us: b + extra + d,
            a_p90_us: b + extra + d + 10.0,
            b_p50_us: b,
            b_p90_us: b + 10.0,
            direct_p50_us: direct,
        })
        .collect();
    PairSample {
        run,
        pair,
        a: side(b + extra),
        b: side(b),
        direct: direct.map(side),
        blocks,
        spans: None,
        captured: None,
        netns: None,
    }
}

#[test]
fn recording_differences_are_per_hop_over_runs_and_blocks() {
    let pair = pairs(&[config(Mode::Plain, LOG, 2)])[0];
    let samples: Vec<PairSample> = [4.0, 6.0, 8.0]
        .iter()
        .enumerate()
        .map(|(run, extra)| sample(run, pair, 200.0, *extra, 2.0, None))
        .collect();
    let s = &summarise_pairs(&[pair], &samples)[0];
    assert_eq!(s.divided_by, 2);
    assert_eq!(
        (s.p50_us.median, s.p50_us.min, s.p50_us.max),
        (3.0, 2.0, 4.0)
    );
    assert_eq!(s.p90_us.median, 3.0);
    // Blocks: extra ± 2 µs, ÷ 2 hops, nine of them.
    let b = s.p50_blocks_us;
    assert_eq!((b.min, b.max, b.n), (1.0, 5.0, 9));
    // Three runs: the runs' spread (max 4 < 5) is judged, not the blocks' (max 5).
    assert_eq!((s.judged_on, s.verdict), (Judged::Runs, Verdict::Meets));
    assert!(s.percent.is_none() && s.baseline_per_hop_us.is_none());
    // One run: its blocks are judged, and they reach the bar.
    let one = &summarise_pairs(&[pair], &samples[..1])[0];
    assert_eq!(one.judged_on, Judged::Blocks);
    assert_eq!((one.p50_blocks_us.min, one.p50_blocks_us.max), (1.0, 3.0));
    assert_eq!(one.verdict, Verdict::Meets);
    let wide = vec![sample(0, pair, 200.0, 8.0, 4.0, None)];
    assert_eq!(
        summarise_pairs(&[pair], &wide)[0].verdict,
        Verdict::CannotJudge
    );
    let over = vec![sample(0, pair, 200.0, 14.0, 2.0, None)];
    assert_eq!(summarise_pairs(&[pair], &over)[0].verdict, Verdict::Over);
}

#[test]
fn a_captured_pair_is_a_percentage_of_the_baseline_s_per_hop_p50() {
    let pair = pairs(&[config(Mode::Captured, Observe::Off, 2)])[0];
    // The mTLS chain 100 µs over a 20 µs backend: 40 µs a hop; capture adds 1 µs: 2.5 %.
    let samples = vec![sample(0, pair, 100.0, 1.0, 1.0, Some(20.0))];
    let s = &summarise_pairs(&[pair], &samples)[0];
    assert_eq!((s.divided_by, s.p50_us.median), (1, 1.0));
    assert_eq!(s.baseline_per_hop_us.unwrap().median, 40.0);
    assert_eq!(s.percent.unwrap().median, 2.5);
    let b = s.percent_blocks.unwrap();
    assert_eq!((b.min, b.max), (0.0, 5.0));
    // The blocks' upper end is the bar itself: not under it.
    assert_eq!(s.verdict, Verdict::CannotJudge);
    // Without the backend's figure there is no base, and no verdict.
    let bare = vec![sample(0, pair, 100.0, 1.0, 1.0, None)];
    let s = &summarise_pairs(&[pair], &bare)[0];
    assert!(s.percent.is_none());
    assert_eq!(s.verdict, Verdict::CannotJudge);
    assert!(percent(1.0, 1.0, 1.0, 1).is_nan());
}

#[test]
fn the_text_gives_each_pair_its_spreads_bar_and_verdict() {
    let log = pairs(&[config(Mode::Plain, LOG, 1)])[0];
    let all = pairs(&[config(Mode::Plain, ALL, 1)])[0];
    let mut samples: Vec<PairSample> = (0..3)
        .map(|run| sample(run, log, 100.0, 1.0 + run as f64, 0.5, None))
        .collect();
    samples.push(sample(0, all, 100.0, 30.0, 1.0, None));
    let mut r = super::super::tests::report();
    r.paired = summarise_pairs(&[log, all], &samples);
    let text = super::super::text(&r);
    let row = |label: &str| {
        text.lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label} row in\n{text}"))
            .to_owned()
    };
    let log_row = row("plain + access log 1 hop − plain 1 hop");
    assert!(log_row.contains("2.00 [1.00–3.00]"), "{log_row}");
    assert!(log_row.contains("≤ 5 µs/hop"), "{log_row}");
    assert!(log_row.ends_with("meets the bar (runs)"), "{log_row}");
    let all_row = row("plain + tracing 100% 1 hop − plain 1 hop");
    assert!(
        all_row.contains("30.00") && all_row.ends_with(" -"),
        "{all_row}"
    );
    assert!(text.contains("Verdict: \"meets the bar\" only when the upper end"));
}
