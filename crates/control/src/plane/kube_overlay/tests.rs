//! Routes from Kubernetes on a plane: accepted ones served under their parents, refused ones
//! alone with their reason, the operator's file kept as it is underneath.

use std::time::SystemTime;

use serde_json::json;

use super::*;
use crate::plane::vouched::tests::plane;

const MESH: &str = "mesh: { trust_domain: shop.local, kubernetes: { namespace: shop } }
services:
  web: { calls: { api: {}, api-v2: {} } }
  api: {}
  api-v2: {}
";

fn route(name: &str, parent: &str, rules: serde_json::Value) -> KubeRoute {
    KubeRoute {
        namespace: "shop".into(),
        name: name.into(),
        parents: vec![parent.into()],
        route: json!({ "rules": rules }),
    }
}

fn split(v1: u32, v2: u32) -> serde_json::Value {
    json!([{ "backends": [
        { "service": "api", "weight": v1 },
        { "service": "api-v2", "weight": v2 },
    ]}])
}

/// A Service with this ClusterIP and no port.
fn at(ip: std::net::IpAddr) -> Option<Front> {
    Some(Front {
        cluster_ip: Some(ip),
        ports: Vec::new(),
    })
}

fn started() -> (tempfile::TempDir, Plane) {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path());
    p.commit(prepare(MESH, "mesh.yaml"), SystemTime::now())
        .unwrap();
    (dir, p)
}

#[test]
fn an_accepted_route_is_served_under_its_parent_and_a_deleted_one_leaves() {
    let (_dir, mut p) = started();
    let addresses = |p: &Plane| {
        p.mesh()
            .services
            .values()
            .map(|s| s.address)
            .collect::<Vec<_>>()
    };
    let before = addresses(&p);
    let stamp = p.config_stamp();
    let verdict = p.set_kube_route("shop", "split", Some(route("split", "api", split(90, 10))));
    assert_eq!(verdict, Some(Ok(())));
    assert!(p.config_stamp() > stamp, "every stream is told");
    assert!(p.mesh().services["api"].routes.contains("split"));
    // What proxies read is the served text: the same mesh, the route in.
    let served = Mesh::from_yaml(p.served_text()).unwrap();
    assert!(served.services["api"].routes.contains("split"));
    assert_eq!(
        addresses(&p),
        before,
        "the file's order, so the same addresses"
    );
    assert_eq!(p.mesh_text(), MESH, "the store keeps the operator's file");

    // The same route again changes nothing.
    let stamp = p.config_stamp();
    p.set_kube_route("shop", "split", Some(route("split", "api", split(90, 10))));
    assert_eq!(p.config_stamp(), stamp);

    assert_eq!(p.set_kube_route("shop", "split", None), None);
    assert!(!p.mesh().services["api"].routes.contains("split"));
    assert_eq!(p.served_text(), MESH);
}

