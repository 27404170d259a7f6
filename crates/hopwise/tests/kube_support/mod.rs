//! What the Kubernetes tests share (`kube_identity.rs`, `kube_pod.rs`, each including this by
//! path, so the other tests' binaries do not build the kube client): `hopwise control
//! --kubernetes` started against a test's API server, and a pod's bound ServiceAccount token.

#![allow(clippy::unwrap_used)]
// Each test that includes this uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub mod kubelet;
pub mod webhook;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};

/// A child killed and reaped when dropped.
/// The mesh both tests run: two services in namespace `shop`, `web` calling `api`.
pub const MESH: &str = "mesh: { trust_domain: shop.local, kubernetes: { namespace: shop } }
services:
  web: { calls: { api: {} } }
  api: {}
";

pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A token of `account` for `audience`, bound to `pod`, as the kubelet mints a projected
/// volume's (TokenRequest; `seconds`: its lifetime, the API server's default when `None`).
pub async fn bound_token(
    kube: &kube::Client,
    account: &str,
    pod: &Pod,
    audience: &str,
    seconds: Option<i64>,
) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec![audience.into()]),
            expiration_seconds: seconds,
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap();
    Api::<ServiceAccount>::namespaced(kube.clone(), namespace)
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap()
}

/// An `Issue` request as proxy `proxy` sends it: a fresh key's CSR naming nothing (the control
/// plane names the identity), and `token`.
pub fn issue_request(token: &str, proxy: &str) -> hopwise_control::pb::IssueRequest {
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    hopwise_control::pb::IssueRequest {
        csr_pem: csr,
        token: token.to_owned(),
        proxy: proxy.into(),
    }
}

/// `hopwise control --kubernetes` on a free loopback port, its API server named by
/// `KUBECONFIG`, its log in `log`; where it listens. The binary is this build's, or
/// `$HOPWISE_BIN` (a measurement's release build).
pub fn control(state: &Path, mesh: &Path, kubeconfig: &Path, log: &Path) -> (Proc, String) {
    control_on("127.0.0.1:0", state, mesh, kubeconfig, log)
}

/// The same, listening on `listen`.
pub fn control_on(
    listen: &str,
    state: &Path,
    mesh: &Path,
    kubeconfig: &Path,
    log: &Path,
) -> (Proc, String) {
    let (process, stdout) = spawn_control(listen, state, Some(mesh), kubeconfig, log);
    (process, listening(stdout, log))
}

/// `hopwise control --kubernetes` started (`mesh`: its `--config`, if any); its stdout, whose
/// first line says where it listens once it does ([`listening`]).
pub fn spawn_control(
    listen: &str,
    state: &Path,
    mesh: Option<&Path>,
    kubeconfig: &Path,
    log: &Path,
) -> (Proc, BufReader<std::process::ChildStdout>) {
    let bin = std::env::var("HOPWISE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_hopwise").into());
    let mut command = Command::new(bin);
    command
        .args(["control", "--listen", listen, "--kubernetes"])
        .arg("--state")
        .arg(state);
    if let Some(mesh) = mesh {
        command.arg("--config").arg(mesh);
    }
    let mut child = command
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let reader = BufReader::new(child.stdout.take().unwrap());
    (Proc(child), reader)
}

/// Where a control plane started by [`spawn_control`] listens, once it says so (blocking).
pub fn listening(mut reader: BufReader<std::process::ChildStdout>, log: &Path) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    line.split_whitespace()
        .skip_while(|w| *w != "on")
        .nth(1)
        .unwrap_or_else(|| {
            panic!(
                "hopwise control did not say where it listens ({line:?}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
        .to_owned()
}

/// An app's pod as its Deployment would make it: one container, running as `account`.
pub fn app_pod(name: &str, account: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            service_account_name: Some(account.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("app:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates namespace `name`.
pub async fn namespace(kube: &kube::Client, name: &str) {
    let ns = k8s_openapi::api::core::v1::Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Opens the snapshot stream `service`'s proxy `proxy` would, with `token`.
pub async fn subscribe(
    c: &mut hopwise_control::client::Client,
    token: &str,
    service: &str,
    proxy: &str,
) -> Result<tonic::Streaming<hopwise_control::pb::Snapshot>, tonic::Status> {
    let request = hopwise_control::pb::SubscribeRequest {
        token: token.to_owned(),
        service: service.into(),
        proxy: proxy.into(),
        ..Default::default()
    };
    Ok(c.subscribe(request).await?.into_inner())
}

/// `hopwise control --kubernetes` on [`MESH`] (or a file of the test's), against a test's API server, in a temporary
/// directory of its own.
pub struct Control {
    pub state: std::path::PathBuf,
    /// Its pid, for a measurement's reading of `/proc`.
    pub pid: u32,
    /// Its stderr.
    pub log: std::path::PathBuf,
    pub server: hopwise_control::client::Server,
    _process: Proc,
    _dir: tempfile::TempDir,
}

impl Control {
    pub fn start(api: &hopwise_kube::testing::ApiServer) -> Control {
        Control::start_with(api, MESH)
    }

    /// The same, on mesh file `text`.
    pub fn start_with(api: &hopwise_kube::testing::ApiServer, text: &str) -> Control {
        let dir = tempfile::tempdir().unwrap();
        let (state, mesh) = (dir.path().join("state"), dir.path().join("mesh.yaml"));
        std::fs::write(&mesh, text).unwrap();
        let log = dir.path().join("control.log");
        let (process, addr) = control(&state, &mesh, &api.kubeconfig().unwrap(), &log);
        let server = hopwise_control::client::Server::from_state(&addr, &state).unwrap();
        Control {
            pid: process.0.id(),
            state,
            log,
            server,
            _process: process,
            _dir: dir,
        }
    }

    /// A client connected over TLS.
    pub async fn client(&self) -> hopwise_control::client::Client {
        hopwise_control::client::connect(&self.server)
            .await
            .unwrap()
    }

    /// `service`'s join token.
    pub fn token(&self, service: &str) -> String {
        let path = self.state.join("tokens").join(service);
        std::fs::read_to_string(path).unwrap().trim().to_owned()
    }
}
