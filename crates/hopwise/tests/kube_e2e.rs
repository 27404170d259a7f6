//! hopwise on Kubernetes end to end (issue 30): a real kube-apiserver and kube-controller-manager
//! (its EndpointSlice controller), the real `hopwise control --kubernetes` and `hopwise
//! webhook`, and pods run as the kubelet would run them. The test stands in for the kubelet
//! only (and, since no scheduler runs, its pods name their node): it reads each Pod as the API
//! server stored it after injection, makes its network namespace with a pod IP on a veth link
//! to the test's own namespace (the node), runs the injected `hopwise-init` container's command
//! there as root (the capture rules) and the `hopwise-proxy` container's as uid 2140, with the
//! env, arguments and token (TokenRequest, bound to the pod) the spec names, starts the app,
//! and patches the Pod's status (IP, Ready). Cluster DNS is curl's `--resolve` to the Service's
//! ClusterIP.
//!
//! Then an unmodified `curl` in `web`'s pod calls `api` by name and gets an `api` pod's answer
//! carrying web's SPIFFE identity, and on the Service's second port the pod's port that port
//! names (a port the Service lacks reaches nothing); a pod of another ServiceAccount is refused by api's `allow`;
//! a deleted pod leaves its callers' endpoints and cannot renew its certificate; and an
//! HTTPRoute moving `api`'s traffic to `api-v2`'s pod while `web` calls shifts it with no
//! failed request. Needs root, `ip`, `nft`, `nsenter` and `setpriv` (util-linux), `curl`.

#![allow(clippy::unwrap_used)]

#[path = "common/echo.rs"]
mod echo;
#[path = "kube_support/mod.rs"]
mod kube_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hopwise_control::client;
use hopwise_kube::testing::ApiServer;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Node, Pod, PodSpec, Service, ServiceAccount, ServicePort, ServiceSpec,
};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, Patch,
    PatchParams, PostParams,
};
use kube_support::kubelet::{PodNet, probe, run_in, start_injected};
use serde_json::json;

/// Where pods reach the node: the control plane listens here.
const NODE: &str = "10.244.0.1";
const CONTROL_PORT: u16 = 7900;
const WEBHOOK: &str = "127.0.0.1:9443";
/// The injected proxy's uid (`Inject::new`'s default), which the capture rules let through.
const PROXY_UID: u32 = 2140;
const APP_PORT: u16 = 8080;
/// An app's second port, which its Service's `admin` port targets by name.
const ADMIN_PORT: u16 = 9901;
const MESH: &str = "mesh: { trust_domain: shop.local, kubernetes: { namespace: shop } }
services:
  web: { calls: { api: {}, api-v2: {}, api6: {} } }
  other: { calls: { api: {} } }
  api: { allow: [web] }
  api-v2: { allow: [web] }
  api6: { allow: [web] }
";

