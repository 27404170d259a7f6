use std::time::Duration;

use http::{HeaderMap, HeaderValue};

use hopwise_api::trace_context::TraceContext;

use super::*;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn w3c(span: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let v = format!("00-{TRACE}-{span}-01");
    h.insert("traceparent", HeaderValue::from_str(&v).unwrap());
    h
}

/// The request arriving at the inbound side: its span (`trace::inbound`), then its entry.
fn arrive<'l>(
    links: &'l Links,
    headers: &mut HeaderMap,
    deadline: Option<Instant>,
) -> Option<Serving<'l>> {
    let span = crate::trace::inbound(None, headers);
    links.serve(span.as_ref(), headers, deadline, false)
}

/// A call of the app's at the outbound side: its span (`trace::outbound`), then the match.
fn call(links: &Links, mut headers: HeaderMap) -> Option<Arc<Served>> {
    let span = crate::trace::outbound(None, &mut headers);
    links.find(span.as_ref())
}

/// The headers the app's call carries when it passes the request's context on unchanged.
fn passed_on(inbound: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("traceparent", inbound["traceparent"].clone());
    h
}

#[test]
fn the_app_sees_a_span_of_the_proxys_own_and_its_calls_find_the_request() {
    let links = Links::new(8);
    let mut inbound = w3c("00f067aa0ba902b7");
    let serving = arrive(&links, &mut inbound, None).unwrap();
    let seen = TraceContext::extract(&inbound).unwrap();
    assert_eq!(seen.trace_id.to_string(), TRACE);
    assert_ne!(seen.span_id.to_string(), "00f067aa0ba902b7");
    let found = call(&links, passed_on(&inbound)).unwrap();
    assert!(Arc::ptr_eq(&found, &serving.served));
    // An OpenTelemetry app's own child span: matched on the trace alone, one request in flight.
    assert!(call(&links, w3c("1111111111111111")).is_some());
    drop(serving);
    assert!(links.is_empty());
    assert!(call(&links, passed_on(&inbound)).is_none());
}

#[test]
fn b3_links_too() {
    let links = Links::new(8);
    let mut inbound = HeaderMap::new();
    let b3 = format!("{TRACE}-00f067aa0ba902b7-1");
    inbound.insert("b3", HeaderValue::from_str(&b3).unwrap());
    let _serving = arrive(&links, &mut inbound, None).unwrap();
    let mut from_app = HeaderMap::new();
    from_app.insert("b3", inbound["b3"].clone());
    assert!(call(&links, from_app).is_some());
}

#[test]
fn two_requests_of_one_trace_link_only_by_their_own_span() {
    let links = Links::new(8);
    let (mut a, mut b) = (w3c("00f067aa0ba902b7"), w3c("00f067aa0ba902b8"));
    let sa = arrive(&links, &mut a, None).unwrap();
    let sb = arrive(&links, &mut b, None).unwrap();
    assert!(Arc::ptr_eq(
        &call(&links, passed_on(&a)).unwrap(),
        &sa.served
    ));
    assert!(Arc::ptr_eq(
        &call(&links, passed_on(&b)).unwrap(),
        &sb.served
    ));
    // A span nobody here made: which of the two? Not linked.
    assert!(call(&links, w3c("1111111111111111")).is_none());
    drop(sa);
    // One left: the trace names it again.
    let only = call(&links, w3c("1111111111111111")).unwrap();
    assert!(Arc::ptr_eq(&only, &sb.served));
}

#[test]
fn without_trace_context_nothing_is_linked_or_kept() {
    let links = Links::new(8);
    let mut h = HeaderMap::new();
    h.insert("x-other", HeaderValue::from_static("1"));
    assert!(arrive(&links, &mut h, None).is_none());
    assert!(call(&links, h.clone()).is_none());
    assert_eq!(h.len(), 1);
    assert!(links.is_empty());
}

#[test]
fn the_table_is_bounded_and_entries_end_with_their_requests() {
    let links = Links::new(2);
    let mut held = Vec::new();
    for i in 0..3 {
        let mut h = w3c(&format!("00f067aa0ba902b{i}"));
        held.push(arrive(&links, &mut h, None));
    }
    assert!(held[0].is_some() && held[1].is_some() && held[2].is_none());
    assert_eq!(links.len(), 2);
    held.clear();
    assert!(links.is_empty());
    // Many requests, one after another: nothing stays behind.
    for _ in 0..1000 {
        let mut h = w3c("00f067aa0ba902b7");
        let mut s = arrive(&links, &mut h, None).unwrap();
        s.answered(http::StatusCode::OK, &mut HeaderMap::new());
    }
    assert!(links.is_empty());
    assert!(links.lock().by_trace_is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_call_knows_the_time_left_and_when_the_caller_went_away() {
    let links = Links::new(8);
    let mut inbound = w3c("00f067aa0ba902b7");
    let deadline = Instant::now() + Duration::from_millis(300);
    let serving = arrive(&links, &mut inbound, Some(deadline)).unwrap();
    let served = call(&links, passed_on(&inbound)).unwrap();
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(served.left(), Some(Duration::from_millis(200)));
    let waiting = tokio::spawn({
        let s = served.clone();
        async move { s.gone().await }
    });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    // The inbound request ends without the app's answer: its caller went away.
    drop(serving);
    waiting.await.unwrap();
    // Once gone, a late call sees it at once.
    served.gone().await;
}

#[test]
fn a_failed_answer_is_marked_when_a_call_for_it_came_back_retried_and_failed() {
    let links = Links::new(8);
    let mut inbound = w3c("00f067aa0ba902b7");
    let mut serving = arrive(&links, &mut inbound, None).unwrap();
    let served = call(&links, passed_on(&inbound)).unwrap();
    // A call that was not retried tells nothing.
    served.report(&HeaderMap::new());
    let failed = http::StatusCode::SERVICE_UNAVAILABLE;
    let mut answer = HeaderMap::new();
    serving.answered(failed, &mut answer);
    assert!(!answer.contains_key(EXHAUSTED_HEADER));

    let mut marked = HeaderMap::new();
    marked.insert(EXHAUSTED_HEADER, HeaderValue::from_static("3"));
    served.report(&marked);
    assert_eq!(served.exhausted(), Some(3));
    let mut answer = HeaderMap::new();
    serving.answered(failed, &mut answer);
    assert_eq!(answer[EXHAUSTED_HEADER], "3");
    // The app turned the failure into a success: nothing to mark.
    let mut answer = HeaderMap::new();
    serving.answered(http::StatusCode::OK, &mut answer);
    assert!(!answer.contains_key(EXHAUSTED_HEADER));
}

#[test]
fn success_is_never_marked_and_grpc_failures_are() {
    let grpc = |status: Option<&'static str>| {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        if let Some(s) = status {
            h.insert("grpc-status", HeaderValue::from_static(s));
        }
        h
    };
    let ok = http::StatusCode::OK;
    assert!(succeeded(ok, &grpc(Some("0"))));
    assert!(!succeeded(ok, &grpc(Some("14"))));
    // The status is still to come in trailers: the head must carry the mark in case.
    assert!(!succeeded(ok, &grpc(None)));
    assert!(succeeded(ok, &HeaderMap::new()));
    assert!(!succeeded(http::StatusCode::BAD_GATEWAY, &HeaderMap::new()));
}
