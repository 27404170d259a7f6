use hopwise_api::trace_context::{TRACEPARENT, TraceContext, TraceId};
use hopwise_model::observe::Tracing;
use hopwise_model::raw::OtlpProtocol;
use http::{HeaderMap, HeaderValue};

use super::{inbound, outbound, sample};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

fn tracing(ratio: f64, collector: bool) -> Tracing {
    Tracing {
        collector: collector.then(|| "127.0.0.1:4317".to_owned()),
        protocol: OtlpProtocol::Grpc,
        ratio,
        queue: 16,
    }
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn get<'h>(h: &'h HeaderMap, name: &str) -> &'h str {
    h.get(name).map_or("", |v| v.to_str().unwrap())
}

#[test]
fn nothing_arrives_and_no_tracing_nothing_is_done() {
    let mut h = headers(&[("x-other", "1")]);
    assert_eq!(inbound(None, &mut h), None);
    assert_eq!(outbound(None, &mut h), None);
    assert_eq!(h.len(), 1);
}

#[test]
fn inbound_continues_w3c_with_a_span_of_its_own_toward_the_app() {
    let mut h = headers(&[
        ("traceparent", &format!("00-{TRACE}-{CALLER}-01")),
        ("tracestate", "vendor=1"),
    ]);
    let span = inbound(None, &mut h).unwrap();
    assert_eq!(span.trace_id().to_string(), TRACE);
    assert_eq!(span.parent_span_id().unwrap().to_string(), CALLER);
    assert_ne!(span.span_id().to_string(), CALLER);
    assert!(span.sampled());
    assert!(!span.recorded, "no collector: nothing is recorded");
    let written = format!("00-{TRACE}-{}-01", span.span_id());
    assert_eq!(get(&h, "traceparent"), written);
    assert_eq!(get(&h, "tracestate"), "vendor=1");
}

#[test]
fn inbound_writes_b3_back_as_b3_and_keeps_an_unsampled_decision() {
    let mut h = headers(&[("b3", &format!("{TRACE}-{CALLER}-0"))]);
    let span = inbound(Some(&tracing(1.0, true)), &mut h).unwrap();
    assert!(
        !span.sampled() && !span.recorded,
        "parent-based: the caller said no"
    );
    assert_eq!(
        get(&h, "b3"),
        format!("{TRACE}-{}-0-{CALLER}", span.span_id())
    );
    assert!(
        h.get(TRACEPARENT).is_none(),
        "the app gets the format it sent"
    );

    let mut h = headers(&[
        ("x-b3-traceid", TRACE),
        ("x-b3-spanid", CALLER),
        ("x-b3-sampled", "1"),
    ]);
    let span = inbound(None, &mut h).unwrap();
    assert_eq!(get(&h, "x-b3-spanid"), span.span_id().to_string());
    assert_eq!(get(&h, "x-b3-parentspanid"), CALLER);
    assert_eq!(get(&h, "x-b3-sampled"), "1");
}

#[test]
fn a_deferred_b3_decision_is_made_here_only_under_mesh_tracing() {
    let arrived = || headers(&[("b3", &format!("{TRACE}-{CALLER}"))]);
    let span = inbound(None, &mut arrived()).unwrap();
    assert_eq!(span.context.sampled, None);
    let span = inbound(Some(&tracing(1.0, true)), &mut arrived()).unwrap();
    assert!(span.sampled() && span.recorded);
    let span = inbound(Some(&tracing(0.0, true)), &mut arrived()).unwrap();
    assert!(!span.sampled());
}

#[test]
fn a_trace_is_started_where_none_arrives_under_mesh_tracing() {
    let mut h = HeaderMap::new();
    let span = outbound(Some(&tracing(1.0, true)), &mut h).unwrap();
    assert_eq!(span.parent_span_id(), None);
    assert!(span.recorded);
    let written = format!("00-{}-{}-01", span.trace_id(), span.span_id());
    assert_eq!(get(&h, "traceparent"), written, "the next hop continues it");

    let mut h = HeaderMap::new();
    let span = outbound(Some(&tracing(0.0, true)), &mut h).unwrap();
    assert!(!span.sampled() && !span.recorded);
    assert!(
        get(&h, "traceparent").ends_with("-00"),
        "unsampled, said so"
    );

    // A caller's bare "do not sample" (`b3: 0`) is the parent's decision.
    let mut h = headers(&[("b3", "0")]);
    assert!(
        !inbound(Some(&tracing(1.0, true)), &mut h)
            .unwrap()
            .sampled()
    );
}

#[test]
fn garbage_trace_headers_never_reach_the_app_beside_a_new_trace() {
    let garbage = [
        ("b3", "not-a-context"),
        ("x-b3-traceid", "zz"),
        ("x-b3-spanid", "0000000000000000"),
        ("x-b3-sampled", "1"),
        ("traceparent", "00-broken"),
        ("tracestate", "k=v"),
    ];
    let mut h = headers(&garbage);
    let span = inbound(Some(&tracing(1.0, true)), &mut h).unwrap();
    assert_eq!(span.parent_span_id(), None, "nothing was continued");
    let written = format!("00-{}-{}-01", span.trace_id(), span.span_id());
    assert_eq!(get(&h, "traceparent"), written);
    for (name, _) in garbage.iter().filter(|(n, _)| *n != "traceparent") {
        assert!(h.get(*name).is_none(), "{name} reached the app: {h:?}");
    }
}

#[test]
fn outbound_leaves_the_apps_headers_unless_it_records() {
    let sent = format!("{TRACE}-{CALLER}-1");
    let mut h = headers(&[("b3", &sent)]);
    let span = outbound(None, &mut h).unwrap();
    assert_eq!(span.parent_span_id().unwrap().to_string(), CALLER);
    assert_eq!(
        get(&h, "b3"),
        sent,
        "not recorded: passed on as the app sent it"
    );

    let mut h = headers(&[("b3", &sent)]);
    let span = outbound(Some(&tracing(1.0, true)), &mut h).unwrap();
    assert!(span.recorded);
    // Each try names its own span, in B3 as the app sent it and in W3C between proxies.
    let try_span = hopwise_api::trace_context::SpanId::random();
    let mut next = h.clone();
    span.try_context(try_span).inject(&mut next);
    assert_eq!(
        get(&next, "traceparent"),
        format!("00-{TRACE}-{try_span}-01")
    );
    assert_eq!(
        get(&next, "b3"),
        format!("{TRACE}-{try_span}-1-{}", span.span_id())
    );
    let back = TraceContext::extract(&next).unwrap();
    assert_eq!(
        back.parent_span_id, None,
        "W3C is read first and has no parent field"
    );
}

#[test]
fn sampling_is_decided_by_the_trace_id_alone() {
    let id = TraceId::random();
    assert_eq!(sample(0.3, id), sample(0.3, id));
    assert!(sample(1.0, id) && !sample(0.0, id) && !sample(f64::NAN, id));
    // 1 % of 200,000 random ids: 2,000 expected, σ ≈ 44.5; ±5σ.
    let n = 200_000;
    let hits = (0..n).filter(|_| sample(0.01, TraceId::random())).count();
    assert!(
        (1_778..=2_222).contains(&hits),
        "{hits} of {n} sampled at 1 %"
    );
}
