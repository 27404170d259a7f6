use super::*;
use crate::dashboard::promtext::parse;

/// A proxy of `a` after `n` requests to `b` (`f` of them 503), with `slow` of them in the
/// (2 ms, 4 ms] bucket and the rest in (1 ms, 2 ms], and `retries` retries.
fn a_metrics(n: u32, f: u32, slow: u32, retries: u32) -> Counts {
    let text = format!(
        r#"hopwise_requests_total{{direction="outbound",service="b",route="b"}} {n}
hopwise_responses_total{{direction="outbound",service="b",route="b",class="2xx"}} {ok}
hopwise_responses_total{{direction="outbound",service="b",route="b",class="5xx"}} {f}
hopwise_request_duration_seconds_bucket{{direction="outbound",service="b",route="b",le="0.001"}} 0
hopwise_request_duration_seconds_bucket{{direction="outbound",service="b",route="b",le="0.002"}} {fast}
hopwise_request_duration_seconds_bucket{{direction="outbound",service="b",route="b",le="0.004"}} {n}
hopwise_request_duration_seconds_bucket{{direction="outbound",service="b",route="b",le="+Inf"}} {n}
hopwise_retries_total{{service="b",route="b",condition="retriable-status-codes"}} {retries}
"#,
        ok = n - f,
        fast = n - slow,
    );
    Counts::from_samples("a", &parse(&text))
}

fn calls() -> Vec<(String, String)> {
    vec![("a".into(), "b".into()), ("a".into(), "c".into())]
}

#[test]
fn a_point_is_the_rounds_difference_summed_over_copies() {
    // Copy 0 went from 100 to 300 requests in 2 s (20 more failed, 100 more slow, 10 retries);
    // copy 1 from 0 to 50 in 1 s, all fast.
    let d0 = a_metrics(300, 20, 100, 10).minus(&a_metrics(100, 0, 0, 0));
    let d1 = a_metrics(50, 0, 0, 0).minus(&Counts::default());
    let deltas = [
        Delta {
            service: "a",
            counts: &d0,
            secs: 2.0,
        },
        Delta {
            service: "a",
            counts: &d1,
            secs: 1.0,
        },
    ];
    let round = points(7_000, &deltas, &calls());
    let p = round[&("a".to_owned(), "b".to_owned())];
    assert_eq!(
        (p.t, p.requests, p.ok, p.failed, p.retries),
        (7_000, 250, 230, 20, 10)
    );
    // Each copy's rate over its own interval: 200/2 + 50/1.
    assert_eq!(p.rps, 150.0);
    assert_eq!(p.retries_per_s, 5.0);
    assert_eq!(p.secs, 1.5);
    assert_eq!(p.success(), Some(230.0 / 250.0));
    // 150 of 250 in (1, 2] ms: rank 125 inside it; rank 247.5 is 97.5/100 of (2, 4] ms.
    assert!(
        (p.p50_ms.unwrap() - (1.0 + 125.0 / 150.0)).abs() < 1e-5,
        "{p:?}"
    );
    assert!(
        (p.p99_ms.unwrap() - (2.0 + 2.0 * 97.5 / 100.0)).abs() < 1e-5,
        "{p:?}"
    );
    // The mesh file's a → c: a was read, nothing was sent: zeros, no latency.
    let ac = round[&("a".to_owned(), "c".to_owned())];
    assert_eq!(
        (ac.requests, ac.rps, ac.success(), ac.p99_ms),
        (0, 0.0, None, None)
    );
}

#[test]
fn a_caller_not_read_twice_has_no_point_and_a_restart_counts_from_zero() {
    assert!(points(1, &[], &calls()).is_empty());
    // The proxy restarted: its counters went down; everything it shows now is new.
    let d = a_metrics(30, 3, 0, 0).minus(&a_metrics(1_000, 0, 0, 0));
    let round = points(
        1,
        &[Delta {
            service: "a",
            counts: &d,
            secs: 1.0,
        }],
        &calls(),
    );
    let p = round[&("a".to_owned(), "b".to_owned())];
    assert_eq!((p.requests, p.ok, p.failed, p.rps), (30, 27, 3, 30.0));
}

fn point(t: u64) -> Point {
    Point {
        t,
        secs: 1.0,
        requests: 1,
        ok: 1,
        failed: 0,
        retries: 0,
        rps: 1.0,
        retries_per_s: 0.0,
        p50_ms: None,
        p99_ms: None,
    }
}

fn edge(i: usize) -> (String, String) {
    (format!("s{i}"), "b".to_owned())
}

#[test]
fn the_ring_keeps_15_minutes_per_edge_and_a_bounded_number_of_edges() {
    let mut tl = Timeline::default();
    let second = 1_000;
    for i in 0..KEEP as u64 + 100 {
        tl.record(i * second, BTreeMap::from([(edge(0), point(i * second))]));
    }
    let s = tl.since(0);
    assert_eq!(s[0].points.len(), KEEP);
    assert_eq!(s[0].points[0].0.t, 100 * second);
    // Only what came after `since`.
    let last = s[0].points[KEEP - 1].0.t;
    assert_eq!(tl.since(last - 2 * second)[0].points.len(), 2);
    // An edge that stops getting points is dropped once its last is 15 minutes old.
    let later = last + WINDOW.as_millis() as u64 + 1;
    tl.record(later, BTreeMap::from([(edge(1), point(later))]));
    let s = tl.since(0);
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].from, s[0].points.len()), ("s1", 1));
    // No more than MAX_EDGES edges: a new one beyond them is not kept, known ones still are.
    let round: BTreeMap<_, _> = (0..MAX_EDGES + 10)
        .map(|i| (edge(i), point(later + 1)))
        .collect();
    tl.record(later + 1, round);
    assert_eq!(tl.since(0).len(), MAX_EDGES);
    assert_eq!(tl.since(later).iter().filter(|e| e.from == "s1").count(), 1);
}

#[test]
fn the_stated_memory_bound_holds() {
    // docs/dashboard.md and the module's text state 56 bytes a point, 900 points an edge.
    assert_eq!(std::mem::size_of::<Point>(), 56);
    assert_eq!(
        KEEP as u64,
        WINDOW.as_secs() / super::super::scrape::INTERVAL.as_secs()
    );
}

#[test]
fn a_point_serializes_with_its_success_rate() {
    let mut p = point(5);
    p.ok = 3;
    p.failed = 1;
    p.p99_ms = Some(2.5);
    let v = serde_json::to_value(PointView(&p)).unwrap();
    assert_eq!(v["success"], 0.75);
    assert_eq!(v["p99_ms"], 2.5);
    assert_eq!(v["p50_ms"], serde_json::Value::Null);
    assert_eq!(v["t"], 5);
}
