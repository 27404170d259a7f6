//! A copy's labels over the real gRPC server on 127.0.0.1: registered with its lease, delivered
//! beside its endpoint in a subscriber's snapshots (whole, then as deltas that carry only what
//! changed), and a bad label refused with INVALID_ARGUMENT naming it, nothing registered.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use hopwise_control::conn::Limits;
use hopwise_control::pb;
use tonic::Streaming;

mod support;
use support::start;

/// Long enough never to fire on a slow machine; the point is that it happens at all.
const DEADLINE: Duration = Duration::from_secs(20);

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The next snapshot of `stream`, merged onto `held` as a proxy merges it.
async fn next(stream: &mut Streaming<pb::Snapshot>, held: &mut pb::Snapshot) -> pb::Snapshot {
    let s = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .expect("a snapshot within the deadline")
        .unwrap()
        .expect("the stream ended");
    *held = hopwise_api::delta::apply(held, s.clone()).unwrap();
    s
}

fn b(s: &pb::Snapshot) -> pb::Upstream {
    s.upstreams
        .iter()
        .find(|u| u.service == "b")
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_copys_labels_reach_a_subscriber_and_bad_ones_are_refused() {
    let plant = start(Limits::default()).await;
    let (token_a, token_b) = (plant.token("a"), plant.token("b"));
    let mut c = plant.client().await;
    let register = |inbound: &str, labels: BTreeMap<String, String>| pb::RegisterRequest {
        token: token_b.clone(),
        inbound_addr: inbound.into(),
        ttl_ms: 60_000,
        admin_addr: String::new(),
        labels,
    };

    // Refused, named, and nothing registered.
    for (bad, named) in [
        (labels(&[("bad key", "v2")]), "`bad key` is not a label key"),
        (
            labels(&[("version", "v 2")]),
            "label `version`: `v 2` is not a label value",
        ),
    ] {
        let err = c
            .register(register("127.0.0.1:7009", bad))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains(named), "{}", err.message());
    }
    let status = plant
        .client()
        .await
        .status(pb::StatusRequest {})
        .await
        .unwrap();
    let copies: usize = (status.into_inner().services.iter())
        .map(|s| s.copies.len())
        .sum();
    assert_eq!(copies, 0, "a refused registration leaves nothing");

    // `a` calls `b`: its proxy is told `b`'s copies with their labels.
    let mut stream = c
        .subscribe(pb::SubscribeRequest {
            service: "a".into(),
            token: token_a.clone(),
            proxy: "a-1".into(),
            admin_addr: String::new(),
            deltas: true,
        })
        .await
        .unwrap()
        .into_inner();
    let mut held = pb::Snapshot::default();
    next(&mut stream, &mut held).await;
    // A copy registered, then healthy: it serves.
    let mut serve = async |addr: &str, version: &str| {
        let lease = c
            .register(register(addr, labels(&[("version", version)])))
            .await
            .unwrap()
            .into_inner()
            .lease_id;
        c.set_health(pb::SetHealthRequest {
            lease_id: lease,
            healthy: true,
            token: token_b.clone(),
        })
        .await
        .unwrap();
    };
    serve("127.0.0.1:7001", "v1").await;
    serve("127.0.0.1:7002", "v2").await;
    while b(&held).endpoints.len() < 2 {
        let d = next(&mut stream, &mut held).await;
        // A delta carries the labels of the copies it adds, and no others.
        let added = b(&d);
        let labelled: Vec<&str> = added.labelled.iter().map(|l| l.endpoint.as_str()).collect();
        assert_eq!(labelled, added.endpoints, "{d:?}");
    }
    let whole = b(&held);
    assert_eq!(whole.endpoints, ["127.0.0.1:7001", "127.0.0.1:7002"]);
    assert_eq!(
        whole.labelled,
        [
            pb::LabelledEndpoint {
                endpoint: "127.0.0.1:7001".into(),
                labels: labels(&[("version", "v1")]),
            },
            pb::LabelledEndpoint {
                endpoint: "127.0.0.1:7002".into(),
                labels: labels(&[("version", "v2")]),
            },
        ]
    );

    // The copy at 7002 registers again (a restart) as v3: removed and added with its new labels.
    serve("127.0.0.1:7002", "v3").await;
    while b(&held)
        .labelled
        .iter()
        .all(|l| l.labels["version"] != "v3")
    {
        next(&mut stream, &mut held).await;
    }
    let relabelled = b(&held);
    assert_eq!(relabelled.endpoints, ["127.0.0.1:7001", "127.0.0.1:7002"]);
    assert_eq!(relabelled.labelled[1].labels, labels(&[("version", "v3")]));
}
