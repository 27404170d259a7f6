//! `bench/report.rs`'s tests: the summary, the table and the plot.

use super::svg::{fmt_tick, nice_step};
use super::text::opt;
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
        spans: None,
        captured: None,
        netns: None,
    }
}

fn chain(system: System, mode: Mode, hops: usize) -> Config {
    Config {
        system,
        mode: Some(mode),
        hops,
        observe: Observe::Off,
    }
}

pub(super) fn report() -> Report {
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
        connections: 16,
        duration_s: 10.0,
        max_hops: 2,
        workers: 2,
        modes: vec![Mode::Plain, Mode::Mtls],
        pinned: false,
        peers: false,
        quick: false,
        observe: vec![Observe::Off],
        paired: false,
        blocks: 10,
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
    assert_eq!((d.connections, r.configs[1].connections), (None, Some(1)));
}

#[test]
fn the_peak_memory_is_shown_with_the_connections_it_was_read_at() {
    let mut r = report();
    // The 1-hop plain chain needed 7 connections in one run: the most is what is shown.
    let i = r
        .samples
        .iter()
        .position(|s| s.config == chain(System::Hopwise, Mode::Plain, 1))
        .unwrap();
    r.samples[i].cpu.as_mut().unwrap().connections = 7;
    let r = summarise(
        r.machine,
        r.options,
        &[chain(System::Hopwise, Mode::Plain, 1)],
        r.samples,
    );
    assert_eq!(r.configs[0].connections, Some(7));
    let t = text(&r);
    assert!(t.contains("peak RSS/proxy MiB, ≤16 conns"), "{t}");
    let row = t
        .lines()
        .find(|l| l.starts_with("hopwise  plain  1"))
        .unwrap();
    assert!(row.trim_end().ends_with(" 7"), "{row}");
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

#[test]
fn capture_s_extra_is_the_difference_at_equal_length_over_the_explicit_slope() {
    let mut v = Vec::new();
    for (run, extra) in [(0, 4.0), (1, 5.0), (2, 9.0)] {
        v.push(sample(run, Config::DIRECT, 20.0));
        for h in 1..=2 {
            let mtls = 20.0 + 100.0 * h as f64;
            v.push(sample(run, chain(System::Hopwise, Mode::Mtls, h), mtls));
            let captured = chain(System::Hopwise, Mode::Captured, h);
            v.push(sample(run, captured, mtls + extra));
            // Another line never counts.
            v.push(sample(run, chain(System::Hopwise, Mode::Plain, h), 1.0));
        }
    }
    let c = captured_cost(&v).unwrap();
    assert_eq!(c.explicit_p50_us.median, 100.0);
    // The helper's p90 is 1.2 × p50: 120 µs a hop, 1.2 × the extra.
    assert!((c.explicit_p90_us.median - 120.0).abs() < 1e-9);
    let e = &c.extra_p50_us;
    assert_eq!((e.median, e.min, e.max, e.n), (5.0, 4.0, 9.0, 3));
    assert!((c.extra_p90_us.median - 6.0).abs() < 1e-9);
    assert!((c.p50_percent.median - 5.0).abs() < 1e-9);
    assert!((c.p90_percent.median - 5.0).abs() < 1e-9);
}

#[test]
fn without_both_lines_there_is_no_captured_figure() {
    let direct = sample(0, Config::DIRECT, 20.0);
    for mode in [Mode::Mtls, Mode::Captured] {
        let one = sample(0, chain(System::Hopwise, mode, 1), 120.0);
        assert_eq!(captured_cost(&[direct.clone(), one]), None);
    }
    // The figures of a run without capture stay as they were.
    assert_eq!(report().captured, None);
    assert!(
        !serde_json::to_string(&report())
            .unwrap()
            .contains("\"captured\"")
    );
}
