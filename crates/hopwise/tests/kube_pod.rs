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

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hopwise_control::client;
use hopwise_kube::inject::{CACHE_DIR, ENABLED, INJECT, TOKEN_DIR};
use hopwise_kube::registration::{self, Target};
use hopwise_kube::testing::ApiServer;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube_support::MESH;

const WEBHOOK: &str = "127.0.0.1:9443";
const POD_IP: &str = "10.244.0.5";

fn wait_for(what: &str, bound: Duration, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `GET path` on a loopback port, as the kubelet's probe: the status line's code, or 0.
fn probe(addr: &str, path: &str) -> u16 {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn hopwise(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopwise"));
    cmd.args(args);
    cmd
}

/// The kubelet's part for one container: its environment (values and the downward API's
/// fields of `pod`), its arguments with `$(VAR)` expanded and every mount path moved under
/// `root`, its command's binary from this build.
fn kubelet_command(pod: &Pod, container: &Container, pod_ip: &str, root: &Path) -> Command {
    let mut env = BTreeMap::new();
    for e in container.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => {
                let field = &from.field_ref.as_ref().unwrap().field_path;
                match field.as_str() {
                    "metadata.name" => pod.metadata.name.clone().unwrap(),
                    "metadata.namespace" => pod.metadata.namespace.clone().unwrap(),
                    "spec.serviceAccountName" => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.service_account_name.clone())
                        .unwrap(),
                    "status.podIP" => pod_ip.to_owned(),
                    other => panic!("a field the stand-in does not know: {other}"),
                }
            }
            (None, None) => String::new(),
        };
        env.insert(e.name.clone(), value);
    }
    let mounts: Vec<(String, PathBuf)> = container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.mount_path.clone(), root.join(&m.name)))
        .collect();
    let arg = |a: &String| {
        let mut a = a.clone();
        for (name, value) in &env {
            a = a.replace(&format!("$({name})"), value);
        }
        for (path, dir) in &mounts {
            if let Some(rest) = a.strip_prefix(path.as_str()) {
                a = format!("{}{rest}", dir.display());
            }
        }
        a
    };
    let program = container.command.as_ref().unwrap()[0].as_str();
    assert_eq!(program, "hopwise-proxy");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopwise-proxy"));
    cmd.args(container.args.iter().flatten().map(arg)).envs(env);
    cmd
}

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
    let cert = hopwise_kube::cert::serving(&["127.0.0.1"]).unwrap();
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_file, &cert.cert_pem).unwrap();
    std::fs::write(&key_file, &cert.key_pem).unwrap();
    let _webhook = kube_support::Proc(
        hopwise(&["webhook", "--listen", WEBHOOK, "--image", "hopwise:test"])
            .args(["--control", &format!("https://{addr}")])
            .arg("--cert")
            .arg(&cert_file)
            .arg("--key")
            .arg(&key_file)
            .arg("--control-ca")
            .arg(state.join("ca.pem"))
            .stderr(std::fs::File::create(dir.path().join("webhook.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for("the webhook listening", Duration::from_secs(30), || {
        std::net::TcpStream::connect(WEBHOOK).is_ok()
    });
    let url = format!("https://{WEBHOOK}{}", registration::PATH);
    Api::<MutatingWebhookConfiguration>::all(kube.clone())
        .create(
            &PostParams::default(),
            &registration::configuration(&Target::Url(url), &cert.ca_pem, "hopwise"),
        )
        .await
        .unwrap();
    let mut ns = Namespace {
        metadata: meta("shop"),
        ..Default::default()
    };
    ns.metadata.labels = Some(BTreeMap::from([(INJECT.into(), ENABLED.into())]));
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
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

    // The app's pod, as its Deployment would make it; the registration takes a moment.
    let pods = Api::<Pod>::namespaced(kube.clone(), "shop");
    let app = |name: &str| kube_support::app_pod(name, "web");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let t = Instant::now();
    while pods
        .create(&dry, &app("probe"))
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
    let projection = spec
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.projected.as_ref())
        .and_then(|p| p.sources.as_ref())
        .and_then(|s| s[0].service_account_token.clone())
        .unwrap();
    let token = kube_support::bound_token(
        &kube,
        "web",
        &pod,
        projection.audience.as_deref().unwrap(),
        projection.expiration_seconds,
    )
    .await;
    let root = dir.path().join("pod");
    let token_mount = proxy
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == TOKEN_DIR)
        .unwrap();
    std::fs::create_dir_all(root.join(&token_mount.name)).unwrap();
    std::fs::write(root.join(&token_mount.name).join(&projection.path), &token).unwrap();
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
        kubelet_command(&pod, proxy, POD_IP, &root)
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
