//! Property tests of the timeout and back-off arithmetic, of `Dur`'s text form, and of the
//! mesh reader's robustness. Every property runs at most 256 cases.

use std::time::Duration;

use hopwise_model::timing::{largest_per_try, tries_that_fit, try_length, worst_case};
use hopwise_model::{Backoff, Dur, Mesh, Strategy as Kind};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        // Failures are reported with their minimal input; no regression files are written.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Envoy),
        Just(Kind::EnvoyDocumented),
        Just(Kind::Fixed)
    ]
}

/// A back-off with `1 ms ≤ base ≤ max < 2000 ms`.
fn backoff() -> impl Strategy<Value = Backoff> {
    (kind(), 1u64..2000, 0u64..2000).prop_map(|(strategy, base, extra)| Backoff {
        strategy,
        base: Dur::from_millis(base),
        max: Dur::from_millis((base + extra).min(1999)),
    })
}

/// A duration of up to a minute with nanosecond resolution; `None` is "never ends".
fn opt_duration() -> impl Strategy<Value = Option<Duration>> {
    prop::option::weighted(0.8, (0u64..60_000_000_000).prop_map(Duration::from_nanos))
}

/// How much a duration grows: by some amount, or to "never" (`None`).
fn growth() -> impl Strategy<Value = Option<Duration>> {
    prop::option::weighted(0.9, (0u64..60_000_000_000).prop_map(Duration::from_nanos))
}

fn grow(d: Option<Duration>, by: Option<Duration>) -> Option<Duration> {
    match (d, by) {
        (Some(d), Some(by)) => Some(d + by),
        _ => None,
    }
}

/// `None` (never ends) is longer than any duration.
fn at_most(a: Option<Duration>, b: Option<Duration>) -> bool {
    match (a, b) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(a), Some(b)) => a <= b,
    }
}

fn worst(
    tries: u32,
    per_try: Option<Duration>,
    callee: Option<Duration>,
    backoff: &Backoff,
    route: Option<Duration>,
) -> Option<Duration> {
    worst_case(tries, try_length(per_try, callee), backoff, route)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn worst_case_never_shrinks_when_the_per_try_timeout_grows(
        tries in 1u32..20, per_try in opt_duration(), callee in opt_duration(),
        route in opt_duration(), b in backoff(), by in growth(),
    ) {
        let before = worst(tries, per_try, callee, &b, route);
        let after = worst(tries, grow(per_try, by), callee, &b, route);
        prop_assert!(at_most(before, after), "{before:?} > {after:?}");
    }

    #[test]
    fn worst_case_never_shrinks_when_the_callee_slows(
        tries in 1u32..20, per_try in opt_duration(), callee in opt_duration(),
        route in opt_duration(), b in backoff(), by in growth(),
    ) {
        let before = worst(tries, per_try, callee, &b, route);
        let after = worst(tries, per_try, grow(callee, by), &b, route);
        prop_assert!(at_most(before, after), "{before:?} > {after:?}");
    }

    #[test]
    fn worst_case_never_shrinks_when_the_route_timeout_grows(
        tries in 1u32..20, per_try in opt_duration(), callee in opt_duration(),
        route in opt_duration(), b in backoff(), by in growth(),
    ) {
        let before = worst(tries, per_try, callee, &b, route);
        let after = worst(tries, per_try, callee, &b, grow(route, by));
        prop_assert!(at_most(before, after), "{before:?} > {after:?}");
    }

    #[test]
    fn worst_case_never_shrinks_with_more_tries(
        tries in 0u32..20, more in 0u32..20, per_try in opt_duration(),
        callee in opt_duration(), route in opt_duration(), b in backoff(),
    ) {
        let before = worst(tries, per_try, callee, &b, route);
        let after = worst(tries + more, per_try, callee, &b, route);
        prop_assert!(at_most(before, after), "{before:?} > {after:?}");
    }

    #[test]
    fn worst_case_is_capped_by_the_route_timeout_and_covers_one_try(
        tries in 1u32..20, per_try in opt_duration(), callee in opt_duration(),
        route in opt_duration(), b in backoff(),
    ) {
        let w = worst(tries, per_try, callee, &b, route);
        prop_assert!(at_most(w, route), "{w:?} > route {route:?}");
        // Without a route timeout, the call takes at least one whole try.
        let uncut = worst(tries, per_try, callee, &b, None);
        prop_assert!(at_most(try_length(per_try, callee), uncut));
    }

    #[test]
    fn the_largest_per_try_that_fits_does_fit(
        window_ns in 0u64..120_000_000_000, tries in 0u32..12, b in backoff(),
    ) {
        let window = Duration::from_nanos(window_ns);
        if let Some(t) = largest_per_try(window, tries, &b) {
            prop_assert!(t > Duration::ZERO);
            prop_assert_eq!(t.subsec_nanos() % 1_000_000, 0, "whole milliseconds");
            prop_assert_eq!(tries_that_fit(Some(window), tries, Some(t), &b), tries);
            // And it is the largest: 1 ms more no longer fits every try.
            if tries > 0 {
                let more = t + Duration::from_millis(1);
                prop_assert!(more * tries + b.total_upper(tries) > window);
                prop_assert!(tries_that_fit(Some(window), tries, Some(more), &b) < tries);
            }
        } else {
            // Nothing fits only when the back-off leaves less than a millisecond a try.
            let spare = window.saturating_sub(b.total_upper(tries));
            prop_assert!(spare.as_millis() < u128::from(tries.max(1)), "{spare:?}");
        }
    }

    #[test]
    fn delay_stays_within_its_bounds(b in backoff(), k in 0u32..80, random in any::<u64>()) {
        let d = b.delay(k, random);
        prop_assert!(b.lower(k) <= d, "{d:?} < lower {:?}", b.lower(k));
        prop_assert!(d <= b.upper(k), "{d:?} > upper {:?}", b.upper(k));
        prop_assert!(b.lower(k) <= b.upper(k));
        // No strategy waits longer than its max.
        prop_assert!(d <= b.max.get(), "{d:?} > max {:?}", b.max);
    }

    #[test]
    fn delay_reaches_both_ends_of_the_envoy_draw(b in backoff(), k in 1u32..12) {
        // `random` is uniform over u64: 0 gives the lower bound, upper (in ms) gives the upper.
        let b = Backoff { strategy: Kind::Envoy, ..b };
        let upper_ms = b.upper(k).as_millis() as u64;
        prop_assert_eq!(b.delay(k, 0), b.lower(k));
        prop_assert_eq!(b.delay(k, upper_ms), b.upper(k));
    }

    #[test]
    fn whole_millisecond_durations_round_trip(ms in 0u64..=(365 * 24 * 3_600_000)) {
        // Every whole-ms duration the reader accepts (up to a year) reads back from its text.
        let d = Dur::from_millis(ms);
        let text = d.to_string();
        let back: Dur = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(back, d, "{} read back as {:?}", text, back);
    }

    #[test]
    fn from_yaml_never_panics_on_yamlish_text(text in "[a-z0-9:{}\\[\\]\\-\n \"'&*,.#|>!?%@_]{0,160}") {
        let _ = Mesh::from_yaml(&text);
    }

    #[test]
    fn from_yaml_never_panics_on_mesh_like_text(lines in prop::collection::vec(mesh_line(), 0..24)) {
        let text = lines.concat();
        match Mesh::from_yaml(&text) {
            Ok(mesh) => prop_assert!(!mesh.services.is_empty()),
            Err(diags) => prop_assert!(!diags.0.is_empty(), "an Err holds at least one problem"),
        }
    }

    #[test]
    fn from_yaml_never_panics_on_a_damaged_example(
        cut in 0usize..2000, insert in "[:{}\\[\\]\\-\n \"'&*a-z0-9]{0,6}", drop in 0usize..6,
    ) {
        let example = include_str!("../../../examples/shop/mesh.yaml");
        let at = cut.min(example.len());
        let at = (0..=at).rev().find(|i| example.is_char_boundary(*i)).unwrap_or(0);
        let mut end = (at + drop).min(example.len());
        while !example.is_char_boundary(end) {
            end += 1;
        }
        let text = format!("{}{insert}{}", &example[..at], &example[end..]);
        let _ = Mesh::from_yaml(&text);
    }
}

