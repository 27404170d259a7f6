//! Timeout budgets with a delay a service's proxies inject (`fault.delay`).

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

use std::time::Duration;

use hopwise_model::Mesh;

/// `a → b → c`: b's call is cut at 500 ms when c hangs; b's proxies delay by `fault`.
fn worst_cases(fault: &str) -> Vec<(String, Option<Duration>, String)> {
    let yaml = format!(
        "services:
  a: {{ calls: {{ b: {{ retries: {{ count: 0 }} }}, b2: {{ per_try_timeout: 600ms, retries: {{ count: 0 }} }} }} }}
  b:
    calls: {{ c: {{ timeout: 500ms }} }}
    {fault}
  b2:
    calls: {{ c: {{ timeout: 500ms }} }}
    {fault}
  c: {{}}
"
    );
    let mesh = Mesh::from_yaml(&yaml).unwrap_or_else(|d| panic!("{}", d.render("test")));
    let t = super::analyze(&mesh);
    (t.calls.into_iter())
        .filter(|c| c.call.starts_with("a "))
        .map(|c| (c.call, c.worst_case, c.try_ends_with))
        .collect()
}

#[test]
fn an_injected_delay_counts_in_the_callers_budget() {
    let ms = |v| Some(Duration::from_millis(v));
    let row = |call: &str, worst, ends: &str| (call.to_owned(), worst, ends.to_owned());
    let plain = worst_cases("");
    assert_eq!(plain[0].1, ms(500));
    for fault in [
        "fault: { delay: { time: 300ms, percent: 10 } }",
        "fault: { delay: { time: 300ms }, header: { name: x-test } }",
    ] {
        assert_eq!(
            worst_cases(fault),
            [
                row("a → b", ms(800), "never"), // no per-try timeout: until b answers
                // 800 ms is past a's 600 ms per-try timeout: the try ends there.
                row("a → b2", ms(600), "per-try timeout"),
            ],
            "{fault}"
        );
    }
    // Never delayed: as without.
    let none = worst_cases("fault: { delay: { time: 300ms, percent: 0 } }");
    assert_eq!(none[0].1, ms(500));
}
