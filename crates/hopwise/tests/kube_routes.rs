//! HTTPRoutes from a real kube-apiserver in the mesh `hopwise control --kubernetes` serves
//! (issue 30, routes): a route whose parent is a Service is added to the mesh file each proxy
//! is sent, under that service's `routes`, its weights changed live; one that names a Service
//! the mesh does not have is refused alone, and each route's `status.parents` says which.
//! The CRDs are the Gateway API's kinds with an open schema (`install_route_crds`).

#![allow(clippy::unwrap_used)]

#[path = "kube_support/mod.rs"]
mod kube_support;

use std::time::{Duration, Instant};

use hopwise_control::{client, pb};
use hopwise_kube::testing::ApiServer;
use hopwise_model::Mesh;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use tonic::Streaming;

const MESH: &str = "mesh: { trust_domain: shop.local, kubernetes: { namespace: shop } }
services:
  web: { calls: { api: {}, api-v2: {} } }
  api: {}
  api-v2: {}
";

fn http_route(name: &str, backends: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": { "name": name, "namespace": "shop" },
        "spec": {
            "parentRefs": [{ "group": "", "kind": "Service", "name": "api", "port": 80 }],
            "rules": [{ "backendRefs": backends }],
        },
    }))
    .unwrap()
}

/// The weights `api`'s route `name` gives its backends in the mesh file `web`'s proxy is
/// sent, once `want` holds of them (`None`: no such route); panics after 30 s.
async fn served(
    stream: &mut Streaming<pb::Snapshot>,
    name: &str,
    want: impl Fn(Option<&str>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(next) = tokio::time::timeout(left, stream.message()).await else {
            panic!("route `{name}` never served as wanted; last mesh file sent:\n{last}");
        };
        let snapshot = next.unwrap().unwrap();
        last = snapshot.mesh_yaml.unwrap_or(last);
        let mesh = Mesh::from_yaml(&last).unwrap();
        let text = mesh.services["api"]
            .routes
            .contains(name)
            .then(|| route_text(&last, name));
        if want(text.as_deref()) {
            return;
        }
    }
}

/// The JSON of route `name` under `api` in a served mesh file.
fn route_text(served: &str, name: &str) -> String {
    let v: Value = serde_json::from_str(served).unwrap();
    v["services"]["api"]["routes"][name].to_string()
}

type Conditions = Vec<(String, String, String)>;

/// `name`'s conditions by hopwise, once it has written them; panics after 30 s.
async fn conditions(routes: &Api<DynamicObject>, name: &str) -> Conditions {
    conditions_where(routes, name, |_| true).await
}

/// `name`'s conditions by hopwise, once `want` holds of them; panics after 30 s.
async fn conditions_where(
    routes: &Api<DynamicObject>,
    name: &str,
    want: impl Fn(&Conditions) -> bool,
) -> Conditions {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let route = routes.get(name).await.unwrap();
        let parents = &route.data["status"]["parents"];
        if let Some(c) = parents[0]["conditions"].as_array() {
            assert_eq!(parents[0]["controllerName"], "hopwise.dev/control");
            let c: Conditions = c
                .iter()
                .map(|c| {
                    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                    (s("type"), s("status"), s("reason"))
                })
                .collect();
            if want(&c) {
                return c;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no such status on {name}: {route:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_httproute_of_a_service_is_served_to_its_callers_and_its_status_says_so() {
    let api = ApiServer::start().await.unwrap();
    api.install_route_crds().await.unwrap();
    let kube = api.client().unwrap();
    kube_support::namespace(&kube, "shop").await;
    let control = kube_support::Control::start_with(&api, MESH);
    let mut c = control.client().await;
    let web = control.token("web");
    let mut stream = kube_support::subscribe(&mut c, &web, "web", "web-1")
        .await
        .unwrap();
    served(&mut stream, "split", |r| r.is_none()).await;

    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
    ));
    let routes = Api::<DynamicObject>::namespaced_with(kube.clone(), "shop", &resource);
    let split = http_route(
        "split",
        json!([{ "name": "api", "port": 80, "weight": 90 }, { "name": "api-v2", "port": 80, "weight": 10 }]),
    );
    routes.create(&PostParams::default(), &split).await.unwrap();
    served(&mut stream, "split", |r| {
        r.is_some_and(|r| r.contains(r#""weight":90"#) && r.contains(r#""weight":10"#))
    })
    .await;
    let ok = ("True".to_owned(), "Accepted".to_owned());
    let got = conditions(&routes, "split").await;
    assert_eq!((got[0].1.clone(), got[0].2.clone()), ok, "{got:?}");
    assert_eq!(got[1].0, "ResolvedRefs");
    assert_eq!(got[1].1, "True");

    // A route to a Service the mesh does not have: refused alone, the split still served.
    let lost = http_route("lost", json!([{ "name": "nowhere", "port": 80 }]));
    routes.create(&PostParams::default(), &lost).await.unwrap();
    let got = conditions(&routes, "lost").await;
    assert_eq!(
        got[1],
        (
            "ResolvedRefs".into(),
            "False".into(),
            "BackendNotFound".into()
        ),
        "{got:?}"
    );

    // The split moved live: all to v2.
    let patch = json!({ "spec": { "rules": [{ "backendRefs": [
        { "name": "api", "port": 80, "weight": 0 },
        { "name": "api-v2", "port": 80, "weight": 100 },
    ]}]}});
    routes
        .patch("split", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    served(&mut stream, "split", |r| {
        r.is_some_and(|r| r.contains(r#""weight":0"#) && r.contains(r#""weight":100"#))
    })
    .await;
    let mesh_now = Mesh::from_yaml(&control_mesh(&mut c, &web).await).unwrap();
    assert!(!mesh_now.services["api"].routes.contains("lost"));

    // A new mesh file without api-v2 leaves the route unchanged but not served: its status
    // says so; the file back, it serves again and says that.
    let resolved = |want: &'static str| {
        move |c: &Conditions| c.iter().any(|(t, s, _)| t == "ResolvedRefs" && s == want)
    };
    let without = MESH
        .replace("api: {}, api-v2: {}", "api: {}")
        .replace("  api-v2: {}\n", "");
    assert!(!without.contains("api-v2"), "{without}");
    client::apply(&control.server, &without, "mesh.yaml")
        .await
        .unwrap();
    let got = conditions_where(&routes, "split", resolved("False")).await;
    assert!(got.iter().any(|c| c.2 == "BackendNotFound"), "{got:?}");
    served(&mut stream, "split", |r| r.is_none()).await;
    client::apply(&control.server, MESH, "mesh.yaml")
        .await
        .unwrap();
    conditions_where(&routes, "split", resolved("True")).await;
    served(&mut stream, "split", |r| r.is_some()).await;

    // Deleted: gone from what proxies are sent.
    routes
        .delete("split", &DeleteParams::default())
        .await
        .unwrap();
    served(&mut stream, "split", |r| r.is_none()).await;
}

/// The mesh file a new subscriber of `web` is sent.
async fn control_mesh(c: &mut hopwise_control::client::Client, token: &str) -> String {
    let mut s = kube_support::subscribe(c, token, "web", "web-2")
        .await
        .unwrap();
    s.message().await.unwrap().unwrap().mesh_yaml.unwrap()
}