#[test]
fn a_long_duration_with_milliseconds_reads_exactly() {
    // Reading through an f64 got this one (just above 2^22 s) 1 ns wrong: the first
    // whole-millisecond duration that did not round-trip.
    let d = Dur::from_millis(4_194_309_213);
    assert_eq!(d.to_string(), "4194309.213s");
    assert_eq!("4194309.213s".parse::<Dur>(), Ok(d));
}

/// One line of something that looks like a mesh file: known keys at plausible depths, with
/// plausible and implausible values.
fn mesh_line() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "services",
        "mesh",
        "defaults",
        "name",
        "trust_domain",
        "a",
        "b",
        "c",
        "calls",
        "routes",
        "entry",
        "timeout",
        "per_try_timeout",
        "connect_timeout",
        "retries",
        "count",
        "on",
        "status_codes",
        "backoff",
        "strategy",
        "base",
        "max",
        "budget",
        "ratio",
        "limits",
        "max_pending",
        "preset",
        "protocol",
        "method",
        "idempotent",
        "app_retries",
        "only_if_safe",
        "path",
        "grpc_status_on_timeout",
        // issue 11: the inbound caps, and path rules whose prefixes must be canonical
        "inbound",
        "max_requests",
        "max_requests_per_caller",
        "max_connections",
        "allow",
        "allow_paths",
        "/penalty/pay",
        "//x/../y",
        "/%70ay",
        "/a%2Fb",
        "- x",
    ]);
    let value = prop::sample::select(vec![
        "",
        " {}",
        " []",
        " 1s",
        " 0s",
        " -1s",
        " 300ms",
        " none",
        " 2",
        " -1",
        " 4294967296",
        " 0.2",
        " 1.5",
        " true",
        " istio",
        " grpc",
        " POST",
        " [gateway-error, 5xx]",
        " [503, 700]",
        " [a, any]",
        " any",
        " { /pay: [a] }",
        " { /x/./y: [] }",
        " 0",
        " { count: 2 }",
        " { a: {} }",
        " { b: {} }",
        " &x { a: 1 }",
        " *x",
        " \"quoted\"",
        " 'single'",
        " ~",
        " |",
        " [",
        " }",
    ]);
    (0usize..5, key, value)
        .prop_map(|(depth, key, value)| format!("{}{key}:{value}\n", "  ".repeat(depth)))
}
