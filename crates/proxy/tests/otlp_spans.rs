//! Spans from real proxies to a real OTLP receiver (`support/otlp.rs`, on the official
//! protobuf definitions): a request through a chain of proxies is one trace with the right
//! parents; a retried call's tries are child spans; a 1 % ratio holds; B3 in, W3C out and back;
//! a collector that does not take spans costs dropped spans, counted, never a request.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

#[path = "support/otlp.rs"]
mod otlp;
mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use otlp::Got;
use support::*;

fn chain_mesh(collector: SocketAddr, protocol: &str, sampling: &str) -> String {
    format!(
        "
mesh:
  name: t
  trust_domain: test.local
  tracing: {{ collector: '{collector}', protocol: {protocol}, sampling: '{sampling}' }}
services:
  a:
    calls:
      b:
        timeout: 2s
        routes:
          order: {{ path: /order }}
  b:
    calls:
      c:
        timeout: 2s
        retries: {{ count: 2, on: [5xx], backoff: {{ base: 1ms, max: 2ms }} }}
  c: {{}}
"
    )
}

/// b's app: calls c through b's outbound proxy, passing on only the trace headers named in
/// `carry` (an app that speaks one format), and answers with c's status.
fn relay(to: Arc<OnceLock<SocketAddr>>, carry: &'static [&'static str]) -> Handler {
    Arc::new(move |req: Request<Incoming>| {
        let to = to.clone();
        Box::pin(async move {
            let mut next = request("GET", "/c", "c", b"");
            for name in carry {
                if let Some(v) = req.headers().get(*name) {
                    next.headers_mut().insert(*name, v.clone());
                }
            }
            let (status, _, body) = get(*to.get().unwrap(), next).await;
            let mut r = Response::new(Full::new(Bytes::from(body)));
            *r.status_mut() = status;
            r
        })
    })
}

/// c's app: 503 for the first `failures` requests, then 200.
fn failing_first(failures: usize) -> Handler {
    let seen = Arc::new(AtomicUsize::new(0));
    Arc::new(move |_req| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let mut r = Response::new(Full::new(Bytes::from_static(b"c")));
            if n < failures {
                *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            }
            r
        })
    })
}

struct Chain {
    _f: Fixture,
    a: hopwise_proxy::Running,
    _b: hopwise_proxy::Running,
    _c: hopwise_proxy::Running,
}

/// a's proxy → b's proxy → b's app (relay) → b's proxy → c's proxy → c's app.
async fn chain(mesh: &str, carry: &'static [&'static str], c_app: Handler) -> Chain {
    let f = Fixture::new(mesh);
    let c_app = backend(c_app).await;
    let c = start(inbound(f.config("c"), c_app.addr)).await;
    let to = Arc::new(OnceLock::new());
    let b_app = backend(relay(to.clone(), carry)).await;
    let b_config = outbound(
        inbound(f.config("b"), b_app.addr),
        &[("c", c.bound.inbound.unwrap())],
    );
    let b = start(b_config).await;
    to.set(b.bound.upstreams["c"]).unwrap();
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    Chain {
        _f: f,
        a,
        _b: b,
        _c: c,
    }
}

async fn order(chain: &Chain, headers: &[(&'static str, &str)]) -> u16 {
    let mut req = request("GET", "/order/7?token=secret", "b", b"");
    for (k, v) in headers {
        req.headers_mut().insert(*k, v.parse().unwrap());
    }
    get(chain.a.bound.upstreams["b"], req).await.0.as_u16()
}

/// The span of `service` that is `which`: `in` (its server span), `out` (its request's client
/// span) or `try N`. Names follow the conventions (`GET /order`), shared by a request and its
/// tries, so spans are told apart by kind and `hopwise.try`.
fn one<'g>(spans: &'g [Got], service: &str, which: &str) -> &'g Got {
    let found: Vec<&Got> = spans
        .iter()
        .filter(|s| s.service == service)
        .filter(|s| match which {
            "in" => s.kind == 2,
            "out" => s.kind == 3 && s.attr("hopwise.try").is_empty(),
            t => t.strip_prefix("try ") == Some(s.attr("hopwise.try")),
        })
        .collect();
    assert_eq!(found.len(), 1, "{service} {which}: {spans:#?}");
    found[0]
}

