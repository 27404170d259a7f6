//! `hopwise control --kubernetes` learning from a real kube-apiserver's EndpointSlices (issue
//! 30, discovery), published by a real kube-controller-manager's EndpointSlice controller: a
//! service's copies take traffic only where Kubernetes lists their pod ready — not before the
//! pod is ready, not once it is terminating — and what a caller's proxy is sent follows each
//! change; the Service's ClusterIP becomes the service's address in the mesh file they are
//! sent, and its ports its `ports` (a named target port as the slices resolve it). With the
//! API server gone the control plane keeps serving the last list.
//!
//! The test stands in for the kubelet only (it patches the pods' status: IP, Ready) and for
//! the copies' proxies (it registers their copies with the control plane over gRPC). Pod IPs
//! are addresses nothing sends to: only the control plane compares them.

#![allow(clippy::unwrap_used)]

#[path = "kube_support/mod.rs"]
mod kube_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hopwise_control::{client, pb};
use hopwise_kube::testing::ApiServer;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Node, Pod, PodSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use tonic::Streaming;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

/// An `api` pod on node `node-1` (the EndpointSlice controller skips a pod on no known node).
fn api_pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            labels: Some(BTreeMap::from([("app".to_owned(), "api".to_owned())])),
            ..meta(name)
        },
        spec: Some(PodSpec {
            node_name: Some("node-1".into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("api:1".into()),
                // The port the Service's `http` targets by name.
                ports: Some(vec![ContainerPort {
                    name: Some("web".into()),
                    container_port: 8080,
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A copy of `api` at `ip`, registered as its proxy would and healthy by its probe.
async fn register_healthy(c: &mut client::Client, token: &str, ip: &str) {
    let register = pb::RegisterRequest {
        token: token.to_owned(),
        inbound_addr: format!("{ip}:4143"),
        ttl_ms: 600_000,
        ..Default::default()
    };
    let lease = c.register(register).await.unwrap().into_inner();
    let health = pb::SetHealthRequest {
        token: token.to_owned(),
        lease_id: lease.lease_id,
        healthy: true,
    };
    c.set_health(health).await.unwrap();
}

/// What the kubelet would write once the pod runs and its probe passes.
async fn ready(pods: &Api<Pod>, name: &str, ip: &str) {
    let status = serde_json::json!({ "status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{ "ip": ip }],
        "conditions": [{ "type": "Ready", "status": "True" }],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// Reads whole snapshots until `api`'s endpoints are `want`; panics with the last seen after
/// 30 s (the controller manager and the watch take a moment; a busy machine more).
async fn endpoints_become(stream: &mut Streaming<pb::Snapshot>, want: &[&str], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(next) = tokio::time::timeout(left, stream.message()).await else {
            panic!("{what}: `api`'s endpoints never became {want:?}; last sent {last:?}");
        };
        let snapshot = next.unwrap().unwrap();
        let now: Vec<String> = snapshot
            .upstreams
            .iter()
            .find(|u| u.service == "api")
            .map(|u| u.endpoints.clone())
            .unwrap_or_default();
        if now == want {
            return;
        }
        last = Some(now);
    }
}

/// Waits until the mesh file a new `web` stream is sent satisfies `ok` (at most 30 s).
async fn served_until(
    c: &mut client::Client,
    web_token: &str,
    what: &str,
    ok: impl Fn(&hopwise_model::Mesh) -> bool,
) {
    let t = Instant::now();
    loop {
        let mut s = kube_support::subscribe(c, web_token, "web", "web-9")
            .await
            .unwrap();
        let text = s.message().await.unwrap().unwrap().mesh_yaml.unwrap();
        if ok(&hopwise_model::Mesh::from_yaml(&text).unwrap()) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no {what} in:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_take_traffic_only_where_endpoint_slices_list_their_pod_ready() {
    let mut api = ApiServer::start().await.unwrap();
    api.start_controllers(&["endpointslice"]).await.unwrap();
    let kube = api.client().unwrap();
    let post = PostParams::default();
    kube_support::namespace(&kube, "shop").await;
    let node = Node {
        metadata: meta("node-1"),
        ..Default::default()
    };
    Api::<Node>::all(kube.clone())
        .create(&post, &node)
        .await
        .unwrap();

    let control = kube_support::Control::start(&api);
    let mut c = control.client().await;
    let (api_token, web_token) = (control.token("api"), control.token("web"));

    // Two copies of `api`, registered by their proxies and healthy by their own probes.
    for ip in ["10.244.0.5", "10.244.0.6"] {
        register_healthy(&mut c, &api_token, ip).await;
    }
    // What `web`'s proxy is sent.
    let mut stream = kube_support::subscribe(&mut c, &web_token, "web", "web-1")
        .await
        .unwrap();
    let both = ["10.244.0.5:4143", "10.244.0.6:4143"];
    endpoints_become(&mut stream, &both, "no Service yet: leases alone").await;

    // The Service and its pods, not ready yet: its slice lists no address, so no copy serves.
    let pods = Api::<Pod>::namespaced(kube.clone(), "shop");
    for name in ["api-1", "api-2"] {
        pods.create(&post, &api_pod(name)).await.unwrap();
    }
    let service = Service {
        metadata: meta("api"),
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([("app".to_owned(), "api".to_owned())])),
            ports: Some(vec![
                ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    target_port: Some(IntOrString::String("web".into())),
                    ..Default::default()
                },
                ServicePort {
                    name: Some("admin".into()),
                    port: 9090,
                    target_port: Some(IntOrString::Int(9901)),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = Api::<Service>::namespaced(kube.clone(), "shop")
        .create(&post, &service)
        .await
        .unwrap();
    endpoints_become(&mut stream, &[], "pods not ready").await;

    // Its ClusterIP is `api`'s address in the mesh file proxies are sent: where a captured
    // app's connection to `api` (resolved by the cluster's DNS) goes; its ports are `api`'s
    // ports, the named target as the EndpointSlice controller resolved it from the pods.
    let cluster_ip: std::net::IpAddr = created.spec.unwrap().cluster_ip.unwrap().parse().unwrap();
    served_until(
        &mut c,
        &web_token,
        "the ClusterIP as `api`'s address",
        |m| m.services["api"].address == Some(cluster_ip),
    )
    .await;

    // The kubelet says each pod runs and is ready: its copy serves.
    ready(&pods, "api-1", "10.244.0.5").await;
    endpoints_become(&mut stream, &both[..1], "api-1 ready").await;
    // Once a pod is listed, its slice says what `web` names: 80 reaches the pods' 8080.
    served_until(&mut c, &web_token, "the Service's ports", |m| {
        m.services["api"]
            .ports
            .iter()
            .eq([(80, 8080), (9090, 9901)])
    })
    .await;
    ready(&pods, "api-2", "10.244.0.6").await;
    endpoints_become(&mut stream, &both, "both ready").await;

    // api-1 is deleted: terminating (no kubelet finishes it), it takes no new requests.
    pods.delete("api-1", &DeleteParams::default().grace_period(30))
        .await
        .unwrap();
    endpoints_become(&mut stream, &both[1..], "api-1 terminating").await;

    // A copy whose pod Kubernetes does not list (an address of no pod) is registered and
    // healthy, but takes no traffic.
    register_healthy(&mut c, &api_token, "10.244.0.7").await;

    // `hopwise status` says how Kubernetes lists each copy.
    let status = client::status(&control.server).await.unwrap();
    let copies = &status
        .services
        .iter()
        .find(|s| s.service == "api")
        .unwrap()
        .copies;
    let mut listed: Vec<(&str, &str)> = copies
        .iter()
        .map(|c| (c.inbound_addr.as_str(), c.kubernetes.as_str()))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("10.244.0.5:4143", "terminating"),
            ("10.244.0.6:4143", "ready"),
            ("10.244.0.7:4143", "absent")
        ]
    );

    // The API server goes: the control plane keeps serving the last list, and says why.
    api.stop().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut again = kube_support::subscribe(&mut c, &web_token, "web", "web-2")
        .await
        .unwrap();
    endpoints_become(&mut again, &both[1..], "API server gone").await;
    let text = std::fs::read_to_string(&control.log).unwrap();
    assert!(
        text.contains("EndpointSlices: the watch broke"),
        "the control plane's log: {text}"
    );
}