#[test]
fn curl_in_a_pod_calls_a_service_by_name_through_injected_proxies() {
    kube_support::kubelet::on_a_node(NODE, the_cluster());
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

/// A pod of `service`, running as ServiceAccount `service`, on `node-1`; an app's pods declare
/// their ports (injection hands the proxy the first; the second is named `admin`).
fn pod(name: &str, service: &str, serves: bool) -> Pod {
    let ports = serves.then(|| {
        vec![
            ContainerPort {
                container_port: APP_PORT.into(),
                ..Default::default()
            },
            ContainerPort {
                name: Some("admin".into()),
                container_port: ADMIN_PORT.into(),
                ..Default::default()
            },
        ]
    });
    Pod {
        metadata: ObjectMeta {
            labels: Some(BTreeMap::from([("app".to_owned(), service.to_owned())])),
            ..meta(name)
        },
        spec: Some(PodSpec {
            node_name: Some("node-1".into()),
            service_account_name: Some(service.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some(format!("{service}:1")),
                ports,
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A ClusterIP Service selecting `app: <name>`, port 80 to the app's, 9090 to its port named
/// `admin`; `api6` an IPv6 one (its ClusterIP and its slices' addresses IPv6).
fn service(name: &str) -> Service {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let ipv6 = name == "api6";
    Service {
        metadata: meta(name),
        spec: Some(ServiceSpec {
            ip_families: ipv6.then(|| vec!["IPv6".to_owned()]),
            ip_family_policy: ipv6.then(|| "SingleStack".to_owned()),
            selector: Some(BTreeMap::from([("app".to_owned(), name.to_owned())])),
            ports: Some(vec![
                ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    target_port: Some(IntOrString::Int(APP_PORT.into())),
                    ..Default::default()
                },
                ServicePort {
                    name: Some("admin".into()),
                    port: 9090,
                    target_port: Some(IntOrString::String("admin".into())),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The app of an `api` pod, in its namespace on `[::]:8080` and `:9901` (both families): answers
/// with its pod's name (`<pod>-admin` on the second) and the identity its proxy vouched for.
fn app(net: &PodNet, name: &str) {
    for (port, answers) in [
        (APP_PORT, name.to_owned()),
        (ADMIN_PORT, format!("{name}-admin")),
    ] {
        let listener = hopwise_proxy::capture::in_netns(Some(&net.path()), || {
            std::net::TcpListener::bind(("::", port))
        })
        .unwrap()
        .unwrap();
        echo::serve(listener, &answers);
    }
}

/// A pod running: its namespace (every process in it killed when dropped), its token.
struct Running {
    net: PodNet,
    token: String,
    _proxy: kube_support::Proc,
}

/// The kubelet's part for pod `name` in network `net`: token, the init container, the proxy,
/// the app, its probe, its status.
async fn run(kube: &kube::Client, name: &str, net: PodNet, dir: &Path) -> Running {
    let pods = Api::<Pod>::namespaced(kube.clone(), "shop");
    let pod = pods.get(name).await.unwrap();
    let log = dir.join(format!("{name}.proxy.log"));
    let started = start_injected(kube, &pod, net, &dir.join(name), &log, PROXY_UID).await;
    let (net, token, proxy) = (started.net, started.token, started.proxy);
    let spec = pod.spec.as_ref().unwrap();
    if spec.containers[0].ports.is_some() {
        app(&net, name);
    }
    let t = Instant::now();
    while probe(&net.addr(4191), "/ready") != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{name}'s proxy is not ready after 60 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = json!({ "status": {
        "phase": "Running",
        "podIP": net.ip,
        "podIPs": [{ "ip": net.ips[0] }, { "ip": net.ips[1] }],
        "conditions": [{ "type": "Ready", "status": "True" }],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    Running {
        net,
        token,
        _proxy: proxy,
    }
}

/// `curl http://<name>.shop.svc.cluster.local/hello` from `pod`, the name resolved to
/// `cluster_ip` as the cluster's DNS would: the status (0: no answer) and the body or error.
fn curl(pod: &Path, name: &str, cluster_ip: &str) -> (u16, String) {
    curl_port(pod, name, cluster_ip, 80)
}

/// [`curl`] on the Service's `port`.
fn curl_port(pod: &Path, name: &str, cluster_ip: &str, port: u16) -> (u16, String) {
    let host = format!("{name}.shop.svc.cluster.local");
    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code}",
        "--resolve",
    ])
    .arg(match cluster_ip.contains(':') {
        true => format!("{host}:{port}:[{cluster_ip}]"),
        false => format!("{host}:{port}:{cluster_ip}"),
    })
    .arg(format!("http://{host}:{port}/hello"));
    let out = run_in(pod, &c, None).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    let body = if body.is_empty() {
        String::from_utf8_lossy(&out.stderr).into_owned()
    } else {
        body.to_owned()
    };
    (code.trim().parse().unwrap_or(0), body)
}

/// Calls from the pod whose namespace is `from` until `done` holds of an answer, within 60 s;
/// every answer.
fn calls_until(
    from: &Path,
    name: &str,
    ip: &str,
    mut done: impl FnMut(&(u16, String)) -> bool,
) -> Vec<(u16, String)> {
    let t = Instant::now();
    let mut seen = Vec::new();
    loop {
        let answer = curl(from, name, ip);
        let stop = done(&answer);
        seen.push(answer);
        if stop {
            return seen;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "calling {name} from {} never gave what was awaited; last answers: {:?}",
            from.display(),
            &seen[seen.len().saturating_sub(5)..]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn the_cluster() {
    let mut api = ApiServer::start().await.unwrap();
    api.start_controllers(&["endpointslice"]).await.unwrap();
    api.install_route_crds().await.unwrap();
    let kube = api.client().unwrap();
    let post = PostParams::default();
    Api::<Node>::all(kube.clone())
        .create(
            &post,
            &Node {
                metadata: meta("node-1"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let control_addr = format!("{NODE}:{CONTROL_PORT}");
    let node =
        kube_support::webhook::NodePlane::start(&api, &kube, MESH, &control_addr, WEBHOOK).await;
    let (dir, state) = (&node.dir, &node.state);

    let (accounts, services) = (
        Api::<ServiceAccount>::namespaced(kube.clone(), "shop"),
        Api::<Service>::namespaced(kube.clone(), "shop"),
    );
    let mut cluster_ips = BTreeMap::new();
    for name in ["web", "other", "api", "api-v2", "api6"] {
        let account = ServiceAccount {
            metadata: meta(name),
            ..Default::default()
        };
        accounts.create(&post, &account).await.unwrap();
        let made = services.create(&post, &service(name)).await.unwrap();
        let ip = made.spec.unwrap().cluster_ip.unwrap();
        cluster_ips.insert(name, ip);
    }
    let pods = Api::<Pod>::namespaced(kube.clone(), "shop");
    let specs = [
        ("web-1", "web", false),
        ("other-1", "other", false),
        ("api-1", "api", true),
        ("api-2", "api", true),
        ("api-v2-1", "api-v2", true),
        ("api6-1", "api6", true),
    ];
    let mut running = BTreeMap::new();
    for (n, (name, service, serves)) in (1u8..).zip(specs) {
        pods.create(&post, &pod(name, service, serves))
            .await
            .unwrap();
        // api6's pod is IPv6 first: its IP, its endpoints and its proxy's listeners are IPv6.
        let net = match service {
            "api6" => PodNet::ipv6_first(n),
            _ => PodNet::new(n),
        };
        running.insert(name, run(&kube, name, net, dir.path()).await);
    }
    let web = running["web-1"].net.path();
    let api_ip = cluster_ips["api"].clone();

    // web calls api by name: an api pod answers, and saw web's ServiceAccount's identity.
    let seen = calls_until(&web, "api", &api_ip, |(code, _)| *code == 200);
    let (_, body) = seen.last().unwrap();
    assert!(
        body.ends_with("saw spiffe://shop.local/ns/shop/sa/web for /hello"),
        "{body}"
    );
    // Both api pods serve it.
    let mut by = BTreeMap::new();
    calls_until(&web, "api", &api_ip, |(code, body)| {
        assert_eq!(*code, 200, "{body}");
        *by.entry(body.split(' ').next().unwrap().to_owned())
            .or_insert(0) += 1;
        by.len() == 2
    });

    // The Service's second port reaches the pods' port it names, through both proxies; a
    // port the Service does not expose reaches nothing.
    // (Served once the slices resolve `admin`: waited for, as a pod's proxy would get it.)
    let t = Instant::now();
    let (code, body) = loop {
        let answer = curl_port(&web, "api", &api_ip, 9090);
        if answer.0 == 200 || t.elapsed() > Duration::from_secs(30) {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(code, 200, "{body}");
    let (pod, rest) = body.split_once(' ').unwrap();
    assert!(pod.ends_with("-admin"), "{body}");
    assert_eq!(rest, "saw spiffe://shop.local/ns/shop/sa/web for /hello");
    let (code, body) = curl_port(&web, "api", &api_ip, 81);
    assert_eq!(code, 0, "{body}");

    // An IPv6 Service and pod: web's captured call to its IPv6 ClusterIP reaches the pod at
    // its IPv6 address through both proxies, with web's identity.
    let api6_ip = cluster_ips["api6"].clone();
    assert!(api6_ip.contains(':'), "not IPv6: {api6_ip}");
    let seen = calls_until(&web, "api6", &api6_ip, |(code, _)| *code == 200);
    let (_, body) = seen.last().unwrap();
    assert_eq!(
        body, "api6-1 saw spiffe://shop.local/ns/shop/sa/web for /hello",
        "{seen:?}"
    );

    // A pod of another ServiceAccount is refused by api's `allow`.
    let (code, body) = curl(&running["other-1"].net.path(), "api", &api_ip);
    assert_eq!(code, 403, "{body}");

    deleted_pod_leaves(
        &pods,
        &web,
        &api_ip,
        &running["api-2"],
        &control_addr,
        state,
    )
    .await;
    drop(running.remove("api-2"));
    split_moves_live(&kube, &web, &api_ip).await;
    drop(running);
    api.stop().unwrap();
}

/// `api-2` is deleted (its processes still running, as while the kubelet stops them): it
/// leaves web's endpoints, and its token gets no certificate any more.
async fn deleted_pod_leaves(
    pods: &Api<Pod>,
    web: &Path,
    api_ip: &str,
    gone: &Running,
    control_addr: &str,
    state: &Path,
) {
    // api-2 is deleted (its processes still running, as while the kubelet stops them): it
    // leaves web's endpoints, and its token gets no certificate any more.
    pods.delete("api-2", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let mut alone = 0;
    calls_until(web, "api", api_ip, |(code, body)| {
        assert_eq!(*code, 200, "{body}");
        alone = if body.starts_with("api-1 ") {
            alone + 1
        } else {
            0
        };
        alone == 10
    });
    let server = client::Server::from_state(control_addr, state).unwrap();
    let mut c = client::connect(&server).await.unwrap();
    let t = Instant::now();
    loop {
        match c
            .issue(kube_support::issue_request(&gone.token, "api-2"))
            .await
        {
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
                break;
            }
            Ok(_) => assert!(
                t.elapsed() < Duration::from_secs(20),
                "a deleted pod's token still got a certificate after 20 s"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An HTTPRoute moves api's traffic to api-v2 while web calls: no request fails.
async fn split_moves_live(kube: &kube::Client, web: &Path, api_ip: &str) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
    ));
    let routes = Api::<DynamicObject>::namespaced_with(kube.clone(), "shop", &resource);
    let split = |api: u32, v2: u32| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": { "name": "canary", "namespace": "shop" },
            "spec": {
                "parentRefs": [{ "group": "", "kind": "Service", "name": "api", "port": 80 }],
                "rules": [{ "backendRefs": [
                    { "name": "api", "port": 80, "weight": api },
                    { "name": "api-v2", "port": 80, "weight": v2 },
                ]}],
            },
        })
    };
    let route: DynamicObject = serde_json::from_value(split(100, 0)).unwrap();
    routes.create(&PostParams::default(), &route).await.unwrap();
    let caller = std::thread::spawn({
        let (web, api_ip) = (web.to_owned(), api_ip.to_owned());
        move || {
            let mut v2 = 0;
            calls_until(&web, "api", &api_ip, |(_, body)| {
                v2 = if body.starts_with("api-v2-1 ") {
                    v2 + 1
                } else {
                    0
                };
                v2 == 10
            })
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    routes
        .patch(
            "canary",
            &PatchParams::default(),
            &Patch::Merge(&split(0, 100)),
        )
        .await
        .unwrap();
    let answers = tokio::task::spawn_blocking(move || caller.join().unwrap())
        .await
        .unwrap();
    let failed: Vec<_> = answers.iter().filter(|(code, _)| *code != 200).collect();
    assert!(
        failed.is_empty(),
        "failed while the split moved: {failed:?}"
    );
    assert!(answers[0].1.starts_with("api-1 "), "{:?}", answers[0]);
}