/// The request through the chain, as its spans must link: 6 spans, one trace.
fn assert_one_trace(spans: &[Got]) {
    assert_eq!(spans.len(), 6, "{spans:#?}");
    let trace = &spans[0].trace_id;
    assert!(spans.iter().all(|s| &s.trace_id == trace), "{spans:#?}");
    let a_out = one(spans, "a", "out");
    let a_try = one(spans, "a", "try 1");
    let b_in = one(spans, "b", "in");
    let b_out = one(spans, "b", "out");
    let b_try = one(spans, "b", "try 1");
    let c_in = one(spans, "c", "in");
    assert_eq!(a_try.parent, a_out.span_id);
    assert_eq!(
        b_in.parent, a_try.span_id,
        "the callee's span is the try's child"
    );
    assert_eq!(
        b_out.parent, b_in.span_id,
        "through the app, which passed the context"
    );
    assert_eq!(b_try.parent, b_out.span_id);
    assert_eq!(c_in.parent, b_try.span_id);
    assert_eq!(b_in.attr("hopwise.peer"), "spiffe://test.local/service/a");
    // OTLP's SpanKind: SERVER 2 for the callee's proxy, CLIENT 3 for the caller's and its tries.
    assert_eq!((b_in.kind, c_in.kind, a_out.kind, b_try.kind), (2, 2, 3, 3));
    assert_eq!(a_out.attr("url.path"), "/order/7", "no query in a span");
    assert_eq!(a_out.attr("http.response.status_code"), "200");
}

