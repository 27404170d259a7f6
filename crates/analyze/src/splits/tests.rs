//! Splits counted per backend: each backend's own chain, the rule's policy over the call, an
//! injected delay in the worst case, a backend the caller does not call, the weighted mean.

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

use std::time::Duration;

use hopwise_model::Mesh;

use super::{Split, analyze};

/// Istio's retries with 503 retriable: each call makes 3 tries unless it says otherwise.
/// `a`'s proxy splits `b`'s requests 3:1 between b-v1 (→ c) and b-v2 (→ d, delayed 200 ms).
const MESH: &str = r#"
defaults: { preset: istio, retries: { status_codes: [503] } }
services:
  a: { calls: { b: {}, b-v1: {}, b-v2: { retries: { count: 0 } } } }
  b:
    routes:
      split:
        rules:
          - matches: [{ path: { value: /slow } }]
            timeouts: { request: 300ms }
            backends: [{ service: b-v1, weight: 1 }, { service: b-v3, weight: 1 }]
          - backends: [{ service: b-v1, weight: 3 }, { service: b-v2, weight: 1 }]
          - matches: [{ path: { value: /one } }]
            backends: [{ service: b-v1 }]
  b-v1: { calls: { c: { timeout: 1s } } }
  b-v2:
    fault: { delay: { time: 200ms, percent: 5 } }
    calls: { d: { timeout: 500ms } }
  b-v3: {}
  c: {}
  d: {}
"#;

fn splits() -> Vec<Split> {
    let mesh = Mesh::from_yaml(MESH).unwrap_or_else(|d| panic!("{}", d.render("test")));
    analyze(&mesh)
}

/// (backend, share, tries, worst case, attempts, where) per backend; `None` when not called.
type Row = (String, f64, Option<(u32, Option<Duration>, u64, String)>);

fn rows(s: &Split) -> Vec<Row> {
    (s.backends.iter())
        .map(|b| {
            let count = (b.count.as_ref())
                .map(|c| (c.tries, c.worst_case, c.attempts, c.attempts_at.clone()));
            (b.share.service.clone(), b.share.percent, count)
        })
        .collect()
}

#[test]
fn each_backend_of_a_split_has_its_own_budget_and_attempts() {
    let found = splits();
    // Rules with one backend are no split; `a` is b's only caller.
    let at: Vec<(&str, &str)> = (found.iter())
        .map(|s| (s.caller.as_str(), s.rule.as_str()))
        .collect();
    assert_eq!(
        at,
        [
            ("a", "services.b.routes.split.rules[0]"),
            ("a", "services.b.routes.split.rules[1]")
        ]
    );
    let ms = |v| Some(Duration::from_millis(v));
    let down = |s: &str| format!("{s} is down (connection refused)");
    // Rule 1: b-v1's chain retries at both hops (3 × 3 at c); b-v2 is tried once, and d three
    // times by b-v2; b-v2's worst case is d's 500 ms cut plus its own 200 ms delay.
    assert_eq!(
        rows(&found[1]),
        [
            ("b-v1".into(), 75.0, Some((1, ms(1000), 9, down("c")))),
            ("b-v2".into(), 25.0, Some((1, ms(700), 3, down("d")))),
        ]
    );
    assert_eq!(found[1].expected_attempts, Some((3.0 * 9.0 + 3.0) / 4.0));
    // Rule 0: its 300 ms request timeout over a's call to b-v1; b-v3, which a does not call,
    // is answered 404 at once and adds no attempt.
    assert_eq!(
        rows(&found[0]),
        [
            ("b-v1".into(), 50.0, Some((1, ms(300), 9, down("c")))),
            ("b-v3".into(), 50.0, None),
        ]
    );
    assert_eq!(found[0].expected_attempts, Some(4.5));
}

#[test]
fn the_splits_are_in_the_report_and_its_text() {
    let mesh = Mesh::from_yaml(MESH).unwrap();
    let report = crate::check(&mesh, &crate::Options::default());
    assert_eq!(report.splits.len(), 2);
    let text = crate::render::text(&report);
    for line in [
        "a → b  services.b.routes.split.rules[1]  b-v1",
        "expected, by weight",
        "7.50",
        "9 when c is down (connection refused)",
        "0 (a does not call it)",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}
