//! What a join-token holder can make the control plane keep or do, over real TLS on 127.0.0.1:
//! the admin address it names (which the dashboard reads every second) is kept only if it is
//! where its connection comes from; copies and proxy names per service are capped; a join token
//! rotated or revoked is refused at once.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use hopwise_control::client;
use hopwise_control::conn::Limits;
use hopwise_control::pb;
use hopwise_control::plane::{MAX_COPIES_PER_SERVICE, MAX_PROXY_NAMES_PER_SERVICE};

mod support;
use support::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_address_on_another_host_is_ignored() {
    let plant = start(Limits::default()).await;
    let token = plant.token("b");
    let mut c = plant.client().await;
    let register = |inbound: &str, admin: &str| pb::RegisterRequest {
        token: token.clone(),
        inbound_addr: inbound.into(),
        ttl_ms: 10_000,
        admin_addr: admin.into(),
        labels: Default::default(),
    };
    // The test connects from 127.0.0.1: another host's address is not read by the dashboard,
    // but the copy is registered.
    let foreign = c
        .register(register("127.0.0.1:7001", "198.51.100.7:9901"))
        .await
        .unwrap()
        .into_inner()
        .lease_id;
    let local = c
        .register(register("127.0.0.1:7002", "0.0.0.0:9902"))
        .await
        .unwrap()
        .into_inner()
        .lease_id;
    let handle = plant.running.handle();
    let admin_of = |lease: u64| {
        handle.read(|p| {
            p.registry()
                .copies()
                .find(|(id, _)| id.0 == lease)
                .map(|(_, c)| c.admin)
        })
    };
    assert_eq!(admin_of(foreign), Some(None));
    assert_eq!(
        admin_of(local),
        Some(Some("127.0.0.1:9902".parse().unwrap()))
    );
    // Not an address at all is still refused.
    let bad = c.register(register("127.0.0.1:7003", "metadata")).await;
    assert_eq!(bad.unwrap_err().code(), tonic::Code::InvalidArgument);

    // A subscriber the same way.
    let subscribe = |proxy: &str, admin: &str| pb::SubscribeRequest {
        service: "b".into(),
        token: token.clone(),
        proxy: proxy.into(),
        admin_addr: admin.into(),
        deltas: false,
    };
    let _far = c
        .subscribe(subscribe("b-far", "203.0.113.9:80"))
        .await
        .unwrap();
    let _near = c
        .subscribe(subscribe("b-near", "127.0.0.1:9903"))
        .await
        .unwrap();
    let admins = handle.read(|p| p.subscribed_admins());
    let names: Vec<(&str, String)> = admins
        .iter()
        .map(|(_, proxy, addr)| (proxy.as_str(), addr.to_string()))
        .collect();
    assert_eq!(names, vec![("b-near", "127.0.0.1:9903".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_and_proxy_names_per_service_are_capped() {
    let plant = start(Limits::default()).await;
    let token = plant.token("b");
    let mut c = plant.client().await;
    let register = |port: u32| pb::RegisterRequest {
        token: token.clone(),
        inbound_addr: format!("127.0.0.{}:{}", 1 + port / 60_000, 1 + port % 60_000),
        ttl_ms: 60_000,
        admin_addr: String::new(),
        labels: Default::default(),
    };
    let cap = u32::try_from(MAX_COPIES_PER_SERVICE).unwrap();
    for i in 0..cap {
        c.register(register(i)).await.unwrap();
    }
    let past = c.register(register(cap)).await.unwrap_err();
    assert_eq!(past.code(), tonic::Code::ResourceExhausted);
    assert!(
        past.message()
            .starts_with("too-many-copies: `b` holds 1024 copies"),
        "{}",
        past.message()
    );
    // A copy restarting at an address it holds replaces itself.
    c.register(register(7)).await.unwrap();

    let ack = |proxy: String| pb::AckRequest {
        service: "b".into(),
        version: 1,
        accepted: true,
        token: token.clone(),
        proxy,
        ..Default::default()
    };
    for i in 0..MAX_PROXY_NAMES_PER_SERVICE {
        c.ack(ack(format!("b-{i}"))).await.unwrap();
    }
    let past = c.ack(ack("b-one-more".into())).await.unwrap_err();
    assert_eq!(past.code(), tonic::Code::ResourceExhausted);
    assert!(
        past.message().starts_with("too-many-proxies:"),
        "{}",
        past.message()
    );
    let subscribe = pb::SubscribeRequest {
        service: "b".into(),
        token: token.clone(),
        proxy: "b-one-more".into(),
        ..Default::default()
    };
    let refused = c.subscribe(subscribe.clone()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    // Naming an admin address made the record before the cap was asked, and passed it.
    let with_admin = pb::SubscribeRequest {
        admin_addr: "127.0.0.1:9901".into(),
        ..subscribe
    };
    let refused = c.subscribe(with_admin).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    // A name already known goes on.
    c.ack(ack("b-3".into())).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_or_revoked_token_is_refused_at_once() {
    let plant = start(Limits::default()).await;
    let old = plant.token("b");
    let mut c = plant.client().await;
    let register = |token: &str| pb::RegisterRequest {
        token: token.to_owned(),
        inbound_addr: "127.0.0.1:7001".into(),
        ttl_ms: 10_000,
        admin_addr: String::new(),
        labels: Default::default(),
    };
    c.register(register(&old)).await.unwrap();
    let mut stream = c
        .subscribe(pb::SubscribeRequest {
            service: "b".into(),
            token: old.clone(),
            proxy: "b-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().expect("a first snapshot");

    let addr = plant.running.addr.to_string();
    let server = client::Server::from_state(&addr, plant.dir.path()).unwrap();
    let rotated = client::token(&server, "b", false).await.unwrap();
    assert!(rotated.token.starts_with("hopwise-join-"));
    assert_ne!(rotated.token, old);
    // The control plane's token file holds the new one.
    assert_eq!(plant.token("b"), rotated.token);
    let refused = c.register(register(&old)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    c.register(register(&rotated.token)).await.unwrap();
    // The stream opened with the old token ends, saying why.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => {}
                other => return other,
            }
        }
    })
    .await
    .expect("the old token's stream went on");
    assert_eq!(ended.unwrap_err().code(), tonic::Code::Unauthenticated);

    // Revoked: the new token is not sent back, and the one in use is refused.
    let revoked = client::token(&server, "b", true).await.unwrap();
    assert!(revoked.token.is_empty());
    let refused = c.register(register(&rotated.token)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    // Not a service, or without the admin token: refused.
    let unknown = client::token(&server, "nope", false).await.unwrap_err();
    assert!(unknown.to_string().contains("nope"), "{unknown}");
}
