use std::collections::BTreeMap;

use super::*;

fn span(trace: u128, id: u64, parent: u64, service: &str, start: u64, end: u64) -> ReceivedSpan {
    ReceivedSpan {
        instance: String::new(),
        service: service.into(),
        trace_id: trace_hex(trace),
        span_id: format!("{id:016x}"),
        parent: if parent == 0 {
            String::new()
        } else {
            format!("{parent:016x}")
        },
        name: format!("{service} inbound"),
        kind: KIND_SERVER,
        error: false,
        start,
        end,
        attributes: BTreeMap::from([("hopwise.route".to_owned(), "inbound".to_owned())]),
    }
}

#[test]
fn the_oldest_trace_is_evicted_past_the_cap() {
    let mut store = Store::default();
    for t in 1..=(MAX_TRACES as u128 + 5) {
        store.add(&[span(t, 1, 0, "a", 10, 20)], 0);
    }
    assert_eq!(store.len(), MAX_TRACES);
    for gone in 1..=5 {
        assert!(
            store.get(&trace_hex(gone)).is_none(),
            "trace {gone} evicted"
        );
    }
    assert!(store.get(&trace_hex(6)).is_some());
    let recent = store.recent(0);
    assert_eq!(recent.len(), MAX_TRACES);
    assert_eq!(
        recent[0].id,
        trace_hex(MAX_TRACES as u128 + 5),
        "newest first"
    );
    // A span of a kept trace adds to it and evicts nothing.
    store.add(&[span(6, 2, 1, "b", 12, 18)], 0);
    assert_eq!(store.len(), MAX_TRACES);
    assert_eq!(store.get(&trace_hex(6)).unwrap().spans.len(), 2);
}

#[test]
fn a_traces_spans_arrive_in_several_exports_in_any_order() {
    let mut store = Store::default();
    // The callee's proxy exports first, then the caller's; one span is sent twice.
    store.add(&[span(7, 3, 2, "b", 120, 180)], 0);
    store.add(
        &[span(7, 1, 0, "a", 100, 200), span(7, 3, 2, "b", 120, 180)],
        0,
    );
    let t = store.get(&trace_hex(7)).unwrap();
    assert_eq!(t.spans.len(), 2, "the span sent twice is kept once");
    let s = &store.recent(0)[0];
    assert_eq!(
        (s.service.as_str(), s.route.as_deref()),
        ("a", Some("inbound"))
    );
    assert_eq!((s.start, s.duration_ns, s.spans), (100, 100, 2));
}

#[test]
fn a_span_whose_parent_is_not_here_still_names_the_trace() {
    let mut store = Store::default();
    // Its parent (an outside client's span, or one lost) never comes.
    store.add(&[span(8, 5, 4, "b", 50, 90), span(8, 6, 5, "b", 60, 70)], 0);
    let s = &store.recent(0)[0];
    assert_eq!((s.service.as_str(), s.start, s.duration_ns), ("b", 50, 40));
}

#[test]
fn a_trace_keeps_at_most_its_cap_and_counts_the_rest() {
    let mut store = Store::default();
    let spans: Vec<_> = (1..=MAX_SPANS as u64 + 3)
        .map(|i| span(9, i, 0, "a", i, i + 1))
        .collect();
    store.add(&spans, 0);
    assert_eq!(store.get(&trace_hex(9)).unwrap().spans.len(), MAX_SPANS);
    assert_eq!(store.dropped_spans, 3);
}

#[test]
fn bad_ids_are_refused_and_long_texts_cut() {
    let mut store = Store::default();
    let mut bad = span(1, 1, 0, "a", 1, 2);
    bad.trace_id = "zz".into();
    let mut zero = span(1, 1, 0, "a", 1, 2);
    zero.span_id = "0000000000000000".into();
    let mut long = span(2, 1, 0, "a", 1, 2);
    long.attributes
        .insert("url.path".into(), format!("/{}é", "x".repeat(MAX_TEXT - 2)));
    store.add(&[bad, zero, long], 0);
    assert_eq!(store.refused_spans, 2);
    let path = store.get(&trace_hex(2)).unwrap().spans[0]
        .path
        .clone()
        .unwrap();
    assert_eq!(
        path.len(),
        MAX_TEXT - 1,
        "cut at a character boundary: {path}"
    );
    assert!(store.get("not-hex").is_none());
}

