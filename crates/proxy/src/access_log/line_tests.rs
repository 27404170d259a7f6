use std::str::FromStr;

use http::HeaderValue;
use http::uri::Authority;
use proptest::prelude::*;

use super::*;

fn line() -> Line {
    Line {
        // 2026-12-01T16:07:06.5Z
        time: 1_796_141_226_500_000_000,
        direction: "outbound",
        service: Name::new("a"),
        upstream: Some(Name::new("b")),
        route: Some(Name::new("quote")),
        http_route: Some(Name::new("canary")),
        rule: Some(Name::new("v2")),
        method: Method::GET,
        authority: Some(Text::Authority(Authority::from_static("b"))),
        path: Some(PathAndQuery::from_static("/quote/1?x=1")),
        status: 200,
        tries: 2,
        retries: vec!["5xx"],
        copy: Some("127.0.0.1:7001".parse().unwrap()),
        bytes_out: Some(12),
        duration_us: 1500,
        proxy_us: 40,
        trace_id: TraceId::from_bytes(
            *b"\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\xa3\xce\x92\x9d\x0e\x0e\x47\x36",
        ),
        span_id: SpanId::from_bytes(*b"\x00\xf0\x67\xaa\x0b\xa9\x02\xb7"),
        ..Default::default()
    }
}

fn render(l: &Line, format: LogFormat) -> String {
    let mut out = Vec::new();
    l.render(format, &mut Clock::default(), &mut out);
    String::from_utf8(out).unwrap()
}

/// The rendering this replaced (`serde_json::json!` and `format!`), kept as the oracle.
fn oracle(l: &Line) -> serde_json::Value {
    let (path, redacted) = l.logged_path();
    serde_json::json!({
        "time": oracle_rfc3339(l.time),
        "direction": l.direction,
        "service": l.service.as_str(),
        "upstream": l.upstream.as_ref().map(Name::as_str),
        "route": l.route.as_ref().map(Name::as_str),
        "http_route": l.http_route.as_ref().map(Name::as_str),
        "rule": l.rule.as_ref().map(Name::as_str),
        "caller": l.caller.as_deref(),
        "method": l.method.as_str(),
        "authority": l.authority.as_ref().map(Text::as_str),
        "path": format!("{path}{redacted}"),
        "status": l.status,
        "grpc_status": l.grpc_status,
        "tries": l.tries,
        "retries": l.retries,
        "retry_skipped": l.retry_skipped,
        "copy": l.copy.map(|c| c.to_string()),
        "local_reply": l.local_reply,
        "ended": l.ended,
        "bytes_in": l.bytes_in,
        "bytes_out": l.bytes_out,
        "duration_us": l.duration_us,
        "proxy_us": l.proxy_us,
        "trace_id": l.trace_id.map(|t| t.to_string()),
        "span_id": l.span_id.map(|t| t.to_string()),
    })
}

fn oracle_rfc3339(nanos: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(nanos / 1_000_000_000);
    let us = nanos % 1_000_000_000 / 1000;
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}Z")
}

#[test]
fn times_are_utc_calendar_dates() {
    let time = |nanos| {
        let l = Line {
            time: nanos,
            ..line()
        };
        let v: serde_json::Value = serde_json::from_str(&render(&l, LogFormat::Json)).unwrap();
        let common = render(&l, LogFormat::Common);
        let clf = common.split(['[', ']']).nth(1).unwrap().to_owned();
        (v["time"].as_str().unwrap().to_owned(), clf)
    };
    assert_eq!(time(0).0, "1970-01-01T00:00:00.000000Z");
    assert_eq!(time(0).1, "01/Jan/1970:00:00:00 +0000");
    assert_eq!(
        time(1_796_141_226_500_000_000).0,
        "2026-12-01T16:07:06.500000Z"
    );
    // A leap day.
    assert_eq!(
        time(951_782_400_000_000_000).0,
        "2000-02-29T00:00:00.000000Z"
    );
}

