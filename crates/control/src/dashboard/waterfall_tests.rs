use super::*;

/// A span as the store keeps it (also for `trace_api`'s tests).
pub(crate) fn span(
    id: u64,
    parent: u64,
    service: &str,
    direction: Direction,
    start: u64,
    end: u64,
) -> Span {
    Span {
        span_id: id,
        parent: (parent != 0).then_some(parent),
        service: service.into(),
        instance: None,
        direction,
        route: None,
        upstream: None,
        method: None,
        path: None,
        status: Some(200),
        grpc_status: None,
        error: false,
        try_number: (direction == Direction::Try).then_some(1),
        copy: None,
        copy_address: None,
        outcome: (direction == Direction::Try).then(|| "response".to_owned()),
        retry_condition: None,
        app_time_ns: None,
        start,
        end,
    }
}

use Direction::{Inbound, Outbound, Try};

fn of(w: &Waterfall, id: u64) -> &Row {
    w.rows.iter().find(|r| r.span.span_id == id).unwrap()
}

fn sums_hold(w: &Waterfall) {
    for r in &w.rows {
        assert_eq!(r.proxy_ns + r.app_ns, r.duration_ns, "{r:?}");
        assert!(r.offset_ns + r.drawn_ns <= w.duration_ns, "{r:?}");
    }
}

/// a's inbound (0–1000) → a's outbound to b (100–900) → its try (120–880) → b's inbound
/// (150–850) → b's outbound to c (300–600) → try (310–590) → c's inbound (320–580).
fn chain() -> Vec<Span> {
    vec![
        span(6, 5, "b", Try, 310, 590),
        span(1, 0, "a", Inbound, 0, 1000),
        span(3, 2, "a", Try, 120, 880),
        span(2, 1, "a", Outbound, 100, 900),
        span(4, 3, "b", Inbound, 150, 850),
        span(7, 6, "c", Inbound, 320, 580),
        span(5, 4, "b", Outbound, 300, 600),
    ]
}

#[test]
fn an_inbound_span_that_says_how_long_its_app_took_gives_the_rest_to_its_proxy() {
    let mut spans = chain();
    for s in &mut spans {
        match s.span_id {
            // c's proxy waited 250 of its 260 for the app; b's 680 of 700 (c's call inside).
            7 => s.app_time_ns = Some(250),
            4 => s.app_time_ns = Some(680),
            // A span that claims more than its length gives its proxy nothing, never less.
            1 => s.app_time_ns = Some(5_000),
            _ => {}
        }
    }
    let w = layout(&spans);
    sums_hold(&w);
    assert_eq!((of(&w, 7).proxy_ns, of(&w, 7).app_ns), (10, 250));
    assert_eq!((of(&w, 6).proxy_ns, of(&w, 6).app_ns), (30, 250));
    assert_eq!((of(&w, 5).proxy_ns, of(&w, 5).app_ns), (50, 250));
    // b's inbound: its proxy's own 20 besides the 50 below; its app's 400 + c's 250.
    assert_eq!((of(&w, 4).proxy_ns, of(&w, 4).app_ns), (70, 630));
    assert_eq!((of(&w, 1).proxy_ns, of(&w, 1).app_ns), (170, 830));
}

#[test]
fn a_chain_is_in_parent_order_with_each_hops_proxies_and_app() {
    let w = layout(&chain());
    let ids: Vec<u64> = w.rows.iter().map(|r| r.span.span_id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7]);
    let depths: Vec<usize> = w.rows.iter().map(|r| r.depth).collect();
    assert_eq!(depths, [0, 1, 2, 3, 4, 5, 6]);
    sums_hold(&w);
    // c's inbound: all the app's. Its try: 20 of wire and proxies. b → c: 20 more.
    assert_eq!((of(&w, 7).proxy_ns, of(&w, 7).app_ns), (0, 260));
    assert_eq!((of(&w, 6).proxy_ns, of(&w, 6).app_ns), (20, 260));
    assert_eq!((of(&w, 5).proxy_ns, of(&w, 5).app_ns), (40, 260));
    // b's inbound: its app's own 400, c's 260 and the 40 of proxies between them.
    assert_eq!((of(&w, 4).proxy_ns, of(&w, 4).app_ns), (40, 660));
    assert_eq!((of(&w, 3).proxy_ns, of(&w, 3).app_ns), (100, 660));
    // The outbound span less its try: its proxy's 40.
    assert_eq!((of(&w, 2).proxy_ns, of(&w, 2).app_ns), (140, 660));
    assert_eq!((of(&w, 1).proxy_ns, of(&w, 1).app_ns), (140, 860));
    assert_eq!((w.start_unix_nano, w.duration_ns), (0, 1000));
    assert_eq!(of(&w, 5).offset_ns, 300);
    assert!(
        w.rows
            .iter()
            .all(|r| !r.orphan && !r.unseen && r.shift_ns == 0)
    );
}

