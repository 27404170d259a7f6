//! What a join-token holder can make the control plane keep or do, over real TLS on 127.0.0.1:
//! the admin address it names (which the dashboard reads every second) is kept only if it is
//! where its connection comes from.

#![allow(clippy::unwrap_used)]

use hopwise_control::conn::Limits;
use hopwise_control::pb;

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