#[test]
fn the_calendar_is_worked_out_again_when_the_second_changes() {
    let mut clock = Clock::default();
    let mut out = Vec::new();
    for nanos in [
        1_796_141_226_500_000_000,
        1_796_141_226_999_999_000,
        1_796_141_227_000_001_000,
        // Back in time (a clock stepped): still right.
        951_782_400_000_000_000,
    ] {
        out.clear();
        Line {
            time: nanos,
            ..line()
        }
        .render(LogFormat::Json, &mut clock, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["time"], oracle_rfc3339(nanos));
    }
}

#[test]
fn json_lines_hold_every_field_in_order() {
    let text = render(&line(), LogFormat::Json);
    assert!(text.ends_with('\n'));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["time"], "2026-12-01T16:07:06.500000Z");
    assert_eq!(v["retries"], serde_json::json!(["5xx"]));
    assert_eq!(v["caller"], serde_json::Value::Null);
    assert_eq!(v["bytes_in"], serde_json::Value::Null);
    assert_eq!(v["path"], "/quote/1?…");
    assert_eq!(v["copy"], "127.0.0.1:7001");
    assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(v["proxy_us"], 40);
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    let want = oracle(&line());
    assert_eq!(keys, want.as_object().unwrap().keys().collect::<Vec<_>>());
    assert_eq!(keys.len(), 25);
    assert_eq!(
        (&v["http_route"], &v["rule"]),
        (&"canary".into(), &"v2".into())
    );
}

#[test]
fn the_common_form_starts_as_the_common_log_format() {
    let text = render(&line(), LogFormat::Common);
    assert_eq!(
        text,
        "- - - [01/Dec/2026:16:07:06 +0000] \"GET /quote/1?…\" 200 12 direction=outbound \
         service=a upstream=b route=quote http_route=canary rule=v2 authority=b grpc_status=- \
         tries=2 retries=5xx \
         retry_skipped=- copy=127.0.0.1:7001 local_reply=- ended=- bytes_in=- duration_us=1500 \
         proxy_us=40 trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7\n"
    );
    let full = Line {
        direction: "inbound",
        upstream: None,
        caller: Some("spiffe://t/service/a".into()),
        grpc_status: Some(14),
        retries: vec!["5xx", "reset"],
        retry_skipped: Some("budget"),
        copy: None,
        local_reply: Some("forbidden"),
        bytes_in: Some(3),
        bytes_out: None,
        trace_id: None,
        span_id: None,
        query: true,
        rule: None,
        ..line()
    };
    assert_eq!(
        render(&full, LogFormat::Common),
        "- - spiffe://t/service/a [01/Dec/2026:16:07:06 +0000] \"GET /quote/1?x=1\" 200 - \
         direction=inbound service=a upstream=- route=quote http_route=canary rule=- authority=b \
         grpc_status=14 tries=2 \
         retries=5xx,reset retry_skipped=budget copy=- local_reply=forbidden ended=- bytes_in=3 \
         duration_us=1500 proxy_us=40 trace_id=- span_id=-\n"
    );
}

#[test]
fn the_query_is_redacted_unless_asked_for() {
    let at = |path: Option<&'static str>, query| {
        let l = Line {
            path: path.map(PathAndQuery::from_static),
            query,
            ..line()
        };
        let (p, r) = l.logged_path();
        format!("{p}{r}")
    };
    assert_eq!(at(Some("/a?token=x"), false), "/a?…");
    assert_eq!(at(Some("/a?token=x"), true), "/a?token=x");
    assert_eq!(at(Some("/a"), false), "/a");
    assert_eq!(at(None, false), "/");
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::DELETE),
        "[A-Z]{1,10}".prop_map(|m| Method::from_bytes(m.as_bytes()).unwrap()),
    ]
}

fn text() -> impl Strategy<Value = Option<Text>> {
    prop_oneof![
        Just(None),
        "[a-z0-9.-]{1,20}(:[0-9]{1,4})?".prop_filter_map("an authority", |a| {
            Some(Some(Text::Authority(Authority::from_str(&a).ok()?)))
        }),
        "[ -~]{0,20}".prop_filter_map("a header", |h| {
            Some(Text::header(&HeaderValue::from_str(&h).ok()?))
        }),
    ]
}