#[test]
fn a_refused_route_is_refused_alone_with_its_reason() {
    let (_dir, mut p) = started();
    p.set_kube_route("shop", "a-good", Some(route("a-good", "api", split(1, 1))));
    let nowhere = route(
        "b-lost",
        "api",
        json!([{ "backends": [{ "service": "nowhere" }] }]),
    );
    match p.set_kube_route("shop", "b-lost", Some(nowhere)) {
        Some(Err(Refused::NotFound(why))) => assert!(why.contains("`nowhere`"), "{why}"),
        other => panic!("{other:?}"),
    }
    let bad = route(
        "c-bad",
        "api",
        json!([{ "matches": [{ "path": { "type": "Bogus", "value": "/" } }] }]),
    );
    match p.set_kube_route("shop", "c-bad", Some(bad)) {
        Some(Err(Refused::Invalid(why))) => assert!(why.contains("Bogus"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Another namespace's Service of the same name is not the mesh's `api`.
    let mut elsewhere = route("d-else", "api", split(1, 1));
    elsewhere.namespace = "other".into();
    assert!(matches!(
        p.set_kube_route("other", "d-else", Some(elsewhere)),
        Some(Err(Refused::NotFound(_)))
    ));
    let api = &p.mesh().services["api"].routes;
    assert!(api.contains("a-good") && !api.contains("b-lost") && !api.contains("c-bad"));
}

#[test]
fn a_new_mesh_file_keeps_the_routes_and_refuses_a_name_it_takes() {
    let (_dir, mut p) = started();
    p.set_kube_route("shop", "split", Some(route("split", "api", split(1, 1))));
    // A file that adds a service keeps the route on top.
    let more = format!("{MESH}  audit: {{}}\n");
    p.commit(prepare(&more, "v2.yaml"), SystemTime::now())
        .unwrap();
    assert!(p.mesh().services.contains_key("audit"));
    assert!(p.mesh().services["api"].routes.contains("split"));
    // A file that names a route `split` itself: the file's wins, Kubernetes's is refused.
    let own = MESH.replace(
        "  api: {}",
        "  api: { routes: { split: { rules: [{ backends: [{ service: api }] }] } } }",
    );
    p.commit(prepare(&own, "v3.yaml"), SystemTime::now())
        .unwrap();
    assert!(matches!(
        p.set_kube_route("shop", "split", Some(route("split", "api", split(1, 1)))),
        Some(Err(Refused::Invalid(_)))
    ));
    assert_eq!(p.served_text(), own);
}

#[test]
fn a_services_cluster_ip_is_its_address_beside_its_routes() {
    let (_dir, mut p) = started();
    let ip: std::net::IpAddr = "10.96.0.10".parse().unwrap();
    let stamp = p.config_stamp();
    assert!(p.set_front("shop", "api", at(ip)));
    assert!(p.config_stamp() > stamp, "every stream is told");
    assert_eq!(p.mesh().services["api"].address, Some(ip));
    assert!(
        !p.set_front("shop", "api", at(ip)),
        "the same again: nothing"
    );
    // Another namespace's Service of that name is not the mesh's `api`.
    assert!(!p.set_front("other", "web", at("10.96.0.11".parse().unwrap())));
    // With a route too, both are served.
    p.set_kube_route("shop", "split", Some(route("split", "api", split(1, 1))));
    let served = Mesh::from_yaml(p.served_text()).unwrap();
    assert_eq!(served.services["api"].address, Some(ip));
    assert!(served.services["api"].routes.contains("split"));
    // A file that gives `api` an address of its own: Kubernetes's stands in its place.
    let own = MESH.replace("  api: {}", "  api: { address: 100.77.9.9 }");
    p.commit(prepare(&own, "v2.yaml"), SystemTime::now())
        .unwrap();
    assert_eq!(p.mesh().services["api"].address, Some(ip));
    // One that gives another service that very address: the ClusterIPs are left out, said so
    // in the log, and the routes still serve.
    let clash = MESH.replace("  api-v2: {}", "  api-v2: { address: 10.96.0.10 }");
    p.commit(prepare(&clash, "v3.yaml"), SystemTime::now())
        .unwrap();
    assert_ne!(p.mesh().services["api"].address, Some(ip));
    assert!(p.mesh().services["api"].routes.contains("split"));
    // Gone: the file's own address (the range's default) again.
    p.commit(prepare(MESH, "v4.yaml"), SystemTime::now())
        .unwrap();
    assert!(p.set_front("shop", "api", None));
    let file = Mesh::from_yaml(MESH).unwrap();
    assert_eq!(
        p.mesh().services["api"].address,
        file.services["api"].address
    );
}

#[test]
fn a_new_file_that_changes_a_routes_verdict_says_so_to_the_routes_watch() {
    let (_dir, mut p) = started();
    let mut changed = p.kube_verdicts_changed();
    p.set_kube_route("shop", "split", Some(route("split", "api", split(1, 1))));
    assert!(changed.has_changed().unwrap());
    changed.mark_unchanged();
    assert_eq!(p.kube_route_verdict("shop", "split"), Some(Ok(())));
    // A file that only adds a service changes no verdict: nothing to write again.
    let more = format!("{MESH}  audit: {{}}\n");
    p.commit(prepare(&more, "v2.yaml"), SystemTime::now())
        .unwrap();
    assert!(!changed.has_changed().unwrap());
    // One without api-v2: the route is no longer served, though it did not change.
    let without = MESH
        .replace("api: {}, api-v2: {}", "api: {}")
        .replace("  api-v2: {}\n", "");
    p.commit(prepare(&without, "v3.yaml"), SystemTime::now())
        .unwrap();
    assert!(changed.has_changed().unwrap());
    assert!(matches!(
        p.kube_route_verdict("shop", "split"),
        Some(Err(Refused::NotFound(_)))
    ));
    assert_eq!(p.kube_route_verdict("shop", "elsewhere"), None);
}

#[test]
fn a_services_ports_are_its_ports_with_named_targets_as_its_slices_resolve_them() {
    use hopwise_model::kubernetes::{Endpoints, PortTarget, ServicePort};
    let (_dir, mut p) = started();
    let port = |name: &str, port, target| ServicePort {
        name: name.into(),
        port,
        target,
    };
    // Headless (no ClusterIP), one numeric target and one named.
    let front = Front {
        cluster_ip: None,
        ports: vec![
            port("admin", 9090, PortTarget::Number(9901)),
            port("http", 80, PortTarget::Name("web".into())),
        ],
    };
    assert!(p.set_front("shop", "api", Some(front)));
    let ports = |p: &Plane| p.mesh().services["api"].ports.iter().collect::<Vec<_>>();
    assert_eq!(
        ports(&p),
        [(9090, 9901)],
        "a name no slice resolved yet: left out"
    );
    let file = Mesh::from_yaml(MESH).unwrap();
    assert_eq!(
        p.mesh().services["api"].address,
        file.services["api"].address
    );
    // The slices name the Service's port, with the number the pods' `web` port has.
    let slices = Endpoints {
        ports: [("http".to_owned(), 8080), ("admin".to_owned(), 9901)].into(),
        ..Endpoints::default()
    };
    let stamp = p.config_stamp();
    assert!(p.set_discovered("shop", "api", Some(slices.clone())));
    assert!(p.config_stamp() > stamp, "every stream is told");
    assert_eq!(ports(&p), [(80, 8080), (9090, 9901)]);
    assert!(
        !p.set_discovered("shop", "api", Some(slices)),
        "the same again: nothing"
    );
    // A file with ports of its own for `api`: the Service's stand in their place.
    let own = MESH.replace(
        "  api: {}",
        "  api: { ports: [{ port: 1, target_port: 2 }] }",
    );
    p.commit(prepare(&own, "v2.yaml"), SystemTime::now())
        .unwrap();
    assert_eq!(ports(&p), [(80, 8080), (9090, 9901)]);
    // The Service gone: the file's own again.
    assert!(p.set_front("shop", "api", None));
    assert_eq!(ports(&p), [(1, 2)]);
}
