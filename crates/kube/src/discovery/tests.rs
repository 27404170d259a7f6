//! The slices' reading and merging, and the changes a watch's events make: on the API's own
//! types, without a server (the watch against a real one is `tests/discovery.rs`).

use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
use kube::api::ObjectMeta;

use super::*;

fn endpoint(ip: &str, ready: Option<bool>, terminating: Option<bool>) -> Endpoint {
    Endpoint {
        addresses: vec![ip.into()],
        conditions: Some(EndpointConditions {
            ready,
            serving: ready,
            terminating,
        }),
        ..Default::default()
    }
}

fn slice(name: &str, service: &str, endpoints: Vec<Endpoint>) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            labels: Some(BTreeMap::from([(
                SERVICE_NAME_LABEL.to_owned(),
                service.to_owned(),
            )])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(endpoints),
        ..Default::default()
    }
}

fn api() -> ServiceKey {
    ServiceKey {
        namespace: "shop".into(),
        name: "api".into(),
    }
}

fn ips(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

/// A change as (service, (ready, terminating)).
type Told = (String, Option<(BTreeSet<IpAddr>, BTreeSet<IpAddr>)>);

fn told(changes: &[Change]) -> Vec<Told> {
    changes
        .iter()
        .map(|c| {
            let e = c.endpoints.as_ref();
            (
                c.service.name.clone(),
                e.map(|e| (e.ready.clone(), e.terminating.clone())),
            )
        })
        .collect()
}

#[test]
fn conditions_read_as_the_api_says_unknown_ready_is_ready() {
    let mut s = Slices::default();
    let changes = s.apply(&slice(
        "api-1",
        "api",
        vec![
            endpoint("10.244.0.5", Some(true), Some(false)),
            endpoint("10.244.0.6", None, None),
            endpoint("10.244.0.7", Some(false), None),
            endpoint("10.244.0.8", Some(false), Some(true)),
            endpoint("not-an-ip", Some(true), None),
        ],
    ));
    assert_eq!(
        told(&changes),
        [(
            "api".into(),
            Some((ips(&["10.244.0.5", "10.244.0.6"]), ips(&["10.244.0.8"])))
        )]
    );
    // A slice without the Service label, or of FQDNs, lists no pod address of a Service.
    let mut unlabelled = slice("x", "api", vec![endpoint("10.244.0.9", None, None)]);
    unlabelled.metadata.labels = None;
    assert!(s.apply(&unlabelled).is_empty());
    let mut fqdn = slice("api-2", "api", vec![endpoint("db.example", None, None)]);
    fqdn.address_type = "FQDN".into();
    assert!(s.apply(&fqdn).is_empty(), "nothing new for api");
}

#[test]
fn a_services_slices_merge_and_only_a_real_change_is_told() {
    let mut s = Slices::default();
    let first = slice("api-a", "api", vec![endpoint("10.244.0.5", None, None)]);
    s.apply(&first);
    let second = slice("api-b", "api", vec![endpoint("10.244.0.6", None, None)]);
    let changes = s.apply(&second);
    assert_eq!(
        told(&changes),
        [(
            "api".into(),
            Some((ips(&["10.244.0.5", "10.244.0.6"]), ips(&[])))
        )]
    );
    // The same slice again (a resync, a status-only update): nothing to tell.
    assert!(s.apply(&second).is_empty());
    // A pod moving between slices, ready in one and terminating in the other: ready.
    let moving = slice(
        "api-b",
        "api",
        vec![endpoint("10.244.0.5", Some(false), Some(true))],
    );
    assert_eq!(
        told(&s.apply(&moving)),
        [("api".into(), Some((ips(&["10.244.0.5"]), ips(&[]))))]
    );
    // Every slice gone: the Service is no longer known.
    s.delete(&first);
    let changes = s.delete(&moving);
    assert_eq!(told(&changes), [("api".into(), None)]);
    assert!(s.delete(&moving).is_empty());
}

/// While the watch was away: api's pod went terminating, web's slice was deleted, pay's was
/// made.
fn relist_as_found_after_the_break(s: &mut Slices) {
    s.relist();
    s.listed(&slice(
        "api-a",
        "api",
        vec![endpoint("10.244.0.5", Some(false), Some(true))],
    ));
    s.listed(&slice(
        "pay-a",
        "pay",
        vec![endpoint("10.244.0.7", None, None)],
    ));
}

#[test]
fn a_relist_after_a_break_catches_up_with_what_changed_meanwhile() {
    let mut s = Slices::default();
    s.apply(&slice(
        "api-a",
        "api",
        vec![endpoint("10.244.0.5", None, None)],
    ));
    s.apply(&slice(
        "web-a",
        "web",
        vec![endpoint("10.244.0.9", None, None)],
    ));
    relist_as_found_after_the_break(&mut s);
    let mut changes = told(&s.listed_all());
    changes.sort();
    assert_eq!(
        changes,
        [
            ("api".into(), Some((ips(&[]), ips(&["10.244.0.5"])))),
            ("pay".into(), Some((ips(&["10.244.0.7"]), ips(&[])))),
            ("web".into(), None),
        ]
    );
    // A relist that finds what was told: nothing.
    relist_as_found_after_the_break(&mut s);
    assert!(s.listed_all().is_empty());
    assert_eq!(s.merged(&api()).unwrap().terminating, ips(&["10.244.0.5"]));
}

#[test]
fn a_services_cluster_ip_and_none_for_a_headless_one() {
    use k8s_openapi::api::core::v1::{Service, ServiceSpec};
    let with = |ip: Option<&str>| Service {
        spec: Some(ServiceSpec {
            cluster_ip: ip.map(str::to_owned),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        cluster_ip(&with(Some("10.96.0.10"))),
        "10.96.0.10".parse().ok()
    );
    assert_eq!(cluster_ip(&with(Some("None"))), None);
    assert_eq!(cluster_ip(&with(None)), None);
}

/// Found by the `discovery` fuzz target (docs/security.md, "Fuzzing"): a slice listed twice in
/// one relist, the second time without its Service's label, stayed in the list as the first
/// said, where `apply` would have dropped it. kube's watcher lists each slice once, and only
/// labelled ones, so no cluster sent this; `listed` now reads as `apply` does all the same.
#[test]
fn a_slice_listed_again_as_no_services_leaves_the_relist() {
    let mut s = Slices::default();
    s.apply(&slice(
        "api-a",
        "api",
        vec![endpoint("10.244.0.5", None, None)],
    ));
    s.relist();
    s.listed(&slice(
        "api-a",
        "api",
        vec![endpoint("10.244.0.5", None, None)],
    ));
    let mut unlabelled = slice("api-a", "api", vec![]);
    unlabelled.metadata.labels = None;
    s.listed(&unlabelled);
    assert_eq!(told(&s.listed_all()), [("api".into(), None)]);
}

#[test]
fn a_services_tcp_ports_with_their_targets_as_numbers_or_names() {
    use hopwise_model::kubernetes::{PortTarget, ServicePort};
    use k8s_openapi::api::core::v1::{Service, ServicePort as KubePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let port = |name: &str, port, target, protocol: &str| KubePort {
        name: Some(name.into()),
        port,
        target_port: target,
        protocol: Some(protocol.into()),
        ..Default::default()
    };
    let service = Service {
        spec: Some(ServiceSpec {
            cluster_ip: Some("10.96.0.10".into()),
            ports: Some(vec![
                port("http", 80, Some(IntOrString::String("web".into())), "TCP"),
                port("admin", 9090, Some(IntOrString::Int(9901)), "TCP"),
                port("plain", 7000, None, "TCP"),
                port("dns", 53, None, "UDP"),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let f = front(&service);
    assert_eq!(f.cluster_ip, "10.96.0.10".parse().ok());
    let want = |name: &str, port, target| ServicePort {
        name: name.into(),
        port,
        target,
    };
    assert_eq!(
        f.ports,
        [
            want("http", 80, PortTarget::Name("web".into())),
            want("admin", 9090, PortTarget::Number(9901)),
            want("plain", 7000, PortTarget::Number(7000)),
        ],
        "UDP is not the mesh's; no targetPort is the port"
    );
}

#[test]
fn slices_tell_each_service_ports_number_and_the_first_slice_stands() {
    use k8s_openapi::api::discovery::v1::EndpointPort;
    let with_ports = |name: &str, ports: &[(&str, i32, &str)]| {
        let mut s = slice(name, "api", vec![endpoint("10.244.0.5", None, None)]);
        s.ports = Some(
            (ports.iter())
                .map(|&(n, port, protocol)| EndpointPort {
                    name: Some(n.into()),
                    port: Some(port),
                    protocol: Some(protocol.into()),
                    ..Default::default()
                })
                .collect(),
        );
        s
    };
    let mut s = Slices::default();
    let told = s.apply(&with_ports(
        "api-a",
        &[("http", 8080, "TCP"), ("dns", 53, "UDP")],
    ));
    let ports = |c: &[Change]| c[0].endpoints.as_ref().unwrap().ports.clone();
    assert_eq!(ports(&told), BTreeMap::from([("http".to_owned(), 8080)]));
    // Pods that resolve `http` otherwise, in a slice of their own: the first slice's stands.
    let told = s.apply(&with_ports(
        "api-b",
        &[("http", 8081, "TCP"), ("admin", 9901, "TCP")],
    ));
    assert_eq!(
        ports(&told),
        BTreeMap::from([("admin".to_owned(), 9901), ("http".to_owned(), 8080)])
    );
}
