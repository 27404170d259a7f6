//! Real gRPC through the mesh: a tonic client calls a's proxy in h2c, a's proxy carries the call
//! to b's proxy over mutual TLS (HTTP/2 by ALPN), and b's proxy hands it to b's app, a tonic
//! server speaking h2c. Unary, server-streaming, client-streaming and bidirectional calls; error
//! statuses in trailers-only responses and in real trailers after messages; the proxy's own
//! answers when b's app is down or hangs past the route timeout.
//!
//! The service and its client are `support/ledger.rs`'s.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

#[path = "support/ledger.rs"]
mod ledger;
mod support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use hopwise_proxy::Running;
use ledger::*;
use support::*;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

// --- the mesh ---------------------------------------------------------------------------------

/// b speaks gRPC. Routes are gRPC methods, so metrics carry method names, and `Hang` has its
/// own short route timeout.
const MESH: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls:
      b:
        timeout: 5s
        routes:
          get: { path: /hopwise.test.Ledger/Get }
          hang: { path: /hopwise.test.Ledger/Hang, timeout: 300ms }
          ledger: { path: /hopwise.test.Ledger/ }
  b: { protocol: grpc }
";

struct Mesh {
    _f: Fixture,
    a: Running,
    b: Running,
    /// a's local port for b: where a's app sends its gRPC calls.
    port: SocketAddr,
}

