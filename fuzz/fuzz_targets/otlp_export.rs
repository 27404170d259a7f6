//! What the dashboard does with the OTLP exports proxies send its receiver
//! (`hopwise_control::dashboard::trace_api`'s sink): any bytes as a run of length-delimited
//! `ExportTraceServiceRequest`s (tonic decodes the same protobuf), each made plain spans
//! (`otlp_receiver::spans_of`), kept in the bounded store (`dashboard::traces::Store::add`,
//! a second apart) and every trace laid out as `/api/traces/<id>` lays it out
//! (`dashboard::waterfall::layout`). Never a panic (arithmetic overflow included: the fuzz build
//! checks it), and:
//! - an export gives one plain span per span sent, its ids the bytes sent in lower-case hex;
//! - the store holds at most `MAX_TRACES` traces of at most `MAX_SPANS` spans, each span once,
//!   every text within `MAX_TEXT` bytes, no span ending before it starts; every span sent is
//!   kept, refused, dropped at a cap or a repeat, and the list names each trace held once;
//! - a waterfall has a row per span; each row's proxies' and app's time sum to its duration,
//!   it is drawn no longer than it lasted, inside its parent's row and the trace's time line.
#![no_main]

use std::collections::BTreeSet;

use hopwise_control::dashboard::traces::{MAX_SPANS, MAX_TEXT, MAX_TRACES, Span, Store};
use hopwise_control::dashboard::waterfall::layout;
use hopwise_control::otlp_receiver::{span_count, spans_of};
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let mut store = Store::default();
    let mut rest = data;
    let mut now_ms = 0;
    let mut sent = 0;
    while !rest.is_empty() {
        let Ok(export) = ExportTraceServiceRequest::decode_length_delimited(&mut rest) else {
            break;
        };
        let sent_ids: Vec<(Vec<u8>, Vec<u8>)> = export
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| (s.trace_id.clone(), s.span_id.clone()))
            .collect();
        let n = span_count(&export);
        let spans = spans_of(export);
        assert_eq!(spans.len(), n);
        assert_eq!(spans.len(), sent_ids.len());
        for (s, (trace, span)) in spans.iter().zip(&sent_ids) {
            assert_eq!(s.trace_id, hex(trace));
            assert_eq!(s.span_id, hex(span));
        }
        sent += spans.len();
        store.add(&spans, now_ms);
        now_ms += 1000;
    }

    let listed = store.recent(now_ms);
    assert_eq!(listed.len(), store.len());
    assert!(store.len() <= MAX_TRACES);
    let ids: BTreeSet<&str> = listed.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), listed.len(), "a trace listed twice");
    let mut held = 0;
    for summary in &listed {
        let trace = store.get(&summary.id).expect("a listed trace is held");
        assert_eq!(summary.spans, trace.spans.len());
        assert!(trace.spans.len() <= MAX_SPANS);
        held += trace.spans.len();
        let once: BTreeSet<u64> = trace.spans.iter().map(|s| s.span_id).collect();
        assert_eq!(once.len(), trace.spans.len(), "a span kept twice");
        trace.spans.iter().for_each(check_span);
        check_waterfall(&trace.spans);
    }
    // Held ≤ sent less refused (the rest dropped at a cap, repeats, or evicted with a trace).
    assert!(held as u64 + store.refused_spans <= sent as u64);
});

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn check_span(s: &Span) {
    assert!(s.end >= s.start);
    let texts = [
        &s.instance,
        &s.route,
        &s.upstream,
        &s.method,
        &s.path,
        &s.copy,
    ];
    let texts = texts.into_iter().flatten().chain([&s.service]);
    let more = [&s.outcome, &s.retry_condition].into_iter().flatten();
    for t in texts.chain(more) {
        assert!(t.len() <= MAX_TEXT, "{} bytes kept", t.len());
    }
}

fn check_waterfall(spans: &[Span]) {
    let w = layout(spans);
    assert_eq!(w.rows.len(), spans.len());
    // Pre-order: a row's parent row is the last one before it a level up.
    let mut path: Vec<(u64, u64)> = Vec::new();
    for r in &w.rows {
        let dur = r.span.end - r.span.start;
        assert_eq!(r.duration_ns, dur);
        assert_eq!(
            u128::from(r.proxy_ns) + u128::from(r.app_ns),
            u128::from(dur)
        );
        assert!(r.drawn_ns <= dur);
        let end = r.offset_ns.checked_add(r.drawn_ns).expect("drawn past u64");
        assert!(end <= w.duration_ns, "drawn past the trace's end");
        path.truncate(r.depth);
        assert_eq!(path.len(), r.depth, "a row deeper than its parent's child");
        if let Some(&(p_at, p_end)) = path.last() {
            assert!(
                p_at <= r.offset_ns && end <= p_end,
                "drawn outside its parent"
            );
        }
        path.push((r.offset_ns, end));
    }
    serde_json::to_value(&w).expect("the waterfall serialises");
}
