//! An injected pod's own kubelet probes (issue 30): the real `hopwise webhook` injects a pod
//! whose app declares an HTTP readiness probe on a named port and a TCP liveness probe; the
//! test, standing in for the kubelet, runs the pod as `kube_e2e.rs` does (its network namespace
//! on a veth link to the test's own, the node; the injected `hopwise-init`'s capture rules; the
//! `hopwise-proxy` container as uid 2140; the app) and then probes exactly what the API server
//! stored, from the node, as the kubelet would.
//!
//! Shown: the app's probes were moved to the proxy's admin port; they pass while the app is
//! healthy, carry the app's own failure status when it is not, and fail once the app is gone —
//! each answered by the app itself through the proxy. And the reason for all this: the
//! original probe, sent to the app's port from the node, is taken by the capture rules to the
//! proxy's mutual-TLS port and never reaches the app. Needs root, `ip`, `nft`, `nsenter`,
//! `setpriv`.

#![allow(clippy::unwrap_used)]

#[path = "kube_support/mod.rs"]
mod kube_support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hopwise_kube::testing::ApiServer;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, Pod, PodSpec, Probe, ServiceAccount, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ObjectMeta, PostParams};
use kube_support::kubelet::{PodNet, probe};

const NODE: &str = "10.244.0.1";
const CONTROL: &str = "10.244.0.1:7900";
const WEBHOOK: &str = "127.0.0.1:9443";
const PROXY_UID: u32 = 2140;
const APP_PORT: u16 = 8080;

#[test]
fn an_injected_pods_app_probes_are_answered_by_the_app_through_its_proxy() {
    kube_support::kubelet::on_a_node(NODE, the_pod());
}

/// The app as its Deployment would write it: port 8080 named `http`, ready when `GET /healthz`
/// passes, alive while it accepts connections.
fn app_pod() -> Pod {
    let http_get = HTTPGetAction {
        path: Some("/healthz".into()),
        port: IntOrString::String("http".into()),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("web-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            service_account_name: Some("web".into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("web:1".into()),
                ports: Some(vec![ContainerPort {
                    name: Some("http".into()),
                    container_port: APP_PORT.into(),
                    ..Default::default()
                }]),
                readiness_probe: Some(Probe {
                    http_get: Some(http_get),
                    period_seconds: Some(1),
                    timeout_seconds: Some(2),
                    ..Default::default()
                }),
                liveness_probe: Some(Probe {
                    tcp_socket: Some(TCPSocketAction {
                        port: IntOrString::Int(APP_PORT.into()),
                        host: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The app: answers `GET /healthz` with `health`'s status, counts the requests it read, and
/// closes its port when `stop` is set.
struct App {
    health: Arc<AtomicU16>,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl App {
    fn start(listener: TcpListener) -> App {
        listener.set_nonblocking(true).unwrap();
        let health = Arc::new(AtomicU16::new(200));
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, r, s) = (health.clone(), requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if !head.starts_with(b"GET /healthz ") {
                    continue;
                }
                r.fetch_add(1, Ordering::SeqCst);
                let status = h.load(Ordering::SeqCst);
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        App {
            health,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes the app's port.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

async fn the_pod() {
    let api = ApiServer::start().await.unwrap();
    let kube = api.client().unwrap();
    let node =
        kube_support::webhook::NodePlane::start(&api, &kube, kube_support::MESH, CONTROL, WEBHOOK)
            .await;
    let dir = &node.dir;
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("web".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let post = PostParams::default();
    Api::<ServiceAccount>::namespaced(kube.clone(), "shop")
        .create(&post, &account)
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(kube.clone(), "shop");
    pods.create(&post, &app_pod()).await.unwrap();

    // The probes as the API server stored them: on the admin port, the timing kept.
    let pod = pods.get("web-1").await.unwrap();
    let spec = pod.spec.as_ref().unwrap();
    let app = &spec.containers[0];
    let stored = |p: &Option<Probe>| {
        let get = p.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.port, IntOrString::Int(4191));
        get.path.clone().unwrap()
    };
    let (ready, live) = (stored(&app.readiness_probe), stored(&app.liveness_probe));
    assert_eq!(ready, "/app-health/app/readyz");
    assert_eq!(live, "/app-health/app/livez");
    let readiness = app.readiness_probe.as_ref().unwrap();
    assert_eq!(
        (readiness.period_seconds, readiness.timeout_seconds),
        (Some(1), Some(2))
    );
    assert!(app.liveness_probe.as_ref().unwrap().tcp_socket.is_none());

    // The kubelet's part: network, token, capture rules, the proxy as its uid, the app.
    let log = dir.path().join("proxy.log");
    let root = dir.path().join("web-1");
    let started =
        kube_support::kubelet::start_injected(&kube, &pod, PodNet::new(1), &root, &log, PROXY_UID)
            .await;
    let net = &started.net;
    let listener = hopwise_proxy::capture::in_netns(Some(&net.path()), || {
        TcpListener::bind(("0.0.0.0", APP_PORT))
    })
    .unwrap()
    .unwrap();
    let mut app = App::start(listener);
    let admin = format!("{}:4191", net.ip);
    let t = Instant::now();
    while probe(&admin, "/ready") != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the proxy is not ready after 60 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The probes as stored, from the node: answered by the app, through its proxy.
    assert_eq!(probe(&admin, &ready), 200);
    assert_eq!(app.requests.load(Ordering::SeqCst), 1);
    assert_eq!(probe(&admin, &live), 200);
    app.health.store(503, Ordering::SeqCst);
    assert_eq!(probe(&admin, &ready), 503, "the app's own failure");
    app.health.store(500, Ordering::SeqCst);
    assert_eq!(probe(&admin, &ready), 500);
    app.health.store(200, Ordering::SeqCst);
    assert_eq!(probe(&admin, &ready), 200);
    assert_eq!(app.requests.load(Ordering::SeqCst), 4);
    // Nothing else is reachable through it: a path injection did not write.
    assert_eq!(probe(&admin, "/app-health/app/startupz"), 404);
    assert_eq!(probe(&admin, "/app-health/other/readyz"), 404);

    // Why the probes moved: the original, at the app's port from the node, is captured to the
    // proxy's mutual-TLS port, which a plaintext request never passes; the app sees nothing.
    let original = format!("{}:{APP_PORT}", net.ip);
    assert_ne!(probe(&original, "/healthz"), 200);
    assert_eq!(app.requests.load(Ordering::SeqCst), 4);

    // The app gone: the TCP probe fails, and so does the HTTP one.
    app.stop();
    assert_eq!(probe(&admin, &live), 503);
    assert_eq!(probe(&admin, &ready), 503);
    api.stop().unwrap();
}
