//! The labels a pod's copy registers with, read from the proxy's arguments in the patched pod.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::inject::{Decision, Inject, LABELS, decide};

fn pod(labels: Value, annotations: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "a", "namespace": "shop", "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    }))
    .unwrap()
}

/// The `--label` values the proxy is given, or why the pod was refused.
fn labels(pod: &Pod) -> Result<Vec<String>, String> {
    let inject = Inject::new("hopwise:test", "https://hopwise-control.hopwise.svc:7900");
    let patch = match decide(pod, &inject) {
        Decision::Inject(patch) => patch,
        Decision::Refuse(why) => return Err(why),
        other => panic!("{other:?}"),
    };
    let mut doc = serde_json::to_value(pod).unwrap();
    json_patch::patch(&mut doc, &patch).unwrap();
    let args: Vec<String> =
        serde_json::from_value(doc["spec"]["initContainers"][1]["args"].clone()).unwrap();
    let given = args.windows(2).filter(|w| w[0] == "--label");
    Ok(given.map(|w| w[1].clone()).collect())
}

#[test]
fn a_pods_labels_are_its_copys_but_the_controllers_hashes_and_ours() {
    let p = pod(
        json!({
            "app": "api", "version": "v2", "app.kubernetes.io/part-of": "shop",
            "pod-template-hash": "7c9f8d", "hopwise.dev/inject": "enabled",
            "hopwise.dev/service": "api",
        }),
        json!({}),
    );
    assert_eq!(
        labels(&p).unwrap(),
        ["app=api", "app.kubernetes.io/part-of=shop", "version=v2"]
    );
    assert_eq!(
        labels(&pod(json!({}), json!({}))).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn the_annotation_picks_the_labels_and_must_name_the_pods_own() {
    let l = json!({ "app": "api", "version": "v2", "tier": "back" });
    let p = pod(l.clone(), json!({ LABELS: "version, tier" }));
    assert_eq!(labels(&p).unwrap(), ["tier=back", "version=v2"]);
    let p = pod(l, json!({ LABELS: "version,track" }));
    let why = labels(&p).unwrap_err();
    assert!(why.contains("`track`") && why.contains(LABELS), "{why}");
}

#[test]
fn more_labels_than_a_copy_carries_refuse_the_pod_unless_the_annotation_picks() {
    let many: serde_json::Map<String, Value> =
        (0..40).map(|i| (format!("l{i}"), json!("x"))).collect();
    let why = labels(&pod(Value::Object(many.clone()), json!({}))).unwrap_err();
    assert!(why.contains("40 labels") && why.contains(LABELS), "{why}");
    let p = pod(Value::Object(many), json!({ LABELS: "l3,l7" }));
    assert_eq!(labels(&p).unwrap(), ["l3=x", "l7=x"]);
}
