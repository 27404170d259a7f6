//! The real gRPC server on 127.0.0.1:0, driven by the real client over a real socket: a
//! certificate from a CSR made with rcgen, two copies registered and seen in a subscriber's
//! snapshots once healthy, one leaving when its 1 s lease expires and the other when it
//! deregisters, a new mesh file pushed, and a mesh file that `hopwise check` rejects refused
//! with its findings. Waits are generous deadlines, not timing assertions.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime};

use hopwise_control::api;
use hopwise_control::client;
use hopwise_control::pb;
use hopwise_control::plane::{ConfigFile, Options, Plane};
use hopwise_control::store::Store;
use rcgen::{CertificateParams, KeyPair, SanType};
use tonic::Streaming;
use x509_parser::extensions::GeneralName;

const SHOP: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  frontend:
    entry: { timeout: 3s }
    calls: { checkout: { timeout: 2s } }
  checkout:
    calls: { pricing: { timeout: 1s } }
  pricing: {}
";

/// The seed's retry chain with Istio's defaults: `hopwise check` finds retry-fanout errors.
const STORM: &str = "mesh: { name: shop, trust_domain: shop.local }
defaults: { preset: istio }
services:
  frontend:
    entry: { timeout: none }
    calls: { checkout: {} }
  checkout: { protocol: grpc, calls: { pricing: {} } }
  pricing: { protocol: grpc, calls: { inventory: {} } }
  inventory: { protocol: grpc }
";

/// Long enough never to fire on a slow machine; the point is that it happens at all.
const DEADLINE: Duration = Duration::from_secs(20);

async fn until(
    stream: &mut Streaming<pb::Snapshot>,
    what: &str,
    pred: impl Fn(&pb::Snapshot) -> bool,
) -> pb::Snapshot {
    let wait = async {
        loop {
            let s = stream.message().await.unwrap().expect("the stream ended");
            if pred(&s) {
                return s;
            }
        }
    };
    match tokio::time::timeout(DEADLINE, wait).await {
        Ok(s) => s,
        Err(_) => panic!("no snapshot where {what} within {DEADLINE:?}"),
    }
}

fn endpoints(s: &pb::Snapshot) -> Vec<String> {
    s.upstreams
        .iter()
        .find(|u| u.service == "pricing")
        .map(|u| u.endpoints.clone())
        .unwrap_or_default()
}

