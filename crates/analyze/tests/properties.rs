//! Property tests of the analysis on chains of services built as mesh files: retry fan-out
//! multiplies down a chain (and budgets bound it), and timeout budgets nest the way
//! `docs/check.md` says. Every property runs at most 256 cases.

use std::time::Duration;

use hopwise_analyze::{CallTiming, Failure, Options, Report, check};
use hopwise_model::Mesh;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        // Failures are reported with their minimal input; no regression files are written.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn report(yaml: &str) -> Report {
    let mesh = Mesh::from_yaml(yaml).unwrap_or_else(|d| panic!("{}\n{yaml}", d.render("chain")));
    check(&mesh, &Options::default())
}

fn name(i: usize) -> String {
    format!("s{i}")
}

/// `s0 → s1 → … → sN` under `preset: istio`, every service speaking `protocol`, call i
/// retrying `counts[i]` times, each call budgeted at `ratio` if given.
fn istio_chain(protocol: &str, counts: &[u32], ratio: Option<f64>) -> String {
    let mut yaml = String::from("defaults:\n  preset: istio\nservices:\n");
    for (i, count) in counts.iter().enumerate() {
        let budget = ratio.map_or(String::new(), |r| format!(", budget: {{ ratio: {r} }}"));
        yaml.push_str(&format!(
            "  {}:\n    protocol: {protocol}\n    calls:\n      {}: {{ retries: {{ count: {count} }}{budget} }}\n",
            name(i),
            name(i + 1)
        ));
    }
    yaml.push_str(&format!(
        "  {}:\n    protocol: {protocol}\n",
        name(counts.len())
    ));
    yaml
}

fn row(r: &Report, service: &str, failure: Failure) -> (u64, f64) {
    r.fanout
        .iter()
        .find(|row| row.entry == "s0" && row.service == service && row.failure == failure)
        .map(|row| (row.attempts, row.with_budgets))
        .unwrap_or_else(|| panic!("no row for {service} {failure:?}"))
}

/// `s0 → … → sN` over HTTP with the seed's fixed 25 ms back-off, retrying timeouts and 504s
/// (`gateway-error`), no route timeouts; call i has per-try timeout `per_try[i]` (ms) and
/// `counts[i]` retries. The bottom service is what hangs.
fn timeout_chain(per_try: &[Option<u64>], counts: &[u32]) -> String {
    let mut yaml = String::from(
        "defaults:\n  retries: { on: [gateway-error], single_hop: false, backoff: { strategy: fixed, base: 25ms } }\nservices:\n",
    );
    for (i, (t, count)) in per_try.iter().zip(counts).enumerate() {
        let t = t.map_or("none".to_owned(), |ms| format!("{ms}ms"));
        yaml.push_str(&format!(
            "  {}:\n    calls:\n      {}: {{ timeout: none, per_try_timeout: {t}, retries: {{ count: {count} }} }}\n",
            name(i),
            name(i + 1)
        ));
    }
    yaml.push_str(&format!("  {}: {{}}\n", name(per_try.len())));
    yaml
}

fn worst_cases(r: &Report) -> Vec<Option<Duration>> {
    r.timeouts
        .calls
        .iter()
        .map(|c: &CallTiming| c.worst_case)
        .collect()
}

/// `None` (never ends) is longer than any duration.
fn at_most(a: Option<Duration>, b: Option<Duration>) -> bool {
    match (a, b) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(a), Some(b)) => a <= b,
    }
}

/// The worst cases `docs/check.md` describes, bottom up: a try lasts `min(per-try, callee's
/// worst case)`; it is retried when it ends at all (a timeout, or the 504 from below, both under
/// `gateway-error`); `worst = tries × try + 25 ms × (tries − 1)`.
fn expected_worst(per_try: &[Option<u64>], counts: &[u32]) -> Vec<Option<Duration>> {
    let mut out = vec![None; per_try.len()];
    let mut below: Option<u64> = None;
    for i in (0..per_try.len()).rev() {
        let len = match (per_try[i], below) {
            (Some(t), Some(b)) => Some(t.min(b)),
            (Some(t), None) => Some(t),
            (None, b) => b,
        };
        let tries = u64::from(counts[i]) + 1;
        let worst = len.map(|l| l * tries + 25 * (tries - 1));
        out[i] = worst.map(Duration::from_millis);
        below = worst;
    }
    out
}

