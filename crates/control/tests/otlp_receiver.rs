//! The OTLP receiver's bounds, for real: a tonic client exports to it over TCP; an export past
//! the size limit is refused and never reaches the sink; a connection that never finishes its
//! HTTP/2 preface is closed; past the connection cap a new connection is closed at once. The
//! limits are set small so each bound is reached quickly; nothing here measures time.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopwise_control::otlp_receiver::{self, Limits, ReceivedSpan};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use support::closed;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

fn text(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// One span of `service`, its path `path`.
fn export(service: &str, path: &str) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![text("service.name", service)],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![7; 16],
                    span_id: vec![1; 8],
                    name: format!("{service} inbound"),
                    kind: 2,
                    start_time_unix_nano: 1_000,
                    end_time_unix_nano: 5_000,
                    attributes: vec![text("url.path", path)],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

type Kept = Arc<Mutex<Vec<ReceivedSpan>>>;

async fn receiver(limits: Limits) -> (std::net::SocketAddr, Kept) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kept = Kept::default();
    let sink = kept.clone();
    let running = otlp_receiver::spawn(
        listener,
        limits,
        Arc::new(move |req| sink.lock().unwrap().extend(otlp_receiver::spans_of(req))),
    )
    .unwrap();
    (running.addr, kept)
}

fn small() -> Limits {
    Limits {
        connections: 2,
        concurrent_exports: 1,
        max_message: 2048,
        request_timeout: Duration::from_secs(5),
        idle: Duration::from_millis(300),
    }
}

#[tokio::test]
async fn an_export_within_the_limits_is_kept_and_an_oversized_one_refused() {
    let (addr, kept) = receiver(small()).await;
    let mut client = TraceServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client.export(export("a", "/ok")).await.unwrap();
    {
        let got = kept.lock().unwrap();
        assert_eq!(got.len(), 1);
        let s = &got[0];
        assert_eq!((s.service.as_str(), s.attr("url.path")), ("a", "/ok"));
        assert_eq!(
            (s.trace_id.as_str(), s.span_id.as_str()),
            (&*"07".repeat(16), &*"01".repeat(8))
        );
        assert_eq!(
            (s.kind, s.start, s.end, s.parent.as_str()),
            (2, 1_000, 5_000, "")
        );
    }
    let big = export("b", &"x".repeat(4096));
    let refused = client.export(big).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
    assert_eq!(
        kept.lock().unwrap().len(),
        1,
        "the oversized export never reached the sink"
    );
    // The connection still serves.
    client.export(export("c", "/ok")).await.unwrap();
    assert_eq!(kept.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_preface_is_closed() {
    let (addr, kept) = receiver(small()).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    // Half of HTTP/2's preface, and then nothing.
    tcp.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    assert!(closed(&mut tcp).await, "the receiver closed it");
    assert!(kept.lock().unwrap().is_empty());
}

#[tokio::test]
async fn past_the_connection_cap_a_new_connection_is_closed_at_once() {
    let (addr, _) = receiver(Limits {
        idle: Duration::from_secs(60),
        ..small()
    })
    .await;
    let _a = TcpStream::connect(addr).await.unwrap();
    let _b = TcpStream::connect(addr).await.unwrap();
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed(&mut third).await,
        "the third of a cap of two is closed"
    );
    // A place comes back when one closes: an export gets through again.
    drop(_a);
    drop(_b);
    let mut client = None;
    for _ in 0..50 {
        if let Ok(mut c) = TraceServiceClient::connect(format!("http://{addr}")).await
            && c.export(export("a", "/")).await.is_ok()
        {
            client = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        client.is_some(),
        "an export got through once the two had gone"
    );
}