/// The spans as the OpenTelemetry HTTP conventions (stable) name and describe them, attribute
/// by attribute as the collector received them; hopwise's own under `hopwise.*`.
fn assert_conventions(spans: &[Got]) {
    let attrs = |s: &Got, keys: &[&str]| -> Vec<String> {
        keys.iter().map(|k| format!("{k}={}", s.attr(k))).collect()
    };
    let b_in = one(spans, "b", "in");
    assert_eq!(b_in.name, "GET /order", "{{method}} {{http.route}}");
    assert_eq!(b_in.instance, "b[0]", "service.instance.id names the copy");
    assert_eq!(
        attrs(
            b_in,
            &[
                "http.request.method",
                "url.path",
                "url.scheme",
                "http.route"
            ]
        ),
        [
            "http.request.method=GET",
            "url.path=/order/7",
            "url.scheme=https",
            "http.route=/order"
        ]
    );
    // The authority the caller named, apart: host and port (https's when unsaid).
    assert_eq!(
        attrs(
            b_in,
            &["server.address", "server.port", "http.response.status_code"]
        ),
        [
            "server.address=b",
            "server.port=443",
            "http.response.status_code=200"
        ]
    );
    // The connection's other end: the caller's proxy.
    assert_eq!(b_in.attr("client.address"), "127.0.0.1");
    assert_eq!(b_in.attr("client.port"), b_in.attr("network.peer.port"));
    assert!(b_in.attr("client.port").parse::<u16>().is_ok(), "{b_in:#?}");
    assert_eq!(b_in.attr("url.full"), "", "a server span has no url.full");
    assert_eq!(
        attrs(b_in, &["hopwise.route", "hopwise.peer", "hopwise.tries"]),
        [
            "hopwise.route=order",
            "hopwise.peer=spiffe://test.local/service/a",
            "hopwise.tries=0"
        ]
    );
    let a_out = one(spans, "a", "out");
    assert_eq!(
        (a_out.name.as_str(), a_out.instance.as_str()),
        ("GET /order", "a[0]")
    );
    assert_eq!(
        attrs(
            a_out,
            &["url.full", "server.address", "server.port", "url.scheme"]
        ),
        [
            "url.full=http://b/order/7",
            "server.address=b",
            "server.port=80",
            "url.scheme=http"
        ]
    );
    assert_eq!(
        a_out.attr("http.route"),
        "",
        "a client span has no http.route"
    );
    assert_eq!(a_out.attr("error.type"), "");
    // A try: a client span of its own, named as its request, with the copy it reached.
    let a_try = one(spans, "a", "try 1");
    assert_eq!(a_try.name, a_out.name);
    assert_eq!(a_try.attr("network.peer.address"), "127.0.0.1");
    assert!(
        a_try.attr("network.peer.port").parse::<u16>().is_ok(),
        "{a_try:#?}"
    );
    assert_eq!(
        a_try.attr("http.request.resend_count"),
        "",
        "the first try is no resend"
    );
    // A call with no route template: the method alone, never the raw path.
    assert_eq!(one(spans, "c", "in").name, "GET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_a_chain_is_one_trace_over_otlp_grpc() {
    let rx = otlp::grpc_receiver().await;
    let mesh = chain_mesh(rx.addr.unwrap(), "grpc", "100%");
    let chain = chain(&mesh, &["traceparent"], failing_first(0)).await;
    assert_eq!(order(&chain, &[]).await, 200);
    let spans = rx.wait_for(6).await;
    assert_one_trace(&spans);
    assert_conventions(&spans);
    let root = one(&spans, "a", "out");
    assert_eq!(root.parent, "", "the trace started at a's proxy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_calls_tries_are_child_spans_over_otlp_http() {
    let rx = otlp::http_receiver().await;
    let mesh = chain_mesh(rx.addr.unwrap(), "http", "100%");
    let chain = chain(&mesh, &["traceparent"], failing_first(1)).await;
    assert_eq!(order(&chain, &[]).await, 200);
    // a: request + try; b: inbound, outbound + 2 tries; c: 2 inbound.
    let spans = rx.wait_for(8).await;
    let b_out = one(&spans, "b", "out");
    let first = one(&spans, "b", "try 1");
    let second = one(&spans, "b", "try 2");
    assert_eq!(
        (first.parent.as_str(), second.parent.as_str()),
        (b_out.span_id.as_str(), b_out.span_id.as_str())
    );
    assert_eq!(first.attr("http.response.status_code"), "503");
    assert!(first.error);
    assert_eq!(first.attr("hopwise.retry_condition"), "");
    assert_eq!(second.attr("hopwise.retry_condition"), "5xx");
    assert_eq!(second.attr("http.response.status_code"), "200");
    assert_eq!(second.attr("network.peer.address"), "127.0.0.1");
    assert_eq!(second.attr("http.request.resend_count"), "1");
    assert_eq!(first.attr("http.request.resend_count"), "");
    assert_eq!(first.attr("error.type"), "503", "a client's 5xx");
    assert_eq!(b_out.attr("hopwise.tries"), "2");
    let c_spans: Vec<&Got> = spans.iter().filter(|s| s.service == "c").collect();
    let mut parents: Vec<&str> = c_spans.iter().map(|s| s.parent.as_str()).collect();
    parents.sort_unstable();
    let mut tries = vec![first.span_id.as_str(), second.span_id.as_str()];
    tries.sort_unstable();
    assert_eq!(parents, tries, "each try reached c as its own child span");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_in_w3c_out_and_back_is_one_trace() {
    const TRACE: &str = "80f198ee56343ba864fe8b2a57d3eff7";
    // a's app sends B3; b's app reads only W3C, which a's proxy wrote beside it.
    let rx = otlp::grpc_receiver().await;
    let mesh = chain_mesh(rx.addr.unwrap(), "grpc", "100%");
    let chain1 = chain(&mesh, &["traceparent"], failing_first(0)).await;
    let b3 = format!("{TRACE}-e457b5a2e4d86bd1-1");
    assert_eq!(order(&chain1, &[("b3", &b3)]).await, 200);
    let spans = rx.wait_for(6).await;
    assert_one_trace(&spans);
    assert_eq!(spans[0].trace_id, TRACE);
    assert_eq!(one(&spans, "a", "out").parent, "e457b5a2e4d86bd1");
    drop(chain1);

    // And back: B3 travels beside W3C between proxies, so b's app, which reads only B3 (as a's
    // app wrote it), passes the same trace on.
    let rx = otlp::grpc_receiver().await;
    let mesh = chain_mesh(rx.addr.unwrap(), "grpc", "100%");
    let chain2 = chain(&mesh, &["b3"], failing_first(0)).await;
    assert_eq!(order(&chain2, &[("b3", &b3)]).await, 200);
    let spans = rx.wait_for(6).await;
    assert_one_trace(&spans);
    assert_eq!(spans[0].trace_id, TRACE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_percent_sampling_holds_over_two_thousand_requests() {
    let rx = otlp::grpc_receiver().await;
    let f = Fixture::new(&chain_mesh(rx.addr.unwrap(), "grpc", "1%"));
    let app = backend(echo()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let n = 2000;
    for _ in 0..n {
        let (status, _, _) = get(a.bound.upstreams["b"], request("GET", "/order", "b", b"")).await;
        assert_eq!(status, 200);
    }
    drop((a, b));
    // Every sampled request: a's span and try, b's inbound span.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let spans = rx.spans();
    let mut traces: Vec<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    traces.sort_unstable();
    traces.dedup();
    // Binomial(2000, 0.01): mean 20, σ ≈ 4.45; within ±4.5σ.
    assert!(
        (1..=40).contains(&traces.len()),
        "{} traces sampled of {n}",
        traces.len()
    );
    assert_eq!(
        spans.len(),
        3 * traces.len(),
        "parent-based: b recorded exactly a's sampled ones"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_takes_nothing_costs_counted_spans_not_requests() {
    let silent = otlp::silent_receiver().await;
    let yaml = chain_mesh(silent, "grpc", "100%")
        .replace("sampling: '100%'", "sampling: '100%', queue: 1");
    let f = Fixture::new(&yaml);
    let app = backend(echo()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    for _ in 0..20 {
        let (status, _, _) = get(a.bound.upstreams["b"], request("GET", "/order", "b", b"")).await;
        assert_eq!(status, 200, "a request never waits for the exporter");
    }
    // a made 40 spans; its exporter holds one call open, its queue one span.
    let m = metrics(&a).await;
    let dropped: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("hopwise_spans_dropped_total "))
        .unwrap_or_else(|| panic!("no hopwise_spans_dropped_total in\n{m}"))
        .parse()
        .unwrap();
    assert!(dropped >= 30, "{dropped} of 40 spans dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_caller_gives_up_leaves_spans_saying_how_it_ended() {
    let rx = otlp::grpc_receiver().await;
    let mesh = chain_mesh(rx.addr.unwrap(), "grpc", "100%");
    let chain = chain(&mesh, &["traceparent"], hanging()).await;
    // a's app has 150 ms: a answers 504 then; everything below it was working for nobody.
    assert_eq!(order(&chain, &[("x-hopwise-timeout-ms", "150")]).await, 504);
    let spans = rx.wait_for(6).await;
    assert_eq!(spans.len(), 6, "{spans:#?}");
    // b's request ends with a's cut, or a moment before it: the time left travels rounded down
    // to the millisecond, so b's proxy's own trimmed deadline for the call to c can fire first,
    // and b's app passes that 504 up before a's cut arrives. Cut, it is `caller-deadline` — or
    // `caller-gone` on a loaded machine, where a's proxy read the time left before a slow
    // handshake to b, so b believes it had longer (`recorded.rs`'s `Ended::at`, unit-tested).
    // Either way its span says how it ended.
    let b_in = one(&spans, "b", "in");
    match b_in.attr("http.response.status_code") {
        "" => assert!(
            ["caller-deadline", "caller-gone"].contains(&b_in.attr("error.type")),
            "{b_in:#?}"
        ),
        "504" => assert_eq!(b_in.attr("error.type"), "504", "{b_in:#?}"),
        other => panic!("b answered {other}: {b_in:#?}"),
    }
    assert!(b_in.error);
    // c's proxy was told the time left too (b's app passed no deadline, but b's proxy did).
    let c_in = one(&spans, "c", "in");
    assert_ne!(c_in.attr("error.type"), "", "{c_in:#?}");
    assert_eq!(c_in.attr("http.response.status_code"), "");
    let a_out = one(&spans, "a", "out");
    assert_eq!(a_out.attr("http.response.status_code"), "504");
    // A's own answer: an error of the client span, typed by the proxy's reason.
    assert_eq!(a_out.attr("error.type"), "deadline-exceeded", "{a_out:#?}");
    assert_eq!(a_out.attr("hopwise.local_reply"), "deadline-exceeded");
    // a's try timed out at the deadline; b's was cut when its request ended, a span too.
    let a_try = one(&spans, "a", "try 1");
    assert_eq!(a_try.attr("hopwise.outcome"), "timeout", "{a_try:#?}");
    // b's try to c ends at the same moment: by its own trimmed timeout, or cut with its
    // request, whichever comes first — a span either way.
    let b_try = one(&spans, "b", "try 1");
    assert!(
        ["cut", "timeout"].contains(&b_try.attr("hopwise.outcome")) && b_try.error,
        "{b_try:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_leaves_spans_and_the_try_it_cut() {
    let rx = otlp::grpc_receiver().await;
    let mesh = chain_mesh(rx.addr.unwrap(), "grpc", "100%");
    let chain = chain(&mesh, &["traceparent"], hanging()).await;
    // a's app closes its connection after 200 ms, with no deadline said: gone, not late.
    abandon(
        chain.a.bound.upstreams["b"],
        "/order/1",
        "",
        Duration::from_millis(200),
    )
    .await;
    let spans = rx.wait_for(6).await;
    assert_eq!(spans.len(), 6, "{spans:#?}");
    let a_out = one(&spans, "a", "out");
    assert_eq!(a_out.attr("error.type"), "caller-gone", "{a_out:#?}");
    let a_try = one(&spans, "a", "try 1");
    assert_eq!(
        (a_try.attr("hopwise.outcome"), a_try.attr("error.type")),
        ("cut", "caller-gone"),
        "{a_try:#?}"
    );
    assert_eq!(a_try.parent, a_out.span_id);
    let b_in = one(&spans, "b", "in");
    assert_eq!(b_in.attr("error.type"), "caller-gone", "{b_in:#?}");
    assert!(b_in.end - b_in.start >= 150_000_000, "{b_in:#?}");
}

/// A request the callee's own routes took: the caller's span names the route and the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_requests_span_names_its_route_and_rule() {
    let rx = otlp::grpc_receiver().await;
    let mesh = format!(
        r#"
mesh:
  name: t
  trust_domain: test.local
  tracing: {{ collector: '{}', protocol: grpc, sampling: '100%' }}
services:
  a: {{ calls: {{ b: {{ timeout: 2s }} }} }}
  b:
    routes:
      canary:
        rules:
          - name: beta
            matches: [{{ headers: [{{ name: x-beta, value: "1" }}] }}]
            backends: [{{ service: b }}]
"#,
        rx.addr.unwrap()
    );
    let f = Fixture::new(&mesh);
    let app = backend(failing_first(0)).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let mut req = request("GET", "/x", "b", b"");
    req.headers_mut().insert("x-beta", "1".parse().unwrap());
    assert_eq!(get(a.bound.upstreams["b"], req).await.0, 200);
    let spans = rx.wait_for(2).await;
    let out = one(&spans, "a", "out");
    assert_eq!(
        (out.attr("hopwise.http_route"), out.attr("hopwise.rule")),
        ("canary", "beta")
    );
}
