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
    mesh_resource::spec_of(text, "mesh.yaml").unwrap()
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

/// `hopwise webhook` judging `Mesh`es, registered by URL with the test's API server (as
/// `hopwise install` registers it by Service); returns once a refused file is refused.
async fn validating_webhook(api: &ApiServer, dir: &Path) -> kube_support::Proc {
    let listen = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().to_string()
    };
    let cert = hopwise_kube::cert::serving(&["127.0.0.1"]).unwrap();
    let (cert_file, key_file, ca_file) =
        (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.pem"));
    std::fs::write(&cert_file, &cert.cert_pem).unwrap();
    std::fs::write(&key_file, &cert.key_pem).unwrap();
    // Any CA will do: injection is not asked here.
    std::fs::write(&ca_file, &cert.ca_pem).unwrap();
    let process = kube_support::Proc(
        std::process::Command::new(env!("CARGO_BIN_EXE_hopwise"))
            .args([
                "webhook",
                "--listen",
                &listen,
                "--control",
                "https://127.0.0.1:1",
            ])
            .arg("--cert")
            .arg(&cert_file)
            .arg("--key")
            .arg(&key_file)
            .arg("--control-ca")
            .arg(&ca_file)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("webhook.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    kube_support::kubelet::wait_for("the webhook listening", Duration::from_secs(30), || {
        std::net::TcpStream::connect(&listen).is_ok()
    });
    let url = format!("https://{listen}{}", mesh_resource::admission::PATH);
    let target = hopwise_kube::registration::Target::Url(url);
    let config = hopwise_kube::registration::mesh_validation(&target, &cert.ca_pem);
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
        api.client().unwrap(),
    )
    .create(&PostParams::default(), &config)
    .await
    .unwrap();
    // The registration takes a moment to reach the API server's admission chain.
    let deadline = Instant::now() + Duration::from_secs(30);
    while apply(api, REFUSED, true).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the webhook never refused a file"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    process
}

/// `text` applied as `Mesh/default` with kubectl (`dry`: a server-side dry run): its stderr
/// (warnings) when applied, else its error.
fn apply(api: &ApiServer, text: &str, dry: bool) -> Result<String, String> {
    let object = mesh_resource::object(spec(text)).to_string();
    api.kubectl_apply(&object, if dry { &["--dry-run=server"] } else { &[] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_itself_refuses_a_mesh_check_refuses_and_shows_its_warnings() {
    let api = ApiServer::start().await.unwrap();
    let schema = serde_json::to_value(hopwise_model::schema()).unwrap();
    api.install_crds(&[mesh_resource::definition(&schema)])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _webhook = validating_webhook(&api, dir.path()).await;

    let refused = apply(&api, REFUSED, false).unwrap_err();
    assert!(refused.contains("mesh.validate.hopwise.dev"), "{refused}");
    assert!(refused.contains("exceeds-client"), "{refused}");
    let none = api
        .kubectl_with(&["get", "meshes", "-o", "name"], "")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&none.stdout).trim().is_empty(),
        "stored anyway"
    );

    let warned = "mesh: { trust_domain: shop.local, kubernetes: { namespace: shop } }
services:
  web: { calls: { api: { timeout: none } } }
  api: {}
";
    let warnings = apply(&api, warned, false).unwrap();
    assert!(
        warnings.contains("Warning: hopwise check: no-timeout")
            && warnings.contains("services.web.calls.api.timeout"),
        "{warnings}"
    );
    apply(&api, kube_support::MESH, false).unwrap();
}