/// a's proxy → (mTLS, h2) → b's proxy → `app` (h2c).
async fn mesh(app: SocketAddr) -> Mesh {
    let f = Fixture::new(MESH);
    let b = start(inbound(f.config("b"), app)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let port = a.bound.upstreams["b"];
    Mesh { _f: f, a, b, port }
}

fn hopwise_error(s: &Status) -> String {
    s.metadata()
        .get("x-hopwise-error")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned()
}

// --- tests ------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_call_arrives_with_the_callers_identity() {
    let (app, calls) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let member = bounded("Get", get_member(&mut c, "U-41")).await.unwrap();
    assert_eq!(member.id, "U-41");
    assert_eq!(member.balance, 12.5);
    assert_eq!(member.peer, "spiffe://test.local/service/a");
    // A second call on the same channel: pooled connections both ways.
    let member = bounded("Get", get_member(&mut c, "U-42")).await.unwrap();
    assert_eq!(member.id, "U-42");
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // The route is the method's name from the mesh file; the member number is nowhere.
    let text = metrics(&m.a).await;
    assert!(
        text.contains(r#"hopwise_requests_total{direction="outbound",service="b",route="get"} 2"#),
        "{text}"
    );
    assert!(!text.contains("U-41"), "{text}");
    let text = metrics(&m.b).await;
    assert!(
        text.contains(r#"hopwise_tls_handshakes_total{direction="inbound",result="ok"} 1"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_through_the_http_proxy_port_is_routed_by_authority() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.a.bound.outbound.unwrap(), "http://b").await;
    let member = bounded("Get", get_member(&mut c, "U-41")).await.unwrap();
    assert_eq!(member.peer, "spiffe://test.local/service/a");
    // An authority that names no upstream: UNIMPLEMENTED, with the proxy's reason.
    let mut c = client(m.a.bound.outbound.unwrap(), "http://nowhere").await;
    let err = bounded("Get", get_member(&mut c, "U-41"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert_eq!(hopwise_error(&err), "no-route");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_delivers_every_message_in_order() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let got = bounded("History", async {
        c.ready().await.unwrap();
        let mut stream = c
            .server_streaming(
                lookup("U-41", 500),
                rpc(HISTORY),
                ProstCodec::<Lookup, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        let mut got = Vec::new();
        while let Some(p) = stream.message().await.unwrap() {
            got.push(p);
        }
        got
    })
    .await;
    assert_eq!(got.len(), 500);
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p.seq as usize, i);
        assert_eq!(p.amount, i as f64 + 0.5);
    }
    // Not in `get`'s or `hang`'s route: the catch-all route of the service.
    let text = metrics(&m.a).await;
    assert!(
        text.contains(
            r#"hopwise_requests_total{direction="outbound",service="b",route="ledger"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stream_delivers_every_message() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let payments: Vec<Payment> = (0..300)
        .map(|seq| Payment {
            seq,
            amount: 1.0,
            blob: Vec::new(),
        })
        .collect();
    let receipt = bounded("Pay", async {
        c.ready().await.unwrap();
        c.client_streaming(
            tonic::Request::new(tokio_stream::iter(payments)),
            rpc(PAY),
            ProstCodec::<Payment, Receipt>::default(),
        )
        .await
        .unwrap()
        .into_inner()
    })
    .await;
    assert_eq!(receipt.seqs, (0..300).collect::<Vec<u32>>());
    assert_eq!(receipt.total, 300.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidirectional_stream_answers_each_message_before_the_next_is_sent() {
    // Ping-pong: the client sends the next payment only after the previous one's echo came
    // back, so a proxy that buffered either direction until its end would wedge here.
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    bounded("Echo", async {
        let (tx, rx) = tokio::sync::mpsc::channel::<Payment>(1);
        c.ready().await.unwrap();
        tx.send(Payment {
            seq: 0,
            amount: 1.0,
            blob: Vec::new(),
        })
        .await
        .unwrap();
        let mut replies = c
            .streaming(
                tonic::Request::new(ReceiverStream::new(rx)),
                rpc(ECHO),
                ProstCodec::<Payment, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        for seq in 0..50u32 {
            let reply = replies.message().await.unwrap().unwrap();
            assert_eq!(reply.seq, seq);
            assert_eq!(reply.amount, f64::from(seq + 1) * 2.0);
            if seq + 1 < 50 {
                tx.send(Payment {
                    seq: seq + 1,
                    amount: f64::from(seq + 2),
                    blob: Vec::new(),
                })
                .await
                .unwrap();
            }
        }
        drop(tx);
        assert!(replies.message().await.unwrap().is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_cross_every_hop_both_ways() {
    // 3 MiB each way (tonic's default limit is 4 MiB): far past HTTP/2's initial 64 KiB
    // windows on each of the three connections.
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let blob: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let sent: Vec<Payment> = (0..3)
        .map(|seq| Payment {
            seq,
            amount: 1.0,
            blob: blob.clone(),
        })
        .collect();
    let got = bounded("Echo", async {
        c.ready().await.unwrap();
        let mut replies = c
            .streaming(
                tonic::Request::new(tokio_stream::iter(sent)),
                rpc(ECHO),
                ProstCodec::<Payment, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        let mut got = Vec::new();
        while let Some(p) = replies.message().await.unwrap() {
            got.push(p);
        }
        got
    })
    .await;
    assert_eq!(got.len(), 3);
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p.seq as usize, i);
        assert_eq!(p.amount, 2.0);
        assert!(
            p.blob == blob,
            "message {i}: {} bytes came back",
            p.blob.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_statuses_from_the_server_arrive_intact() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;

    // Trailers-only responses (the status in the response headers).
    let err = bounded("Get", get_member(&mut c, "U-0")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert_eq!(err.message(), "no such member");
    assert_eq!(
        hopwise_error(&err),
        "-",
        "the app's status, not the proxy's"
    );

    let err = bounded("Get", get_member(&mut c, "offline"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(err.message(), "the ledger is offline");

    // grpc-message is percent-encoded on the wire; it must come out as the server wrote it.
    let err = bounded("Get", get_member(&mut c, "ü")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(err.message(), "üye yok → 100% sure");

    // A status in real trailers, after messages, with trailing metadata.
    let (got, status) = bounded("History", async {
        c.ready().await.unwrap();
        let mut stream = c
            .server_streaming(
                lookup("broken", 3),
                rpc(HISTORY),
                ProstCodec::<Lookup, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        let mut got = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(p)) => got.push(p.seq),
                Ok(None) => panic!("the stream ended without the server's status"),
                Err(status) => break (got, status),
            }
        }
    })
    .await;
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(status.message(), "the ledger went away");
    assert_eq!(
        status
            .metadata()
            .get("x-ledger-cause")
            .and_then(|v| v.to_str().ok()),
        Some("disk"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_is_down_is_unavailable() {
    // b's proxy runs; b's app does not.
    let m = mesh(closed_port()).await;
    let mut c = client(m.port, "http://b").await;
    let err = bounded("Get", get_member(&mut c, "U-41"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(hopwise_error(&err), "connect-refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_is_down_is_unavailable() {
    // Nothing listens where a's proxy expects b's.
    let f = Fixture::new(MESH);
    let a = start(outbound(f.config("a"), &[("b", closed_port())])).await;
    let mut c = client(a.bound.upstreams["b"], "http://b").await;
    let err = bounded("Get", get_member(&mut c, "U-41"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(hopwise_error(&err), "connect-refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_hangs_meets_the_route_timeout_as_deadline_exceeded() {
    let (app, calls) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let err = bounded("Hang", async {
        c.ready().await.unwrap();
        c.unary(
            lookup("U-41", 0),
            rpc(HANG),
            ProstCodec::<Lookup, Member>::default(),
        )
        .await
    })
    .await
    .unwrap_err();
    // The hopwise preset answers its own timeouts with DEADLINE_EXCEEDED.
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert_eq!(hopwise_error(&err), "route-timeout");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the call reached the app");
    // The channel and the mesh still serve after a timed-out stream.
    let member = bounded("Get", get_member(&mut c, "U-41")).await.unwrap();
    assert_eq!(member.id, "U-41");
    let text = metrics(&m.a).await;
    assert!(
        text.contains(r#"hopwise_local_replies_total{direction="outbound",service="b",reason="route-timeout"} 1"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_timeout_is_not_counted_as_a_success() {
    let (app, _) = ledger_app().await;
    let m = mesh(app).await;
    let mut c = client(m.port, "http://b").await;
    let err = bounded("Hang", async {
        c.ready().await.unwrap();
        c.unary(
            lookup("U-41", 0),
            rpc(HANG),
            ProstCodec::<Lookup, Member>::default(),
        )
        .await
    })
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    // The proxy itself gave up on this call; today the series below reads 1.
    let text = metrics(&m.a).await;
    assert!(
        !text.contains(
            r#"hopwise_responses_total{direction="outbound",service="b",route="hang",class="2xx"} 1"#
        ),
        "{text}"
    );
}

/// b's calls retried on UNAVAILABLE (a gRPC condition: the proxy reads a response ahead to its
/// trailers before it decides).
const RETRYING: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls:
      b: { timeout: 5s, idempotent: true, retries: { count: 2, on: [unavailable] } }
  b: { protocol: grpc }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidirectional_stream_progresses_under_a_grpc_retry_policy() {
    let (app, _) = ledger_app().await;
    let f = Fixture::new(RETRYING);
    let b = start(inbound(f.config("b"), app)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let mut c = client(a.bound.upstreams["b"], "http://b").await;
    bounded("Echo under a retry policy", async {
        let (tx, rx) = tokio::sync::mpsc::channel::<Payment>(1);
        c.ready().await.unwrap();
        tx.send(Payment {
            seq: 0,
            amount: 1.0,
            blob: Vec::new(),
        })
        .await
        .unwrap();
        let mut replies = c
            .streaming(
                tonic::Request::new(ReceiverStream::new(rx)),
                rpc(ECHO),
                ProstCodec::<Payment, Payment>::default(),
            )
            .await
            .unwrap()
            .into_inner();
        // The first echo must arrive while the client still holds the stream open.
        let first = replies.message().await.unwrap().unwrap();
        assert_eq!(first.seq, 0);
        drop(tx);
        assert!(replies.message().await.unwrap().is_none());
    })
    .await;
}