/// The listed summary of trace `id`.
fn summary_of(store: &Store, id: u128) -> Summary {
    store
        .recent(0)
        .into_iter()
        .find(|s| s.id == trace_hex(id))
        .unwrap()
}

/// `span` failed (its status ERROR).
fn failed(mut s: ReceivedSpan) -> ReceivedSpan {
    s.error = true;
    s
}

#[test]
fn a_request_that_succeeded_after_a_failed_try_is_no_failure() {
    let mut store = Store::default();
    // The root succeeded; its first try (a child) failed, the second did not.
    store.add(
        &[
            span(1, 1, 0, "a", 10, 90),
            failed(span(1, 2, 1, "a", 11, 30)),
            span(1, 3, 1, "a", 31, 80),
        ],
        0,
    );
    // A request that failed: its root is an error.
    store.add(&[failed(span(2, 1, 0, "a", 10, 90))], 0);
    assert!(!summary_of(&store, 1).error);
    assert!(summary_of(&store, 2).error);
}

#[test]
fn failed_traces_outlive_successes_up_to_half_the_store() {
    let mut store = Store::default();
    store.add(&[failed(span(1, 1, 0, "a", 10, 20))], 0);
    for t in 2..=(MAX_TRACES as u128 * 3) {
        store.add(&[span(t, 1, 0, "a", 10, 20)], 0);
    }
    assert!(store.get(&trace_hex(1)).is_some(), "the failed one is kept");
    assert_eq!(store.len(), MAX_TRACES);
    // Failures alone: they are evicted oldest first once they fill half the store.
    let mut store = Store::default();
    for t in 1..=(MAX_TRACES as u128 * 2) {
        store.add(&[failed(span(t, 1, 0, "a", 10, 20))], 0);
    }
    assert_eq!(store.len(), MAX_TRACES);
    assert!(store.get(&trace_hex(1)).is_none());
    assert!(store.get(&trace_hex(MAX_TRACES as u128 * 2)).is_some());
}

/// A try span: a client span with `hopwise.try`.
fn try_span(trace: u128, id: u64, parent: u64, n: u32, start: u64, end: u64) -> ReceivedSpan {
    let mut s = span(trace, id, parent, "a", start, end);
    s.kind = 3;
    s.attributes.insert("hopwise.try".into(), n.to_string());
    s
}

#[test]
fn a_trace_is_receiving_until_no_span_came_for_a_while() {
    let mut store = Store::default();
    store.add(&[span(1, 3, 2, "b", 120, 180)], 1_000);
    assert!(store.recent(1_000)[0].receiving);
    store.add(&[span(1, 1, 0, "a", 100, 200)], 2_500);
    assert!(
        store.recent(2_500 + SETTLE_MS - 1)[0].receiving,
        "the later span counts"
    );
    assert!(!store.recent(2_500 + SETTLE_MS)[0].receiving);
}

#[test]
fn a_success_after_a_retry_counts_its_retries() {
    let mut store = Store::default();
    store.add(
        &[
            span(1, 1, 0, "a", 10, 90),
            failed(try_span(1, 2, 1, 1, 11, 30)),
            try_span(1, 3, 1, 2, 31, 80),
        ],
        0,
    );
    store.add(
        &[span(2, 1, 0, "a", 10, 90), try_span(2, 2, 1, 1, 11, 80)],
        0,
    );
    assert_eq!(
        (summary_of(&store, 1).error, summary_of(&store, 1).retries),
        (false, 1)
    );
    assert_eq!(summary_of(&store, 2).retries, 0);
}

#[test]
fn a_slow_trace_outlives_a_busy_stores_fast_ones() {
    let mut store = Store::default();
    store.add(&[span(1, 1, 0, "a", 0, 2_000_000_000)], 0);
    for t in 2..=(MAX_TRACES as u128 * 5) {
        store.add(&[span(t, 1, 0, "a", 10, 20)], 0);
    }
    assert_eq!(store.len(), MAX_TRACES);
    assert!(store.get(&trace_hex(1)).is_some(), "the slow one is kept");
    assert!(store.get(&trace_hex(2)).is_none(), "an old fast one is not");
}

#[test]
fn a_span_says_which_copy_sent_it() {
    let mut store = Store::default();
    let mut s = span(1, 1, 0, "pricing", 1, 2);
    s.instance = "pricing[1]".into();
    store.add(&[s], 0);
    let kept = &store.get(&trace_hex(1)).unwrap().spans[0];
    assert_eq!(kept.instance.as_deref(), Some("pricing[1]"));
}
