//! A GRPCRoute through real proxies over mutual TLS to real gRPC apps (the Gateway API's
//! mesh/grpcroute cases, re-expressed): a tonic client calls `ledger` through its proxy; the
//! rule matching the method `Get` sends it to `ledger-v2`'s app, every other method to
//! `ledger-v1`'s, and a header match takes precedence as the spec ranks it.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

#[path = "support/ledger.rs"]
mod ledger;
mod support;

use std::sync::atomic::Ordering;

use ledger::*;
use support::*;
use tonic::metadata::MetadataValue;
use tonic_prost::ProstCodec;

const MESH: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls: { ledger: { timeout: 5s }, ledger-v1: { timeout: 5s }, ledger-v2: { timeout: 5s } }
  ledger:
    protocol: grpc
    routes:
      by-method:
        rules:
          - matches: [{ method: { service: hopwise.test.Ledger, method: Get } }]
            backends: [{ service: ledger-v2 }]
          - matches: [{ method: { service: hopwise.test.Ledger }, headers: [{ name: x-beta, value: '1' }] }]
            backends: [{ service: ledger-v2 }]
          - backends: [{ service: ledger-v1 }]
  ledger-v1: { protocol: grpc }
  ledger-v2: { protocol: grpc }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_route_sends_each_method_to_its_rules_backend() {
    let f = Fixture::new(MESH);
    let (v1_app, v1_calls) = ledger_app().await;
    let (v2_app, v2_calls) = ledger_app().await;
    let v1 = start(inbound(f.config("ledger-v1"), v1_app)).await;
    let v2 = start(inbound(f.config("ledger-v2"), v2_app)).await;
    let a = start(outbound(
        f.config("a"),
        &[
            ("ledger", closed_port()),
            ("ledger-v1", v1.bound.inbound.unwrap()),
            ("ledger-v2", v2.bound.inbound.unwrap()),
        ],
    ))
    .await;
    let mut c = client(a.bound.upstreams["ledger"], "http://ledger").await;
    let calls = || {
        (
            v1_calls.load(Ordering::SeqCst),
            v2_calls.load(Ordering::SeqCst),
        )
    };

    // `Get` takes the first rule: ledger-v2's app answers, with a's identity.
    let member = bounded("Get", get_member(&mut c, "U-7")).await.unwrap();
    assert_eq!(member.peer, "spiffe://test.local/service/a");
    assert_eq!(calls(), (0, 1));

    // `History` matches no method rule: ledger-v1, every streamed message intact.
    c.ready().await.unwrap();
    let mut stream = bounded(
        "History",
        c.server_streaming(
            lookup("U-7", 3),
            rpc(HISTORY),
            ProstCodec::<Lookup, Payment>::default(),
        ),
    )
    .await
    .unwrap()
    .into_inner();
    let mut seqs = Vec::new();
    while let Some(p) = bounded("a message", stream.message()).await.unwrap() {
        seqs.push(p.seq);
    }
    assert_eq!(seqs, [0, 1, 2]);
    assert_eq!(calls(), (1, 1));

    // The same method with `x-beta: 1` takes the header rule: ledger-v2.
    let mut req = lookup("U-7", 2);
    req.metadata_mut()
        .insert("x-beta", MetadataValue::from_static("1"));
    c.ready().await.unwrap();
    let resp = bounded(
        "History with x-beta",
        c.server_streaming(req, rpc(HISTORY), ProstCodec::<Lookup, Payment>::default()),
    )
    .await
    .unwrap();
    let mut stream = resp.into_inner();
    while bounded("a message", stream.message())
        .await
        .unwrap()
        .is_some()
    {}
    assert_eq!(calls(), (1, 2));
}
