//! Trace context through real proxies over real mutual TLS: what the app behind the callee's
//! proxy receives, for W3C and B3 sent by the caller's app, and when nothing is sent.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::sync::Arc;

use bytes::Bytes;
use hopwise_api::trace_context::TraceContext;
use http::{HeaderMap, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use support::*;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const APP_SPAN: &str = "00f067aa0ba902b7";

fn mesh(tracing: &str) -> String {
    format!(
        "
mesh:
  name: t
  trust_domain: test.local
{tracing}
services:
  a:
    calls:
      b: {{ timeout: 2s }}
  b: {{}}
"
    )
}

/// Answers with every trace header it received, one `name: value` a line.
fn trace_echo() -> Handler {
    Arc::new(|req: Request<Incoming>| {
        Box::pin(async move {
            let mut text = String::new();
            for name in [
                "traceparent",
                "tracestate",
                "b3",
                "x-b3-traceid",
                "x-b3-spanid",
                "x-b3-sampled",
            ] {
                if let Some(v) = req.headers().get(name) {
                    text.push_str(&format!("{name}: {}\n", v.to_str().unwrap()));
                }
            }
            Response::new(Full::new(Bytes::from(text)))
        })
    })
}

/// What b's app received when a's app sent `headers` through both proxies.
async fn through_two(tracing: &str, headers: &[(&str, &str)]) -> HeaderMap {
    let app = backend(trace_echo()).await;
    let f = Fixture::new(&mesh(tracing));
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let mut req = request("GET", "/x", "b", b"");
    for (k, v) in headers {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let (status, _, body) = get(a.bound.upstreams["b"], req).await;
    assert_eq!(status, 200, "{body}");
    drop((a, b));
    let mut got = HeaderMap::new();
    for line in body.lines() {
        let (k, v) = line.split_once(": ").unwrap();
        got.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w3c_from_the_app_reaches_the_next_app_under_the_callees_proxy_span() {
    let sent = format!("00-{TRACE}-{APP_SPAN}-01");
    let got = through_two("", &[("traceparent", &sent), ("tracestate", "v=1")]).await;
    let c = TraceContext::extract(&got).expect("b's app gets a traceparent");
    assert_eq!(c.trace_id.to_string(), TRACE, "one trace");
    assert_ne!(
        c.span_id.to_string(),
        APP_SPAN,
        "b's proxy put its own span in"
    );
    assert!(c.is_sampled());
    assert_eq!(got["tracestate"], "v=1", "tracestate passes untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_single_and_multi_come_out_as_they_went_in() {
    let got = through_two("", &[("b3", &format!("{TRACE}-{APP_SPAN}-1"))]).await;
    assert!(!got.contains_key("traceparent"), "{got:?}");
    let c = TraceContext::extract(&got).unwrap();
    assert_eq!(c.trace_id.to_string(), TRACE);
    assert_ne!(c.span_id.to_string(), APP_SPAN);

    let got = through_two(
        "",
        &[
            ("x-b3-traceid", TRACE),
            ("x-b3-spanid", APP_SPAN),
            ("x-b3-sampled", "0"),
        ],
    )
    .await;
    assert_eq!(got["x-b3-traceid"], TRACE);
    assert_eq!(got["x-b3-sampled"], "0");
    assert_ne!(got["x-b3-spanid"], APP_SPAN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_starts_where_none_arrives_only_under_mesh_tracing() {
    let got = through_two("", &[]).await;
    assert!(got.is_empty(), "no mesh.tracing: nothing added, {got:?}");

    let got = through_two("  tracing: { sampling: 100% }", &[]).await;
    let c = TraceContext::extract(&got).expect("a trace was started");
    assert!(c.is_sampled());
    let got = through_two("  tracing: { sampling: 0% }", &[]).await;
    let c = TraceContext::extract(&got).expect("an unsampled trace was started");
    assert!(
        !c.is_sampled(),
        "the decision travels, so nobody below samples it"
    );
}
