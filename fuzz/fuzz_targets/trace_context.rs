//! `hopwise_api::trace_context`: extraction never panics on any header set; a `traceparent`
//! that parses prints back to what was parsed (lower-case hex only, version `00`, the sampled
//! bit of its flags); a context a proxy writes back (itself, or a child span) reads back with
//! the same trace, the span written and the same sampling.
#![no_main]

use hopwise_api::trace_context::{Formats, SpanId, TRACEPARENT, TraceContext};
use http::header::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    traceparent_alone(data.split(|&b| b == b'\n').next().unwrap_or_default());
    let headers = common::headers(data);
    let _ = TraceContext::arrived(&headers);
    let _ = TraceContext::sampling_hint(&headers);
    let Some(context) = TraceContext::extract(&headers) else {
        return;
    };
    for written in [
        context,
        context.child(SpanId::from_bytes([7; 8]).expect("not zero")),
    ] {
        let mut h = headers.clone();
        written.inject(&mut h);
        let read = TraceContext::extract(&h).expect("what a proxy writes reads back");
        assert_eq!(read.trace_id, written.trace_id);
        assert_eq!(read.span_id, written.span_id);
        assert_eq!(read.is_sampled(), written.is_sampled());
        assert_eq!(read.formats, written.formats);
    }
});

fn traceparent_alone(value: &[u8]) {
    let Ok(v) = HeaderValue::from_bytes(value) else {
        return;
    };
    let mut h = HeaderMap::new();
    h.insert(TRACEPARENT, v);
    let Some(c) = TraceContext::extract(&h) else {
        return;
    };
    assert_eq!(c.formats, Formats::W3C);
    let printed = c.traceparent();
    let printed = printed.as_bytes();
    assert_eq!(&printed[..3], b"00-");
    assert_eq!(
        &printed[3..53],
        &value[3..53],
        "ids print back as they came"
    );
    let sampled =
        value[54].is_ascii_hexdigit() && (value[54] as char).to_digit(16).unwrap_or(0) & 1 == 1;
    assert_eq!(&printed[53..], if sampled { b"01" } else { b"00" });
}