fn per_try_and_counts() -> impl Strategy<Value = (Vec<Option<u64>>, Vec<u32>)> {
    (1usize..=6).prop_flat_map(|depth| {
        (
            prop::collection::vec(prop::option::weighted(0.7, 1u64..3000), depth),
            prop::collection::vec(0u32..4, depth),
        )
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn grpc_fanout_is_the_product_of_the_tries(counts in prop::collection::vec(0u32..4, 1..=6)) {
        let r = report(&istio_chain("grpc", &counts, None));
        let bottom = name(counts.len());
        let product: u64 = counts.iter().map(|c| u64::from(*c) + 1).product();
        for failure in [Failure::Unavailable, Failure::Down] {
            let (attempts, with_budgets) = row(&r, &bottom, failure);
            prop_assert_eq!(attempts, product, "{:?} {:?}", failure, counts);
            // No budget: the ceiling is the count itself.
            prop_assert!((with_budgets - product as f64).abs() < 1e-9);
        }
        // Every service on the way receives the product of the tries above it.
        let row = r.fanout.iter()
            .find(|row| row.service == bottom && row.failure == Failure::Unavailable)
            .unwrap();
        let mut expect = 1u64;
        for (i, count) in counts.iter().enumerate() {
            prop_assert_eq!(row.received.get(&name(i)).copied(), Some(expect));
            expect *= u64::from(*count) + 1;
        }
        let tries: Vec<u32> = row.tries.values().copied().collect();
        let want: Vec<u32> = counts.iter().map(|c| c + 1).collect();
        prop_assert_eq!(tries, want);
    }

    #[test]
    fn http_fanout_of_a_down_service_stops_at_the_first_proxy(
        counts in prop::collection::vec(0u32..4, 1..=6),
    ) {
        // The bottom proxy turns the refused connection into a 503, which Istio's list does
        // not retry (no status codes): only the last call multiplies.
        let r = report(&istio_chain("http", &counts, None));
        let bottom = name(counts.len());
        let last = u64::from(*counts.last().unwrap()) + 1;
        prop_assert_eq!(row(&r, &bottom, Failure::Down).0, last);
        prop_assert_eq!(row(&r, &bottom, Failure::Http503).0, 1);
    }

    #[test]
    fn budgets_bound_the_fanout_at_steady_load(
        counts in prop::collection::vec(0u32..4, 1..=6),
        ratio in prop_oneof![Just(0.0), Just(0.1), Just(0.2), Just(1.0), 0.0f64..=1.0],
    ) {
        let r = report(&istio_chain("grpc", &counts, Some(ratio)));
        let bottom = name(counts.len());
        let product: u64 = counts.iter().map(|c| u64::from(*c) + 1).product();
        let bound: f64 = counts
            .iter()
            .rev()
            .map(|c| f64::from(c + 1).min(1.0 + ratio))
            .product();
        for failure in [Failure::Unavailable, Failure::Down] {
            let (attempts, with_budgets) = row(&r, &bottom, failure);
            prop_assert_eq!(attempts, product);
            prop_assert!(with_budgets <= attempts as f64 + 1e-9, "{} > {}", with_budgets, attempts);
            prop_assert!(
                (with_budgets - bound).abs() <= 1e-9 * bound.max(1.0),
                "with budgets {} != {} for {:?} at {}", with_budgets, bound, counts, ratio
            );
        }
    }

    #[test]
    fn worst_cases_nest_as_documented((per_try, counts) in per_try_and_counts()) {
        let r = report(&timeout_chain(&per_try, &counts));
        prop_assert_eq!(worst_cases(&r), expected_worst(&per_try, &counts));
    }

    #[test]
    fn a_chain_without_timeouts_never_ends(counts in prop::collection::vec(0u32..4, 1..=6)) {
        let per_try = vec![None; counts.len()];
        let r = report(&timeout_chain(&per_try, &counts));
        for c in &r.timeouts.calls {
            prop_assert_eq!(c.worst_case, None, "{}", c.call);
            prop_assert_eq!(c.tries_when_hung, 1, "a try that never ends is never retried");
        }
        prop_assert_eq!(r.timeouts.entries[0].worst_case, None);
    }

    #[test]
    fn a_call_without_timeouts_ends_only_if_something_below_has_one(
        (per_try, counts) in per_try_and_counts(),
    ) {
        let r = report(&timeout_chain(&per_try, &counts));
        for (i, c) in r.timeouts.calls.iter().enumerate() {
            if per_try[i].is_none() {
                let below_has_one = per_try[i..].iter().any(Option::is_some);
                prop_assert_eq!(c.worst_case.is_some(), below_has_one, "{}", c.call);
            }
        }
    }

    #[test]
    fn a_call_lasts_at_least_one_try_of_what_it_calls((per_try, counts) in per_try_and_counts()) {
        let r = report(&timeout_chain(&per_try, &counts));
        let calls = &r.timeouts.calls;
        for i in 0..calls.len() {
            let callee = calls.get(i + 1).and_then(|c| c.worst_case);
            let one_try = match (per_try[i].map(Duration::from_millis), callee) {
                (Some(t), Some(b)) => Some(t.min(b)),
                (Some(t), None) => Some(t),
                (None, b) => b,
            };
            prop_assert!(at_most(one_try, calls[i].worst_case), "{}", calls[i].call);
            prop_assert_eq!(calls[i].try_length, one_try);
        }
    }

    #[test]
    fn worst_cases_never_shrink_when_a_per_try_timeout_grows(
        (per_try, counts) in per_try_and_counts(),
        pick in any::<prop::sample::Index>(),
        by in prop::option::weighted(0.85, 1u64..3000),
    ) {
        let i = pick.index(per_try.len());
        let mut grown = per_try.clone();
        grown[i] = match (per_try[i], by) {
            (Some(t), Some(by)) => Some(t + by),
            // `none` is longer than any timeout.
            _ => None,
        };
        let before = worst_cases(&report(&timeout_chain(&per_try, &counts)));
        let after = worst_cases(&report(&timeout_chain(&grown, &counts)));
        for (k, (b, a)) in before.iter().zip(&after).enumerate() {
            prop_assert!(at_most(*b, *a), "call {k}: {b:?} > {a:?} after growing call {i}");
        }
    }

    #[test]
    fn worst_cases_never_shrink_with_more_retries(
        (per_try, counts) in per_try_and_counts(),
        pick in any::<prop::sample::Index>(),
        more in 1u32..3,
    ) {
        let i = pick.index(counts.len());
        let mut grown = counts.clone();
        grown[i] += more;
        let before = worst_cases(&report(&timeout_chain(&per_try, &counts)));
        let after = worst_cases(&report(&timeout_chain(&per_try, &grown)));
        for (k, (b, a)) in before.iter().zip(&after).enumerate() {
            prop_assert!(at_most(*b, *a), "call {k}: {b:?} > {a:?} after more retries on {i}");
        }
    }
}

#[test]
fn the_seed_chain_matches_the_model() {
    // The seed's timeout-budget sample as a generated chain: 9.20 s, 3.05 s, 1.55 s.
    let r = report(&timeout_chain(&[None, Some(1000), Some(500)], &[2, 2, 2]));
    let ms = |v| Some(Duration::from_millis(v));
    assert_eq!(worst_cases(&r), [ms(9200), ms(3050), ms(1550)]);
}

#[test]

fn app_retries_that_overrun_the_callers_window_are_an_error() {
    // b's code retries its 400 ms call 4 more times: 2.00 s, but a gives b 1.00 s per try.
    let r = report(
        "services:
  a:
    entry: { timeout: 5s }
    calls:
      b: { per_try_timeout: 1s }
  b:
    calls:
      c: { timeout: 400ms, app_retries: 4 }
  c: {}
",
    );
    let bc = r.timeouts.calls.iter().find(|c| c.call == "b → c").unwrap();
    assert_eq!(bc.worst_case, Some(Duration::from_secs(2)));
    assert_eq!(bc.caller_window, Some(Duration::from_secs(1)));
    let codes: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.subject == "b → c")
        .map(|f| f.code)
        .collect();
    // Today: ["thin-margin"], saying "b's tries take at most 2.00 s of the 1.00 s it is given:
    // 0 ms to spare".
    assert!(codes.contains(&"exceeds-caller"), "{codes:?}");
    assert!(!codes.contains(&"thin-margin"), "{codes:?}");
}
