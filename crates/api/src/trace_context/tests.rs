use http::header::{HeaderMap, HeaderValue};
use proptest::prelude::*;

use super::*;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn get<'h>(map: &'h HeaderMap, name: &str) -> Option<&'h str> {
    map.get(name).map(|v| v.to_str().unwrap())
}

#[test]
fn reads_the_w3c_example() {
    let h = headers(&[("traceparent", &format!("00-{TRACE}-{SPAN}-01"))]);
    let ctx = TraceContext::extract(&h).unwrap();
    assert_eq!(ctx.trace_id.to_string(), TRACE);
    assert_eq!(ctx.span_id.to_string(), SPAN);
    assert_eq!(ctx.sampled, Some(true));
    assert_eq!(ctx.formats, Formats::W3C);
}

#[test]
fn ignores_invalid_traceparents() {
    let bad = [
        format!("00-{}-{SPAN}-01", "0".repeat(32)), // all-zero trace id
        format!("00-{TRACE}-{}-01", "0".repeat(16)), // all-zero span id
        format!("00-{}-{SPAN}-01", TRACE.to_uppercase()), // uppercase
        format!("ff-{TRACE}-{SPAN}-01"),            // version ff
        format!("00-{TRACE}-{SPAN}-01-extra"),      // v00 with more fields
        format!("01-{TRACE}-{SPAN}-01extra"),       // later version, no dash
        format!("00-{TRACE}-{SPAN}-1"),             // short flags
        format!("00_{TRACE}-{SPAN}-01"),            // wrong separator
        String::new(),
    ];
    for value in bad {
        assert_eq!(
            TraceContext::extract(&headers(&[("traceparent", &value)])),
            None,
            "{value}"
        );
    }
    // Two values of the header conflict: neither is believed.
    let two = format!("00-{TRACE}-{SPAN}-01");
    assert_eq!(
        TraceContext::extract(&headers(&[("traceparent", &two), ("traceparent", &two)])),
        None
    );
}

#[test]
fn reads_later_w3c_versions_as_far_as_it_knows() {
    let h = headers(&[(
        "traceparent",
        &format!("cc-{TRACE}-{SPAN}-00-what-the-future-holds"),
    )]);
    let ctx = TraceContext::extract(&h).unwrap();
    assert_eq!(ctx.sampled, Some(false));
    // Written back as the version this module knows.
    let mut out = HeaderMap::new();
    ctx.inject(&mut out);
    assert_eq!(
        get(&out, "traceparent"),
        Some(format!("00-{TRACE}-{SPAN}-00").as_str())
    );
}

#[test]
fn reads_b3_single_in_every_shape() {
    let cases = [
        (format!("{TRACE}-{SPAN}"), None, false, None),
        (format!("{TRACE}-{SPAN}-1"), Some(true), false, None),
        (format!("{TRACE}-{SPAN}-0"), Some(false), false, None),
        (format!("{TRACE}-{SPAN}-d"), Some(true), true, None),
        (
            format!("{TRACE}-{SPAN}-1-{}", "05e3ac9a4f6e3b90"),
            Some(true),
            false,
            Some("05e3ac9a4f6e3b90"),
        ),
    ];
    for (value, sampled, debug, parent) in cases {
        let ctx = TraceContext::extract(&headers(&[("b3", &value)])).unwrap();
        assert_eq!((ctx.sampled, ctx.debug), (sampled, debug), "{value}");
        assert_eq!(ctx.parent_span_id.map(|p| p.to_string()).as_deref(), parent);
        assert_eq!(ctx.formats, Formats::B3_SINGLE);
    }
    for value in [
        format!("{TRACE}-{SPAN}-x"),
        TRACE.to_string(),
        format!("{TRACE}-{SPAN}-1-{SPAN}-1"),
        "0".into(),
    ] {
        assert_eq!(
            TraceContext::extract(&headers(&[("b3", &value)])),
            None,
            "{value}"
        );
    }
}

