//! The mesh file as a `Mesh` resource on a real kube-apiserver (issue 30): `hopwise control
//! --kubernetes` with no `--config` and nothing stored waits for one; a `Mesh` that `hopwise check`
//! refuses is not started on and its status lists the findings; a good generation is started on;
//! later generations are applied as `hopwise control apply` applies a file — a refused one leaves
//! the file in force (and says why in the status), a good one reaches the proxies' streams.

#![allow(clippy::unwrap_used)]

#[path = "kube_support/mod.rs"]
mod kube_support;

use std::path::Path;
use std::time::{Duration, Instant};

use hopwise_kube::mesh_resource;
use hopwise_kube::testing::ApiServer;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;

/// `hopwise check` refuses it: web's client waits 1 s, its call to api may take 5.
const REFUSED: &str = "mesh: { trust_domain: shop.local, kubernetes: { namespace: shop } }
services:
  web: { entry: { timeout: 1s }, calls: { api: { timeout: 5s } } }
  api: {}
";

/// A mesh file as the JSON a `Mesh`'s spec holds.
fn spec(text: &str) -> Value {
    let tree = hopwise_model::yaml::parse(text).unwrap();
    serde_json::from_str(&hopwise_model::yaml::json::write(&tree, &|_| Vec::new())).unwrap()
}

fn meshes(kube: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        mesh_resource::GROUP,
        mesh_resource::VERSION,
        mesh_resource::KIND,
    );
    Api::all_with(kube.clone(), &ApiResource::from_gvk(&gvk))
}

/// The `Mesh`'s spec replaced whole (a merge patch would keep keys the new file has not).
async fn replace_spec(meshes: &Api<DynamicObject>, text: &str) {
    let mut mesh = meshes.get(mesh_resource::NAME).await.unwrap();
    mesh.data["spec"] = spec(text);
    meshes
        .replace(mesh_resource::NAME, &PostParams::default(), &mesh)
        .await
        .unwrap();
}

/// The `Mesh`'s status once it speaks of its current generation and `want` holds of it;
/// panics after 30 s.
async fn status_where(meshes: &Api<DynamicObject>, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mesh = meshes.get(mesh_resource::NAME).await.unwrap();
        let status = &mesh.data["status"];
        let current = status["observedGeneration"].as_i64() == mesh.metadata.generation;
        if current && want(status) {
            return status.clone();
        }
        assert!(Instant::now() < deadline, "no such status: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition(status: &Value) -> (&str, &str) {
    let c = &status["conditions"][0];
    (
        c["status"].as_str().unwrap_or(""),
        c["reason"].as_str().unwrap_or(""),
    )
}

/// Waits until `log` holds `text`; panics after 30 s.
fn logged(log: &Path, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(text)
    {
        assert!(
            Instant::now() < deadline,
            "{text:?} never logged:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mesh_resource_is_the_mesh_file_and_its_status_says_what_was_made_of_it() {
    let api = ApiServer::start().await.unwrap();
    let schema = serde_json::to_value(hopwise_model::schema()).unwrap();
    api.install_crds(&[mesh_resource::definition(&schema)])
        .await
        .unwrap();
    let kube = api.client().unwrap();
    kube_support::namespace(&kube, "shop").await;
    let dir = tempfile::tempdir().unwrap();
    let (state, log) = (dir.path().join("state"), dir.path().join("control.log"));
    let kubeconfig = api.kubeconfig().unwrap();
    let (_process, stdout) =
        kube_support::spawn_control("127.0.0.1:0", &state, None, &kubeconfig, &log);

    // Nothing stored, no Mesh: it waits.
    logged(&log, "waiting for one");
    // A Mesh `hopwise check` refuses: not started on, the findings in its status.
    let meshes = meshes(&kube);
    let object: DynamicObject =
        serde_json::from_value(mesh_resource::object(spec(REFUSED))).unwrap();
    meshes
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let status = status_where(&meshes, |s| condition(s) == ("False", "Refused")).await;
    let codes: Vec<&str> = status["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"exceeds-client"), "{status}");
    assert_eq!(status["findings"][0]["severity"], "error", "{status}");

    // A good generation: started on.
    replace_spec(&meshes, kube_support::MESH).await;
    let log_path = log.clone();
    let addr = tokio::task::spawn_blocking(move || kube_support::listening(stdout, &log_path))
        .await
        .unwrap();
    let server = hopwise_control::client::Server::from_state(&addr, &state).unwrap();
    let status = status_where(&meshes, |s| condition(s).0 == "True").await;
    assert_eq!(status["configVersion"], 1, "{status}");
    let mut c = hopwise_control::client::connect(&server).await.unwrap();
    let web = std::fs::read_to_string(state.join("tokens/web"))
        .unwrap()
        .trim()
        .to_owned();
    let mut stream = kube_support::subscribe(&mut c, &web, "web", "web-1")
        .await
        .unwrap();
    let first = stream.message().await.unwrap().unwrap().mesh_yaml.unwrap();
    assert!(
        hopwise_model::Mesh::from_yaml(&first)
            .unwrap()
            .services
            .contains_key("api")
    );

    // A refused change: the file in force stays; the status says why.
    replace_spec(&meshes, REFUSED).await;
    let status = status_where(&meshes, |s| condition(s) == ("False", "Refused")).await;
    assert_eq!(status["configVersion"], 1, "{status}");
    let in_force = hopwise_control::client::status(&server).await.unwrap();
    assert_eq!(in_force.config_version, 1);

    // A good change: applied and served.
    let more = kube_support::MESH.replace("  api: {}\n", "  api: {}\n  db: {}\n");
    replace_spec(&meshes, &more).await;
    let status = status_where(&meshes, |s| condition(s) == ("True", "Applied")).await;
    assert_eq!(status["configVersion"], 2, "{status}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, stream.message())
            .await
            .expect("db never served");
        if let Some(text) = next.unwrap().unwrap().mesh_yaml
            && hopwise_model::Mesh::from_yaml(&text)
                .unwrap()
                .services
                .contains_key("db")
        {
            break;
        }
    }
}