fn names() -> impl Strategy<Value = (Name, Option<Name>, Option<Name>, Option<Arc<str>>)> {
    (
        any::<String>(),
        proptest::option::of(any::<String>()),
        proptest::option::of(any::<String>()),
        proptest::option::of(any::<String>()),
    )
        .prop_map(|(s, u, r, c)| {
            let name = |s: Option<String>| s.map(|s| Name::new(&s));
            (Name::new(&s), name(u), name(r), c.map(Arc::from))
        })
}

/// The callee's own route and rule, any text (a route's name is checked, but a line must hold
/// whatever it is given).
fn rule_names() -> impl Strategy<Value = (Option<Name>, Option<Name>)> {
    let name = || proptest::option::of(any::<String>()).prop_map(|s| s.map(|s| Name::new(&s)));
    (name(), name())
}

fn request() -> impl Strategy<Value = (Method, Option<Text>, Option<PathAndQuery>, bool)> {
    let path = proptest::option::of("/[a-zA-Z0-9/._~%!$&'()*+,;=:@\"-]{0,30}(\\?[a-z=&?]{0,10})?")
        .prop_map(|p| p.and_then(|p| PathAndQuery::from_str(&p).ok()));
    (method(), text(), path, any::<bool>())
}

fn answer() -> impl Strategy<Value = Line> {
    let retries = proptest::collection::vec(prop_oneof![Just("5xx"), Just("reset")], 0..3);
    (
        (any::<u16>(), any::<Option<u32>>(), any::<u32>(), retries),
        (
            proptest::option::of(Just("budget")),
            any::<Option<SocketAddr>>(),
            proptest::option::of(prop_oneof![Just("forbidden"), Just("timeout")]),
            proptest::option::of(prop_oneof![Just("caller-gone"), Just("caller-deadline")]),
        ),
        (
            any::<Option<u64>>(),
            any::<Option<u64>>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (
            any::<u64>(),
            any::<bool>(),
            any::<[u8; 16]>(),
            any::<[u8; 8]>(),
        ),
    )
        .prop_map(|(a, b, c, d)| Line {
            status: a.0,
            grpc_status: a.1,
            tries: a.2,
            retries: a.3,
            retry_skipped: b.0,
            copy: b.1,
            local_reply: b.2,
            ended: b.3,
            bytes_in: c.0,
            bytes_out: c.1,
            duration_us: c.2,
            proxy_us: c.3,
            time: d.0,
            direction: if d.1 { "inbound" } else { "outbound" },
            trace_id: TraceId::from_bytes(d.2),
            span_id: SpanId::from_bytes(d.3),
            ..Line::default()
        })
}

fn lines() -> impl Strategy<Value = Line> {
    (names(), rule_names(), request(), answer()).prop_map(|(n, h, r, a)| Line {
        service: n.0,
        upstream: n.1,
        route: n.2,
        http_route: h.0,
        rule: h.1,
        caller: n.3,
        method: r.0,
        authority: r.1,
        path: r.2,
        query: r.3,
        ..a
    })
}

proptest! {
    #[test]
    fn hand_written_json_is_what_serde_json_wrote(l in lines(), before in any::<u64>()) {
        // A clock that last wrote another second, as the writer's usually has.
        let mut clock = Clock::default();
        let mut out = Vec::new();
        Line { time: before, ..line() }.render(LogFormat::Json, &mut clock, &mut out);
        out.clear();
        l.render(LogFormat::Json, &mut clock, &mut out);
        prop_assert_eq!(out.last(), Some(&b'\n'));
        prop_assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        let got: serde_json::Value = serde_json::from_slice(&out)
            .map_err(|e| TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(&out))))?;
        let want = oracle(&l);
        prop_assert_eq!(&got, &want);
        let keys = |v: &serde_json::Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
        prop_assert_eq!(keys(&got), keys(&want));
        prop_assert_eq!(l.json_line(), out);
    }
}

/// The common form's fields after the status, in order: nothing a peer sends can add one.
const COMMON_KEYS: [&str; 19] = [
    "direction",
    "service",
    "upstream",
    "route",
    "http_route",
    "rule",
    "authority",
    "grpc_status",
    "tries",
    "retries",
    "retry_skipped",
    "copy",
    "local_reply",
    "ended",
    "bytes_in",
    "duration_us",
    "proxy_us",
    "trace_id",
    "span_id",
];

