//! The shop is one trace: `hopwise up` runs examples/shop/mesh.yaml with `mesh.tracing` toward
//! a real OTLP receiver the test starts (the lab's stand-in collector, on the official OTLP
//! protobuf definitions); one request at the front door yields one trace whose spans cross every
//! service of the shop, each with the right parent: a proxy's span → (the app, which passed the
//! context on) → the next proxy's span, down to inventory.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod common;

use std::path::Path;
use std::time::Duration;

use common::http_get;
use common::up::Up;
use hopwise_lab::samples::collector::{Collector, Got};

/// The shop's mesh file, tracing every request to `collector`.
fn traced_shop(collector: std::net::SocketAddr) -> String {
    let shop = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop/mesh.yaml");
    let text = std::fs::read_to_string(shop).unwrap();
    let tracing = format!("mesh:\n  tracing: {{ collector: '{collector}', sampling: 100% }}\n");
    assert!(text.contains("\nmesh:\n"));
    text.replacen("mesh:\n", &tracing, 1)
}

/// `service`'s span that is `which`: `in` (its server span), `out` (its call's client span) or
/// `try 1`. A call and its tries share the conventions' name, so kind and `hopwise.try` tell.
fn one<'s>(spans: &[&'s Got], service: &str, which: &str) -> &'s Got {
    let found: Vec<&&Got> = spans
        .iter()
        .filter(|s| s.service == service)
        .filter(|s| match which {
            "in" => s.kind == SERVER,
            "out" => s.kind == CLIENT && s.attr("hopwise.try").is_empty(),
            t => t.strip_prefix("try ") == Some(s.attr("hopwise.try")),
        })
        .collect();
    assert_eq!(found.len(), 1, "{service} {which}: {spans:#?}");
    found[0]
}

const SERVER: i32 = 2;
const CLIENT: i32 = 3;

#[test]
fn one_request_at_the_front_door_is_one_trace_across_the_shop() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let collector = rt.block_on(Collector::grpc(true)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.yaml");
    std::fs::write(&file, traced_shop(collector.addr)).unwrap();
    let _up = Up::start(dir.path(), &file, &[]);
    let samples: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".hopwise/shop/samples.json")).unwrap(),
    )
    .unwrap();
    let front = samples["services"]["frontend"]["copies"][0]["app"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // One request, as a browser would send it: straight to the entry's app.
    let resp = http_get(front, "/", "frontend");
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");

    let spans = rt.block_on(collector.wait_for(9, Duration::from_secs(20)));
    let root = spans
        .iter()
        .find(|s| s.service == "frontend" && s.kind == CLIENT && s.parent.is_empty())
        .unwrap_or_else(|| panic!("no span of frontend's call: {spans:#?}"));
    // The browser sent no context: the trace starts at frontend's outbound proxy.
    let trace: Vec<&Got> = spans
        .iter()
        .filter(|s| s.trace_id == root.trace_id)
        .collect();
    assert_eq!(trace.len(), 9, "{trace:#?}");

    // frontend's proxy → checkout's → (checkout's app) → checkout's proxy → pricing's → …
    let mut parent = String::new();
    for (caller, callee) in [
        ("frontend", "checkout"),
        ("checkout", "pricing"),
        ("pricing", "inventory"),
    ] {
        let call = one(&trace, caller, "out");
        assert_eq!(call.attr("hopwise.upstream"), callee);
        // service.instance.id names the copy whose proxy made the call (`pricing[1]`).
        assert!(
            call.instance.starts_with(&format!("{caller}[")) && call.instance.ends_with(']'),
            "{call:#?}"
        );
        assert_eq!(call.kind, CLIENT);
        assert_eq!(
            call.parent, parent,
            "{caller}'s call is a child of the request its app served: {trace:#?}"
        );
        let try1 = one(&trace, caller, "try 1");
        assert_eq!(try1.parent, call.span_id);
        let served = one(&trace, callee, "in");
        assert_eq!(served.kind, SERVER);
        assert_eq!(
            served.parent, try1.span_id,
            "the callee's span is the try's child"
        );
        assert_eq!(
            served.attr("hopwise.peer"),
            format!("spiffe://shop.local/service/{caller}")
        );
        parent = served.span_id.clone();
    }
    assert!(trace.iter().all(|s| !s.error), "{trace:#?}");
    let services: std::collections::BTreeSet<&str> =
        trace.iter().map(|s| s.service.as_str()).collect();
    assert_eq!(
        services.into_iter().collect::<Vec<_>>(),
        ["checkout", "frontend", "inventory", "pricing"]
    );
}