#[test]
fn a_64_bit_b3_trace_id_goes_back_as_short_as_it_came() {
    let h = headers(&[("b3", &format!("a3ce929d0e0e4736-{SPAN}-1"))]);
    let ctx = TraceContext::extract(&h).unwrap();
    assert_eq!(ctx.trace_id.to_string(), "0000000000000000a3ce929d0e0e4736");
    let mut out = HeaderMap::new();
    ctx.child(SpanId::from_bytes([1; 8]).unwrap())
        .inject(&mut out);
    assert_eq!(
        get(&out, "b3"),
        Some(format!("a3ce929d0e0e4736-0101010101010101-1-{SPAN}").as_str())
    );
}

#[test]
fn reads_b3_multi_and_rejects_a_broken_optional_header() {
    let h = headers(&[
        ("x-b3-traceid", TRACE),
        ("x-b3-spanid", SPAN),
        ("x-b3-parentspanid", "05e3ac9a4f6e3b90"),
        ("x-b3-sampled", "1"),
    ]);
    let ctx = TraceContext::extract(&h).unwrap();
    assert_eq!((ctx.sampled, ctx.formats), (Some(true), Formats::B3_MULTI));
    let h = headers(&[
        ("x-b3-traceid", TRACE),
        ("x-b3-spanid", SPAN),
        ("x-b3-sampled", "yes"),
    ]);
    assert_eq!(TraceContext::extract(&h), None);
    let h = headers(&[
        ("x-b3-traceid", TRACE),
        ("x-b3-spanid", SPAN),
        ("x-b3-flags", "1"),
    ]);
    assert!(TraceContext::extract(&h).unwrap().is_sampled());
}

#[test]
fn traceparent_wins_and_every_format_present_is_rewritten() {
    let other = "11111111111111111111111111111111";
    let mut h = headers(&[
        ("traceparent", &format!("00-{TRACE}-{SPAN}-01")),
        ("tracestate", "congo=t61rcWkgMzE"),
        ("b3", &format!("{other}-{SPAN}-1")),
    ]);
    let ctx = TraceContext::extract(&h).unwrap();
    assert_eq!(ctx.trace_id.to_string(), TRACE);
    assert_eq!(ctx.formats, Formats::W3C.with(Formats::B3_SINGLE));
    let child = ctx.child(SpanId::from_bytes([0xab; 8]).unwrap());
    child.inject(&mut h);
    assert_eq!(
        get(&h, "traceparent"),
        Some(format!("00-{TRACE}-abababababababab-01").as_str())
    );
    assert_eq!(
        get(&h, "b3"),
        Some(format!("{TRACE}-abababababababab-1-{SPAN}").as_str())
    );
    assert_eq!(
        get(&h, "tracestate"),
        Some("congo=t61rcWkgMzE"),
        "passed through beside a valid traceparent"
    );
}

#[test]
fn tracestate_is_dropped_when_traceparent_was_not_read() {
    let mut h = headers(&[
        ("traceparent", "garbage"),
        ("tracestate", "congo=t61rcWkgMzE"),
        ("b3", &format!("{TRACE}-{SPAN}-0")),
    ]);
    let ctx = TraceContext::extract(&h).unwrap();
    assert_eq!(ctx.sampled, Some(false));
    ctx.inject(&mut h);
    assert_eq!(
        get(&h, "traceparent"),
        Some(format!("00-{TRACE}-{SPAN}-00").as_str())
    );
    assert_eq!(get(&h, "tracestate"), None);
}

#[test]
fn b3_multi_rewrite_removes_what_no_longer_holds() {
    let mut h = headers(&[
        ("x-b3-traceid", TRACE),
        ("x-b3-spanid", SPAN),
        ("x-b3-flags", "1"),
    ]);
    let root = TraceContext::root(
        TraceId::random(),
        SpanId::random(),
        false,
        Formats::B3_MULTI,
    );
    root.inject(&mut h);
    assert_eq!(get(&h, "x-b3-sampled"), Some("0"));
    assert_eq!(get(&h, "x-b3-flags"), None);
    assert_eq!(get(&h, "x-b3-parentspanid"), None);
    assert_eq!(
        get(&h, "x-b3-traceid"),
        Some(root.trace_id.to_string().as_str())
    );
}

