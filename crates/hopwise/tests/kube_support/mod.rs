//! What the Kubernetes tests share (`kube_identity.rs`, `kube_pod.rs`, each including this by
//! path, so the other tests' binaries do not build the kube client): `hopwise control
//! --kubernetes` started against a test's API server, and a pod's bound ServiceAccount token.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

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

/// `hopwise control --kubernetes` on a free loopback port, its API server named by
/// `KUBECONFIG`, its log in `log`; where it listens.
pub fn control(state: &Path, mesh: &Path, kubeconfig: &Path, log: &Path) -> (Proc, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["control", "--listen", "127.0.0.1:0", "--kubernetes"])
        .arg("--state")
        .arg(state)
        .arg("--config")
        .arg(mesh)
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    let addr = line
        .split_whitespace()
        .skip_while(|w| *w != "on")
        .nth(1)
        .unwrap_or_else(|| {
            panic!(
                "hopwise control did not say where it listens ({line:?}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
        .to_owned();
    (Proc(child), addr)
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