#[test]
fn a_retry_shows_both_tries_and_the_failed_one_is_the_proxies() {
    let mut failed = span(3, 2, "a", Try, 110, 130);
    failed.outcome = Some("connect-failure".into());
    failed.error = true;
    let mut second = span(4, 2, "a", Try, 150, 380);
    second.try_number = Some(2);
    second.retry_condition = Some("connect-failure".into());
    let spans = vec![
        span(2, 0, "a", Outbound, 100, 400),
        failed,
        second,
        span(5, 4, "b", Inbound, 160, 370),
    ];
    let w = layout(&spans);
    sums_hold(&w);
    let order: Vec<u64> = w.rows.iter().map(|r| r.span.span_id).collect();
    assert_eq!(
        order,
        [2, 3, 4, 5],
        "the tries by start, each before its child"
    );
    assert_eq!((of(&w, 3).proxy_ns, of(&w, 3).app_ns), (20, 0));
    assert!(!of(&w, 3).unseen, "it never connected: nothing to see");
    assert_eq!(
        of(&w, 4).span.retry_condition.as_deref(),
        Some("connect-failure")
    );
    assert_eq!((of(&w, 4).proxy_ns, of(&w, 4).app_ns), (20, 210));
    // 300 in all: 210 of b's app, 90 of proxies (the wait between tries included).
    assert_eq!((of(&w, 2).proxy_ns, of(&w, 2).app_ns), (90, 210));
}

#[test]
fn a_try_without_the_called_sides_span_is_the_apps_and_unseen() {
    // b's span never came (dropped, or b is outside the mesh): its parent is missing from b's
    // side, and an orphan of another trace part is a root.
    let spans = vec![
        span(2, 0, "a", Outbound, 100, 400),
        span(3, 2, "a", Try, 110, 390),
        span(9, 8, "c", Inbound, 500, 600),
    ];
    let w = layout(&spans);
    sums_hold(&w);
    assert!(of(&w, 3).unseen);
    assert_eq!((of(&w, 3).proxy_ns, of(&w, 3).app_ns), (0, 280));
    assert_eq!((of(&w, 2).proxy_ns, of(&w, 2).app_ns), (20, 280));
    assert!(of(&w, 9).orphan, "its parent is not in the store");
    assert!(!of(&w, 2).orphan, "a root of the trace");
    assert_eq!((of(&w, 9).depth, of(&w, 9).offset_ns), (0, 400));
}

#[test]
fn clock_skew_between_processes_never_makes_time_negative() {
    // b's clock runs 500 ns behind a's, and in another trace 900 ns ahead; its span is also
    // longer than a's try (a broken clock): it is moved into the try and cut to its length.
    for (b_start, b_end) in [(-350i64, -50i64), (1050, 1300), (50, 400), (90, 2000)] {
        let b = |x: i64| u64::try_from(x + 1000).unwrap();
        let spans = vec![
            span(2, 0, "a", Outbound, 1100, 1400),
            span(3, 2, "a", Try, 1110, 1390),
            span(4, 3, "b", Inbound, b(b_start), b(b_end)),
            span(5, 4, "b", Outbound, b(b_start) + 10, b(b_start) + 20),
        ];
        let w = layout(&spans);
        sums_hold(&w);
        let (t, r) = (of(&w, 3), of(&w, 4));
        assert!(r.offset_ns >= t.offset_ns, "{b_start}: {r:?}");
        assert!(
            r.offset_ns + r.drawn_ns <= t.offset_ns + t.drawn_ns,
            "{b_start}: {r:?}"
        );
        let c = of(&w, 5);
        assert!(c.offset_ns >= r.offset_ns && c.offset_ns + c.drawn_ns <= r.offset_ns + r.drawn_ns);
        assert!(
            t.proxy_ns <= t.duration_ns && of(&w, 2).proxy_ns >= 20,
            "{b_start}: {t:?}"
        );
    }
}

#[test]
fn a_parent_cycle_is_shown_once_each() {
    let spans = vec![
        span(1, 2, "x", Inbound, 0, 10),
        span(2, 1, "x", Outbound, 2, 8),
    ];
    let w = layout(&spans);
    assert_eq!(w.rows.len(), 2);
    sums_hold(&w);
}