#[test]
fn sampling_hints_without_ids() {
    assert_eq!(
        TraceContext::sampling_hint(&headers(&[("b3", "0")])),
        Some(false)
    );
    assert_eq!(
        TraceContext::sampling_hint(&headers(&[("b3", "d")])),
        Some(true)
    );
    assert_eq!(
        TraceContext::sampling_hint(&headers(&[("x-b3-sampled", "1")])),
        Some(true)
    );
    assert_eq!(TraceContext::sampling_hint(&headers(&[])), None);
    assert_eq!(TraceContext::extract(&headers(&[("b3", "1")])), None);
}

#[test]
fn remove_all_leaves_no_trace_header() {
    let mut h = headers(&[
        ("traceparent", &format!("00-{TRACE}-{SPAN}-01")),
        ("tracestate", "a=b"),
        ("b3", "1"),
        ("x-b3-sampled", "1"),
        ("x-b3-flags", "1"),
        ("x-keep", "1"),
    ]);
    remove_all(&mut h);
    assert_eq!(h.len(), 1);
}

fn formats() -> impl Strategy<Value = Formats> {
    (1u8..8).prop_map(Formats)
}

proptest! {
    /// Whatever a proxy writes, the next proxy reads back exactly (in every format it wrote).
    #[test]
    fn what_is_written_is_read_back(
        trace in any::<[u8; 16]>(), span in any::<[u8; 8]>(), parent in any::<[u8; 8]>(),
        sampled in any::<bool>(), formats in formats(),
    ) {
        let (Some(trace), Some(span), Some(parent)) =
            (TraceId::from_bytes(trace), SpanId::from_bytes(span), SpanId::from_bytes(parent))
        else { return Ok(()) };
        let ctx = TraceContext::root(trace, parent, sampled, formats).child(span);
        for one in [Formats::W3C, Formats::B3_SINGLE, Formats::B3_MULTI] {
            if !formats.contains(one) { continue }
            let mut h = HeaderMap::new();
            TraceContext { formats: one, ..ctx }.inject(&mut h);
            let back = TraceContext::extract(&h).unwrap();
            prop_assert_eq!(back.trace_id, trace);
            prop_assert_eq!(back.span_id, span);
            prop_assert_eq!(back.sampled, Some(sampled));
            if one != Formats::W3C {
                prop_assert_eq!(back.parent_span_id, Some(parent));
            }
        }
    }

    /// No header value makes extraction panic.
    #[test]
    fn any_bytes_are_safe(value in "[ -~]{0,80}") {
        for name in ["traceparent", "b3", "x-b3-traceid"] {
            if let Ok(v) = HeaderValue::from_str(&value) {
                let mut h = HeaderMap::new();
                h.insert(HeaderName::from_static(name), v);
                let _ = TraceContext::extract(&h);
                let _ = TraceContext::sampling_hint(&h);
            }
        }
    }

    /// `arrived` says what `extract`, then `sampling_hint`, say, whatever trace headers came.
    #[test]
    fn arrived_is_extract_then_the_hint(
        values in proptest::collection::vec(
            (0..7usize, prop_oneof![Just("0".to_owned()), Just("1".to_owned()), Just("d".to_owned()),
                Just(format!("{TRACE}-{SPAN}")), Just(format!("00-{TRACE}-{SPAN}-01")),
                Just(SPAN.to_owned()), Just(TRACE.to_owned())]),
            0..4,
        ),
    ) {
        const NAMES: [&str; 7] = ["traceparent", "b3", "x-b3-traceid", "x-b3-spanid",
            "x-b3-sampled", "x-b3-flags", "accept"];
        let mut h = HeaderMap::new();
        for (name, value) in &values {
            h.append(HeaderName::from_static(NAMES[*name]), HeaderValue::from_str(value).unwrap());
        }
        let want = TraceContext::extract(&h).ok_or_else(|| TraceContext::sampling_hint(&h));
        prop_assert_eq!(TraceContext::arrived(&h), want);
    }
}