/// What a common-form line is made of, or why it is not one: `caller`, the quoted request,
/// the keys after the status.
fn common_parts(line: &str) -> Result<(String, String, Vec<String>), String> {
    let body = line.strip_suffix('\n').ok_or("no newline at the end")?;
    // The proxy's own mark of a redacted query is its only text beyond ASCII.
    let ascii = body.replace("?…", "?");
    if let Some(b) = ascii.bytes().find(|b| !b.is_ascii_graphic() && *b != b' ') {
        return Err(format!("byte {b:#x} in the line"));
    }
    let rest = body.strip_prefix("- - ").ok_or("not `- - `")?;
    let (caller, rest) = rest.split_once(" [").ok_or("no time")?;
    let (_, rest) = rest.split_once("] \"").ok_or("no request")?;
    let (request, rest) = rest.split_once("\" ").ok_or("request not closed")?;
    if request.contains('"') {
        return Err("a quote inside the request".into());
    }
    let mut words = rest.split(' ').skip(2);
    let keys = words
        .by_ref()
        .map(|w| {
            w.split_once('=')
                .map(|(k, _)| k.to_owned())
                .ok_or(w.to_owned())
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((caller.to_owned(), request.to_owned(), keys))
}

proptest! {
    #[test]
    fn a_common_line_keeps_its_shape_whatever_a_peer_sent(l in lines()) {
        let out = render(&l, LogFormat::Common);
        let (_, _, keys) = common_parts(&out).map_err(|e| TestCaseError::fail(format!("{e}: {out}")))?;
        prop_assert_eq!(keys, COMMON_KEYS.to_vec(), "{}", out);
    }
}

/// The forgeries an outside look made (issue 28): each stays inside its own field.
#[test]
fn a_forged_host_path_or_caller_cannot_add_or_break_fields() {
    let mut l = line();
    l.caller = Some(Arc::from("spiffe://t/a [x] \"GET"));
    l.path = Some(PathAndQuery::from_str("/a\"b").unwrap());
    l.authority = Some(Text::Header(HeaderValue::from_static(
        "b local_reply=forbidden trace_id=1",
    )));
    l.method = Method::from_bytes(b"GET").unwrap();
    let out = render(&l, LogFormat::Common);
    let (caller, request, keys) = common_parts(&out).unwrap();
    assert_eq!(caller, "spiffe://t/a\\x20[x]\\x20\\x22GET", "{out}");
    assert_eq!(request, "GET /a\\x22b", "{out}");
    assert_eq!(keys, COMMON_KEYS.to_vec(), "{out}");
    assert!(
        out.contains(" authority=b\\x20local_reply=forbidden\\x20trace_id=1 "),
        "{out}"
    );
    // Tabs and C1 controls (UTF-8 `c2 85`) are bytes like any other.
    let mut t = line();
    t.upstream = Some(Name::new("b\tc\u{85}"));
    let out = render(&t, LogFormat::Common);
    assert!(out.contains(" upstream=b\\x09c\\xc2\\x85 "), "{out}");
}

/// A detached line holds none of the buffer its head was read into (as hyper hands the path
/// and authority over: slices of it), and says the same.
#[test]
fn a_detached_line_keeps_nothing_of_the_requests_buffer() {
    let mut raw = vec![b'x'; 8192];
    raw[..12].copy_from_slice(b"/quote/1?x=1");
    raw[100..110].copy_from_slice(b"b.mesh:443");
    let buf = bytes::Bytes::from(raw);
    let within = |p: *const u8| buf.as_ptr_range().contains(&p);
    let mut l = line();
    l.path = Some(PathAndQuery::from_maybe_shared(buf.slice(..12)).unwrap());
    l.authority = Some(Text::Authority(
        Authority::from_maybe_shared(buf.slice(100..110)).unwrap(),
    ));
    let before = l.json_line();
    assert!(
        within(l.path.as_ref().unwrap().as_str().as_ptr()),
        "the test's premise"
    );
    l.detach();
    assert!(!within(l.path.as_ref().unwrap().as_str().as_ptr()));
    assert!(!within(l.authority.as_ref().unwrap().as_bytes().as_ptr()));
    assert_eq!(l.json_line(), before);
}
