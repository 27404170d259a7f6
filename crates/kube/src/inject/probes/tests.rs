//! The app's probes through the whole injection: the patch applied (json-patch) and the pod
//! read back, the proxy's variable read as the proxy reads it.

use hopwise_model::app_probe::{Action, AppProbes, ENV};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::inject::{Decision, Inject, decide};

fn inject() -> Inject {
    Inject::new("hopwise:test", "https://hopwise-control.hopwise.svc:7900")
}

/// A pod whose `app` container serves 8080 (named `http`) and 9090 (named `grpc`), with the
/// given probes.
fn pod(probes: Value) -> Value {
    let mut app = json!({
        "name": "app", "image": "app:1",
        "ports": [
            { "name": "http", "containerPort": 8080 },
            { "name": "grpc", "containerPort": 9090 },
        ],
    });
    for (field, probe) in probes.as_object().unwrap() {
        app[field] = probe.clone();
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "a", "namespace": "shop"},
        "spec": {"containers": [app]}
    })
}

/// The pod injected, and the probes its proxy is handed.
fn injected(v: Value) -> (Value, AppProbes) {
    let Decision::Inject(patch) = decide(
        &serde_json::from_value::<Pod>(v.clone()).unwrap(),
        &inject(),
    ) else {
        panic!("not injected");
    };
    let mut doc = v;
    json_patch::patch(&mut doc, &patch).unwrap();
    let proxy = &doc["spec"]["initContainers"][1];
    let env = proxy["env"].as_array().unwrap();
    let probes = env
        .iter()
        .find(|e| e["name"] == ENV)
        .map(|e| AppProbes::parse(e["value"].as_str().unwrap()).unwrap())
        .unwrap_or_default();
    // What Kubernetes reads back must still be a pod.
    serde_json::from_value::<Pod>(doc.clone()).unwrap();
    (doc, probes)
}

#[test]
fn http_tcp_and_grpc_probes_move_to_the_admin_port_their_timing_kept() {
    let (doc, probes) = injected(pod(json!({
        "readinessProbe": {
            "httpGet": { "path": "healthz", "port": "http",
                         "httpHeaders": [{ "name": "X-Probe", "value": "1" }] },
            "periodSeconds": 2, "failureThreshold": 5, "timeoutSeconds": 3,
        },
        "livenessProbe": { "tcpSocket": { "port": 8080 }, "initialDelaySeconds": 10 },
        "startupProbe": { "grpc": { "port": 9090, "service": "shop.Cart" } },
    })));
    let app = &doc["spec"]["containers"][0];
    let admin = |path: &str| json!({ "path": path, "port": 4191, "scheme": "HTTP" });
    assert_eq!(
        app["readinessProbe"]["httpGet"],
        admin("/app-health/app/readyz")
    );
    assert_eq!(app["readinessProbe"]["periodSeconds"], 2);
    assert_eq!(app["readinessProbe"]["failureThreshold"], 5);
    assert_eq!(app["readinessProbe"]["timeoutSeconds"], 3);
    assert_eq!(
        app["livenessProbe"]["httpGet"],
        admin("/app-health/app/livez")
    );
    assert_eq!(app["livenessProbe"].get("tcpSocket"), None);
    assert_eq!(app["livenessProbe"]["initialDelaySeconds"], 10);
    assert_eq!(
        app["startupProbe"]["httpGet"],
        admin("/app-health/app/startupz")
    );
    assert_eq!(app["startupProbe"].get("grpc"), None);

    assert_eq!(probes.len(), 3);
    let ready = probes.get("/app-health/app/readyz").unwrap();
    assert_eq!(ready.timeout_seconds, 3);
    let Action::Http {
        port,
        path,
        https,
        headers,
    } = &ready.action
    else {
        panic!("{ready:?}");
    };
    // The named port resolved, the path given its `/` as the kubelet gives it.
    assert_eq!((*port, path.as_str(), *https), (8080, "/healthz", false));
    assert_eq!(headers[0].name, "X-Probe");
    let live = probes.get("/app-health/app/livez").unwrap();
    assert_eq!(live.action, Action::Tcp { port: 8080 });
    assert_eq!(live.timeout_seconds, 1);
    let start = probes.get("/app-health/app/startupz").unwrap();
    assert_eq!(
        start.action,
        Action::Grpc {
            port: 9090,
            service: "shop.Cart".into()
        }
    );
}

#[test]
fn exec_probes_and_probes_of_another_host_are_left_alone() {
    let exec = json!({ "exec": { "command": ["true"] } });
    let elsewhere = json!({ "httpGet": { "host": "10.0.0.9", "port": 80 } });
    let (doc, probes) = injected(pod(json!({
        "livenessProbe": exec, "readinessProbe": elsewhere,
    })));
    let app = &doc["spec"]["containers"][0];
    assert_eq!(app["livenessProbe"], exec);
    assert_eq!(app["readinessProbe"], elsewhere);
    assert!(probes.is_empty());
    // No probes, no variable.
    let proxy = &doc["spec"]["initContainers"][1];
    let names: Vec<&str> = proxy["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&ENV), "{names:?}");
}

#[test]
fn a_native_sidecars_probes_move_too_and_its_index_is_the_pods_own() {
    let mut v = pod(json!({}));
    v["spec"]["initContainers"] = json!([
        { "name": "migrate", "image": "m:1" },
        { "name": "cache", "image": "c:1", "restartPolicy": "Always",
          "ports": [{ "containerPort": 6379 }],
          "readinessProbe": { "tcpSocket": { "port": 6379 } } },
    ]);
    let (doc, probes) = injected(v);
    let names: Vec<&str> = doc["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hopwise-init", "hopwise-proxy", "migrate", "cache"]);
    let cache = &doc["spec"]["initContainers"][3];
    assert_eq!(
        cache["readinessProbe"]["httpGet"]["path"],
        "/app-health/cache/readyz"
    );
    assert_eq!(
        probes.get("/app-health/cache/readyz").unwrap().action,
        Action::Tcp { port: 6379 }
    );
}

#[test]
fn a_probe_naming_a_port_the_container_lacks_refuses_the_pod() {
    let v = pod(json!({ "readinessProbe": { "httpGet": { "path": "/", "port": "metrics" } } }));
    match decide(&serde_json::from_value::<Pod>(v).unwrap(), &inject()) {
        Decision::Refuse(why) => {
            assert!(
                why.contains("`metrics`") && why.contains("readinessProbe"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
    let v = pod(json!({ "livenessProbe": { "tcpSocket": { "port": 0 } } }));
    assert!(matches!(
        decide(&serde_json::from_value::<Pod>(v).unwrap(), &inject()),
        Decision::Refuse(_)
    ));
}

#[test]
fn a_header_that_would_split_the_request_refuses_the_pod() {
    let v = pod(json!({ "readinessProbe": { "httpGet": { "port": 8080,
        "httpHeaders": [{ "name": "X", "value": "a\r\nHost: evil" }] } } }));
    match decide(&serde_json::from_value::<Pod>(v).unwrap(), &inject()) {
        Decision::Refuse(why) => assert!(why.contains("carriage return"), "{why}"),
        other => panic!("{other:?}"),
    }
}
