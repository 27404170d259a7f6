//! The real `hopwise webhook`, as `hopwise install` runs it, registered with a test's API
//! server, and namespace `shop` opted in: what `kube_pod.rs` and `kube_e2e.rs` inject pods with.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hopwise_kube::inject::{ENABLED, INJECT};
use hopwise_kube::registration::{self, Target};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ObjectMeta, PostParams};

use super::Proc;
use super::kubelet::wait_for;

/// Starts the webhook on `listen` (loopback), telling injected proxies the control plane is at
/// `control` (`https://…`) with the CA of its `state` directory; registers it; makes namespace
/// `shop` with the opt-in label; returns once a pod created there (dry run) comes back
/// injected. Its log goes to `dir/webhook.log`.
pub async fn start(
    kube: &kube::Client,
    dir: &Path,
    listen: &str,
    control: &str,
    state: &Path,
) -> Proc {
    let cert = hopwise_kube::cert::serving(&["127.0.0.1"]).unwrap();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, &cert.cert_pem).unwrap();
    std::fs::write(&key_file, &cert.key_pem).unwrap();
    let webhook = Proc(
        Command::new(env!("CARGO_BIN_EXE_hopwise"))
            .args(["webhook", "--listen", listen, "--image", "hopwise:test"])
            .args(["--control", control])
            .arg("--cert")
            .arg(&cert_file)
            .arg("--key")
            .arg(&key_file)
            .arg("--control-ca")
            .arg(state.join("ca.pem"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("webhook.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for("the webhook listening", Duration::from_secs(30), || {
        std::net::TcpStream::connect(listen).is_ok()
    });
    let url = format!("https://{listen}{}", registration::PATH);
    Api::<MutatingWebhookConfiguration>::all(kube.clone())
        .create(
            &PostParams::default(),
            &registration::configuration(&Target::Url(url), &cert.ca_pem, "hopwise"),
        )
        .await
        .unwrap();
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("shop".into()),
            labels: Some(BTreeMap::from([(INJECT.into(), ENABLED.into())])),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    // The registration takes a moment to reach the API server's admission chain.
    let pods = Api::<Pod>::namespaced(kube.clone(), "shop");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let t = Instant::now();
    while pods
        .create(&dry, &super::app_pod("probe", "default"))
        .await
        .unwrap()
        .spec
        .unwrap()
        .init_containers
        .is_none()
    {
        assert!(t.elapsed() < Duration::from_secs(30), "never injected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    webhook
}

/// The node's part of a test that runs injected pods: a directory the proxies' uid can read
/// (`dir`), `hopwise control --kubernetes` on the mesh file `mesh` listening at `control` (an
/// address pods reach), its state (`state`), and the injection webhook at `webhook`, registered
/// with the API server and naming that control plane. Both processes stop when it is dropped.
pub struct NodePlane {
    pub dir: tempfile::TempDir,
    pub state: std::path::PathBuf,
    _control: Proc,
    _webhook: Proc,
}

impl NodePlane {
    pub async fn start(
        api: &hopwise_kube::testing::ApiServer,
        kube: &kube::Client,
        mesh: &str,
        control: &str,
        webhook: &str,
    ) -> NodePlane {
        let dir = tempfile::tempdir().unwrap();
        // The proxies run as their own uid: they read their token under it.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let (state, file) = (dir.path().join("state"), dir.path().join("mesh.yaml"));
        std::fs::write(&file, mesh).unwrap();
        let kubeconfig = api.kubeconfig().unwrap();
        let log = dir.path().join("control.log");
        let (control_proc, _) = super::control_on(control, &state, &file, &kubeconfig, &log);
        let url = format!("https://{control}");
        let webhook = start(kube, dir.path(), webhook, &url, &state).await;
        NodePlane {
            dir,
            state,
            _control: control_proc,
            _webhook: webhook,
        }
    }
}
