//! An injected pod's proxy, run as the kubelet would run it (issue 30): the real `hopwise
//! webhook` registered with a real kube-apiserver injects a pod; the test, standing in for the
//! kubelet only, reads the pod as the API server stored it, mints the projected token its
//! volume asks for (TokenRequest, bound to the pod), and runs the `hopwise-proxy` container's
//! command with the environment and arguments the spec names (downward API, `$(VAR)`, mounts
//! mapped to directories of its own). The proxy gets its ServiceAccount's identity from the real
//! `hopwise control --kubernetes`, its configuration, and says it is ready, named after its pod.
//!
//! The whole test runs in a network namespace of its own (made by unsharing this thread's), so
//! the pod's fixed ports (4140, 4143, 4191) and the webhook's are free, every address is
//! loopback inside it, and it is gone with the test process. Needs root.

#![allow(clippy::unwrap_used)]

#[path = "kube_support/mod.rs"]
mod kube_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hopwise_control::client;
use hopwise_kube::inject::{CACHE_DIR, TOKEN_DIR};
use hopwise_kube::testing::ApiServer;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube_support::MESH;
use kube_support::kubelet::{container_command, probe};

const WEBHOOK: &str = "127.0.0.1:9443";
const POD_IP: &str = "10.244.0.5";

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

#[test]
fn an_injected_pods_proxy_starts_with_its_service_accounts_identity() {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .expect("a network namespace of the test's own (needs root)");
    // The pod's IP, on the namespace's own loopback link.
    for args in [
        &["link", "set", "lo", "up"][..],
        &["addr", "add", &format!("{POD_IP}/32"), "dev", "lo"],
    ] {
        assert!(Command::new("ip").args(args).status().unwrap().success());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(the_pod());
}

async fn the_pod() {
    let api = ApiServer::start().await.unwrap();
    let kube = api.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (state, mesh) = (dir.path().join("state"), dir.path().join("mesh.yaml"));
    std::fs::write(&mesh, MESH).unwrap();
    let (_control, addr) = kube_support::control(
        &state,
        &mesh,
        &api.kubeconfig().unwrap(),
        &dir.path().join("control.log"),
    );

    // The real webhook, as `hopwise install` runs it, told where the control plane is.
    let control = format!("https://{addr}");
    let _webhook = kube_support::webhook::start(&kube, dir.path(), WEBHOOK, &control, &state).await;
    Api::<ServiceAccount>::namespaced(kube.clone(), "shop")
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta("web"),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    // The app's pod, as its Deployment would make it.
    let pods = Api::<Pod>::namespaced(kube.clone(), "shop");
    let app = |name: &str| kube_support::app_pod(name, "web");
    pods.create(&PostParams::default(), &app("web-1"))
        .await
        .unwrap();
    let pod = pods.get("web-1").await.unwrap();

    // The kubelet's part: the projected token the volume asks for, bound to the pod...
    let spec = pod.spec.as_ref().unwrap();
    let proxy = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "hopwise-proxy")
        .expect("the proxy was injected");
    let root = dir.path().join("pod");
    kube_support::kubelet::project_token(&kube, &pod, &root).await;
    let token_mount = proxy
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == TOKEN_DIR)
        .unwrap();
    assert!(root.join(&token_mount.name).join("token").exists());
    assert!(
        proxy
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == CACHE_DIR)
    );
    // ... and the container's command, as the spec names it.
    let log = dir.path().join("proxy.log");
    let _proxy = kube_support::Proc(
        container_command(&pod, proxy, POD_IP, &root)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    // The kubelet's probe, at the pod's IP.
    let ready = || probe(&format!("{POD_IP}:4191"), "/ready") == 200;
    let t = Instant::now();
    while !ready() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the injected proxy is not ready after 60 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Its certificate is its ServiceAccount's identity, and the control plane knows it by its
    // pod's name.
    let cache = root.join("hopwise-cache");
    let pem = std::fs::read_to_string(cache.join("web.pem")).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap();
    assert_eq!(
        format!("{:?}", san.value.general_names),
        r#"[URI("spiffe://shop.local/ns/shop/sa/web")]"#
    );
    // The control plane knows it by its pod's name, its stream open, its copy registered at the
    // pod's IP (`--advertise $(HOPWISE_POD_IP)`).
    let server = client::Server::from_state(&addr, &state).unwrap();
    let t = Instant::now();
    loop {
        let text = client::render_status(&client::status(&server).await.unwrap(), 0);
        let row = text
            .lines()
            .find(|l| l.contains("web-1"))
            .unwrap_or_default();
        if row.contains("open") && text.contains(&format!("{POD_IP}:4143")) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    api.stop().unwrap();
}
