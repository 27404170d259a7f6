use super::*;
use crate::dashboard::promtext::parse;

/// What a proxy of `a` calling `b` serves, after `n` requests (n − f answered 200, f 503).
fn a_metrics(n: u32, f: u32, retries: u32) -> String {
    format!(
        r#"# TYPE hopwise_requests counter
hopwise_requests_total{{direction="outbound",service="b",route="b"}} {n}
hopwise_requests_total{{direction="inbound",service="a",route="a"}} {n}
hopwise_responses_total{{direction="outbound",service="b",route="b",class="2xx"}} {ok}
hopwise_responses_total{{direction="outbound",service="b",route="b",class="5xx"}} {f}
hopwise_responses_total{{direction="inbound",service="a",route="a",class="2xx"}} {n}
hopwise_request_duration_seconds_bucket{{direction="outbound",service="b",route="b",le="0.001"}} 0
hopwise_request_duration_seconds_bucket{{direction="outbound",service="b",route="b",le="0.002"}} {half}
hopwise_request_duration_seconds_bucket{{direction="outbound",service="b",route="b",le="0.004"}} {n}
hopwise_request_duration_seconds_bucket{{direction="outbound",service="b",route="b",le="+Inf"}} {n}
hopwise_request_duration_seconds_sum{{direction="outbound",service="b",route="b"}} 0.3
hopwise_request_duration_seconds_count{{direction="outbound",service="b",route="b"}} {n}
hopwise_proxy_overhead_seconds_bucket{{direction="outbound",le="0.0001"}} {n}
hopwise_proxy_overhead_seconds_bucket{{direction="outbound",le="+Inf"}} {n}
hopwise_retries_total{{service="b",route="b",condition="connect-failure"}} {retries}
hopwise_retries_skipped_total{{service="b",route="b",reason="budget"}} 1
hopwise_limits_tripped_total{{service="b",limit="max_requests"}} 2
hopwise_local_replies_total{{direction="outbound",service="b",reason="per-try-timeout"}} 3
hopwise_retries_total{{service="a",route="a",condition="reset"}} 5
hopwise_ejections_total{{service="b"}} 1
# EOF
"#,
        ok = n - f,
        half = n / 2,
    )
}

fn b_metrics(n: u32) -> String {
    format!(
        r#"hopwise_requests_total{{direction="inbound",service="b",route="b"}} {n}
hopwise_responses_total{{direction="inbound",service="b",route="b",class="2xx"}} {n}
hopwise_proxy_overhead_seconds_bucket{{direction="inbound",le="0.0001"}} {n}
hopwise_proxy_overhead_seconds_bucket{{direction="inbound",le="+Inf"}} {n}
"#
    )
}

fn counts(own: &str, text: &str) -> Counts {
    Counts::from_samples(own, &parse(text))
}

#[test]
fn quantiles_interpolate_inside_the_bucket() {
    let c = counts("a", &a_metrics(100, 0, 0));
    let lat = &c.outbound["b"].latency;
    assert_eq!(lat.count(), 100.0);
    // Rank 50 is the top of the (1 ms, 2 ms] bucket; rank 99 is 49/50 of (2 ms, 4 ms].
    assert!((lat.quantile(0.5).unwrap() - 0.002).abs() < 1e-12);
    assert!((lat.quantile(0.99).unwrap() - (0.002 + 0.002 * 49.0 / 50.0)).abs() < 1e-12);
    assert_eq!(Hist::default().quantile(0.5), None);
    // Everything in +Inf: the largest finite bound.
    let mut h = Hist::default();
    h.observe(0.5, 0.0);
    h.observe(f64::INFINITY, 4.0);
    assert_eq!(h.quantile(0.99), Some(0.5));
}

#[test]
fn an_edge_sums_copies_and_takes_rates_from_the_difference_between_scrapes() {
    let calls = [("a".to_owned(), "b".to_owned())];
    // Two copies of a; each scraped twice, 2 s apart.
    let a0_then = counts("a", &a_metrics(100, 0, 4));
    let a0_now = counts("a", &a_metrics(140, 10, 6));
    let a1_then = counts("a", &a_metrics(10, 0, 0));
    let a1_now = counts("a", &a_metrics(30, 0, 0));
    let b_then = counts("b", &b_metrics(110));
    let b_now = counts("b", &b_metrics(170));
    let copies = [
        CopyCounts {
            service: "a",
            total: &a0_now,
            recent: Some((a0_now.minus(&a0_then), 2.0)),
        },
        CopyCounts {
            service: "a",
            total: &a1_now,
            recent: Some((a1_now.minus(&a1_then), 2.0)),
        },
        CopyCounts {
            service: "b",
            total: &b_now,
            recent: Some((b_now.minus(&b_then), 2.0)),
        },
    ];
    let s = summarize(&copies, &calls);
    assert_eq!(s.edges.len(), 1, "{s:?}");
    let e = &s.edges[0];
    assert_eq!((e.from.as_str(), e.to.as_str()), ("a", "b"));
    assert_eq!(e.requests, 170);
    // (40 + 20) requests in 2 s.
    assert_eq!(e.rps, 30.0);
    // Recent: 40 − 10 + 20 ok of 60; since start 160 of 170 responses.
    assert!(e.live);
    assert_eq!(e.success, Some(round(50.0 / 60.0, 4)));
    assert_eq!((e.responses, e.failures), (170, 10));
    assert_eq!(e.retries["connect-failure"], 6);
    assert_eq!(e.retries_per_s, 1.0);
    assert_eq!(e.retries_skipped["budget"], 2);
    assert_eq!(e.limits["max_requests"], 4);
    assert_eq!(e.local_replies["per-try-timeout"], 6);
    assert_eq!(e.ejections, 2);
    // a's own inbound retries are not an edge.
    assert!(!e.retries.contains_key("reset"));
    // Proxy time: a's outbound (≤ 0.1 ms) plus b's inbound (≤ 0.1 ms), medians 0.05 ms each.
    assert_eq!(e.proxy_p50_ms, Some(0.1));
    assert_eq!(s.services["b"].requests, 170);
    assert_eq!(s.services["b"].rps, 30.0);
    assert_eq!(s.services["b"].success, Some(1.0));
}

#[test]
fn without_recent_traffic_the_numbers_are_since_start_and_a_restart_is_not_negative() {
    let now = counts("a", &a_metrics(20, 5, 0));
    let before_restart = counts("a", &a_metrics(100, 0, 0));
    let idle = now.minus(&now);
    let s = summarize(
        &[CopyCounts {
            service: "a",
            total: &now,
            recent: Some((idle, 1.0)),
        }],
        &[("a".to_owned(), "c".to_owned())],
    );
    let ab = s.edges.iter().find(|e| e.to == "b").unwrap();
    assert_eq!(ab.rps, 0.0);
    assert!(!ab.live);
    assert_eq!(ab.success, Some(0.75));
    assert!(ab.p50_ms.is_some());
    // The mesh file's edge a → c is shown without traffic.
    let ac = s.edges.iter().find(|e| e.to == "c").unwrap();
    assert_eq!((ac.requests, ac.success, ac.p99_ms), (0, None, None));
    // Counters went down: the proxy restarted; all of the new value counts.
    let d = now.minus(&before_restart);
    assert_eq!(d.outbound["b"].requests, 20.0);
}