fn csr_for(key: &KeyPair, uri: &str) -> String {
    let mut params = CertificateParams::default();
    params.subject_alt_names = vec![SanType::URI(uri.to_owned().try_into().unwrap())];
    params.serialize_request(key).unwrap().pem().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let started = Plane::start(
        Store::open(dir.path()).unwrap(),
        Options {
            config: Some(ConfigFile {
                name: "mesh.yaml".into(),
                text: SHOP.into(),
            }),
            ca_files: None,
            cert_lifetime: Duration::from_secs(3600),
        },
        SystemTime::now(),
    )
    .unwrap();
    let token = |s: &str| started.plane.token(s).unwrap().to_owned();
    let (pricing, checkout) = (token("pricing"), token("checkout"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = api::spawn(started.plane, listener).unwrap();
    let server = client::Server::from_state(&running.addr.to_string(), dir.path()).unwrap();
    let mut c = client::connect(&server).await.unwrap();

    // --- identity: a CSR made by the proxy, signed with its SPIFFE identity -----------------
    let id = "spiffe://shop.local/service/pricing";
    let key = KeyPair::generate().unwrap();
    let issued = c
        .issue(pb::IssueRequest {
            csr_pem: csr_for(&key, id),
            token: pricing.clone(),
            proxy: "pricing-1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(issued.identity, id);
    assert_eq!(
        issued.trust_bundle_pem,
        std::fs::read_to_string(dir.path().join("ca.pem")).unwrap()
    );
    let (_, pem) = x509_parser::pem::parse_x509_pem(issued.cert_chain_pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap();
    assert_eq!(san.value.general_names, [GeneralName::URI(id)]);
    assert_eq!(cert.validity().not_after.timestamp(), issued.not_after_unix);
    assert_eq!(cert.public_key().raw, {
        use rcgen::PublicKeyData;
        key.subject_public_key_info()
    });
    // Refusals carry their reason.
    let err = c
        .issue(pb::IssueRequest {
            csr_pem: csr_for(&key, id),
            token: "hopwise-join-forged".into(),
            proxy: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert!(
        err.message().starts_with("unknown-token"),
        "{}",
        err.message()
    );
    let err = c
        .issue(pb::IssueRequest {
            csr_pem: csr_for(&key, "spiffe://shop.local/service/checkout"),
            token: pricing.clone(),
            proxy: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    assert!(
        err.message().starts_with("wrong-identity"),
        "{}",
        err.message()
    );

    // --- a subscriber: checkout's proxy, which calls pricing ---------------------------------
    let err = c
        .subscribe(pb::SubscribeRequest {
            service: "checkout".into(),
            token: pricing.clone(),
            proxy: String::new(),
            admin_addr: String::new(),
            // Whole snapshots, as a proxy that predates deltas asks.
            deltas: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    let mut stream = c
        .subscribe(pb::SubscribeRequest {
            service: "checkout".into(),
            token: checkout.clone(),
            proxy: "checkout-1".into(),
            admin_addr: String::new(),
            // Whole snapshots, as a proxy that predates deltas asks.
            deltas: false,
        })
        .await
        .unwrap()
        .into_inner();
    let first = until(&mut stream, "the first snapshot", |_| true).await;
    assert_eq!(first.config_version, 1);
    assert_eq!(first.mesh_yaml.as_deref(), Some(SHOP));
    assert_eq!(
        first.allowed_callers,
        ["spiffe://shop.local/service/frontend"]
    );
    assert!(endpoints(&first).is_empty());
    c.ack(pb::AckRequest {
        service: "checkout".into(),
        version: first.version,
        accepted: true,
        reason: String::new(),
        token: checkout.clone(),
        proxy: "checkout-1".into(),
        ..Default::default()
    })
    .await
    .unwrap();

    // --- two copies of pricing: seen once healthy ---------------------------------------------
    let register = |addr: &str, ttl_ms: u64| pb::RegisterRequest {
        token: pricing.clone(),
        inbound_addr: addr.into(),
        ttl_ms,
        admin_addr: String::new(),
        labels: Default::default(),
    };
    let short = c
        .register(register("127.0.0.1:7001", 1000))
        .await
        .unwrap()
        .into_inner();
    let long = c
        .register(register("127.0.0.1:7002", 60_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(short.ttl_ms, 1000);
    for lease in [long.lease_id, short.lease_id] {
        c.set_health(pb::SetHealthRequest {
            lease_id: lease,
            healthy: true,
            token: pricing.clone(),
        })
        .await
        .unwrap();
    }
    let both = until(&mut stream, "both copies are endpoints", |s| {
        endpoints(s) == ["127.0.0.1:7001", "127.0.0.1:7002"]
    })
    .await;
    assert!(both.version > first.version);

    // --- the 1 s lease is not renewed: that copy leaves -----------------------------------------
    let t = Instant::now();
    let one = until(&mut stream, "the expired copy is gone", |s| {
        endpoints(s) == ["127.0.0.1:7002"]
    })
    .await;
    println!(
        "the expired copy left the snapshot {:?} after the wait began",
        t.elapsed()
    );
    assert!(one.version > both.version);
    let err = c
        .renew(pb::LeaseRequest {
            lease_id: short.lease_id,
            token: pricing.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);

    // --- the other deregisters: gone at once --------------------------------------------------
    c.renew(pb::LeaseRequest {
        lease_id: long.lease_id,
        token: pricing.clone(),
    })
    .await
    .unwrap();
    c.deregister(pb::LeaseRequest {
        lease_id: long.lease_id,
        token: pricing.clone(),
    })
    .await
    .unwrap();
    let none = until(&mut stream, "no copy is left", |s| endpoints(s).is_empty()).await;

    // --- a new mesh file reaches the subscriber ------------------------------------------------
    let edited = SHOP.replace("timeout: 1s", "timeout: 800ms");
    let applied = client::apply(&server, &edited, "edited.yaml")
        .await
        .unwrap();
    assert!(applied.applied && !applied.unchanged, "{applied:?}");
    assert_eq!(applied.config_version, 2);
    let pushed = until(&mut stream, "config version 2 arrived", |s| {
        s.config_version == 2
    })
    .await;
    assert_eq!(pushed.mesh_yaml.as_deref(), Some(edited.as_str()));
    assert!(pushed.version > none.version);
    assert_eq!(pushed.version, applied.version);

    // --- a mesh file that `hopwise check` rejects never reaches a proxy -----------------------
    let refused = client::apply(&server, STORM, "storm.yaml").await.unwrap();
    assert!(!refused.applied);
    let text = client::render_apply(&refused);
    assert!(text.contains("retry-fanout"), "{text}");
    assert!(
        refused
            .findings
            .iter()
            .any(|f| f.code == "retry-fanout" && f.severity == "error")
    );
    let invalid = client::apply(&server, "services: {", "broken.yaml")
        .await
        .unwrap();
    assert!(!invalid.applied);
    assert!(
        invalid.diagnostics[0].starts_with("broken.yaml:"),
        "{:?}",
        invalid.diagnostics
    );

    // --- status --------------------------------------------------------------------------------
    c.ack(pb::AckRequest {
        service: "checkout".into(),
        version: pushed.version,
        accepted: true,
        reason: String::new(),
        token: checkout.clone(),
        proxy: "checkout-1".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let status = client::status(&server).await.unwrap();
    assert_eq!(status.config_version, 2, "the refused file changed nothing");
    assert_eq!(status.version, pushed.version);
    let proxy = |service: &str| {
        status
            .proxies
            .iter()
            .find(|p| p.service == service)
            .unwrap()
            .clone()
    };
    let cp = proxy("checkout");
    assert_eq!(cp.proxy, "checkout-1");
    assert!(cp.connected);
    assert_eq!(cp.last_acked_version, pushed.version);
    assert_eq!(cp.last_sent_version, pushed.version);
    assert!(cp.last_ack_accepted && cp.last_ack_unix_ms.is_some());
    assert_eq!(
        proxy("pricing").cert_not_after_unix,
        Some(issued.not_after_unix)
    );
    let now_ms = i64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let rendered = client::render_status(&status, now_ms);
    println!("{rendered}");
    assert!(rendered.contains("checkout-1"), "{rendered}");

    // --- shutdown ends the streams ---------------------------------------------------------------
    running.shutdown().await.unwrap();
    let end = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                other => return other.map(|_| ()),
            }
        }
    })
    .await
    .expect("the stream did not end on shutdown");
    let _ = end;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_whose_service_leaves_the_mesh_is_told_why() {
    let dir = tempfile::tempdir().unwrap();
    let started = Plane::start(
        Store::open(dir.path()).unwrap(),
        Options {
            config: Some(ConfigFile {
                name: "mesh.yaml".into(),
                text: SHOP.into(),
            }),
            ca_files: None,
            cert_lifetime: Duration::from_secs(3600),
        },
        SystemTime::now(),
    )
    .unwrap();
    let pricing = started.plane.token("pricing").unwrap().to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = api::spawn(started.plane, listener).unwrap();
    let server = client::Server::from_state(&running.addr.to_string(), dir.path()).unwrap();
    let mut c = client::connect(&server).await.unwrap();
    let mut stream = c
        .subscribe(pb::SubscribeRequest {
            service: String::new(), // the token's own service
            token: pricing,
            proxy: String::new(),
            admin_addr: String::new(),
            // Whole snapshots, as a proxy that predates deltas asks.
            deltas: false,
        })
        .await
        .unwrap()
        .into_inner();
    let first = until(&mut stream, "the first snapshot", |_| true).await;
    assert_eq!(first.service, "pricing");
    let without = "mesh: { name: shop, trust_domain: shop.local }
services:
  frontend: { entry: { timeout: 3s }, calls: { checkout: { timeout: 2s } } }
  checkout: {}
";
    assert!(
        client::apply(&server, without, "w.yaml")
            .await
            .unwrap()
            .applied
    );
    let err = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("ended without a reason"),
                Err(status) => return status,
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains("pricing"), "{}", err.message());
    running.shutdown().await.unwrap();
}
