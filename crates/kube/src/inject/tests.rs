//! The decision and the patch on pods, and the review's answers to well-formed and malformed
//! bodies: each patch is applied (json-patch) and the pod read back.

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};
use serde_json::{Value, json};

use super::*;

fn inject() -> Inject {
    Inject::new("hopwise:test", "https://hopwise-control.hopwise.svc:7900")
}

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn app() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "a", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    })
}

/// The pod with its patch applied, or why there is none.
fn injected(v: Value) -> Result<Value, Decision> {
    match decide(&pod(v.clone()), &inject()) {
        Decision::Inject(patch) => {
            let mut doc = v;
            json_patch::patch(&mut doc, &patch).unwrap();
            Ok(doc)
        }
        other => Err(other),
    }
}

fn names(v: &Value, list: &str) -> Vec<String> {
    v["spec"][list]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_plain_pod_gets_the_rules_the_sidecar_its_token_and_the_mark() {
    let done = injected(app()).unwrap();
    assert_eq!(
        names(&done, "initContainers"),
        ["hopwise-init", "hopwise-proxy"]
    );
    assert_eq!(names(&done, "containers"), ["app"]);
    assert_eq!(names(&done, "volumes"), ["hopwise-token", "hopwise-cache"]);
    let init = &done["spec"]["initContainers"][0];
    assert_eq!(
        init["securityContext"]["capabilities"]["add"],
        json!(["NET_ADMIN", "NET_RAW"])
    );
    assert!(init["args"].as_array().unwrap().contains(&json!("2140")));
    let proxy = &done["spec"]["initContainers"][1];
    assert_eq!(proxy["restartPolicy"], "Always");
    assert_eq!(proxy["securityContext"]["runAsUser"], 2140);
    let env: Vec<(&str, &str)> = proxy["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let field = e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap();
            (e["name"].as_str().unwrap(), field)
        })
        .collect();
    assert_eq!(env, sidecar::DOWNWARD_ENV);
    let token = &done["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(token["audience"], "hopwise");
    assert_eq!(token["expirationSeconds"], 86_400);
    assert_eq!(
        done["metadata"]["annotations"][INJECTED],
        env!("CARGO_PKG_VERSION")
    );
    // Still a pod Kubernetes' types read.
    let _ = pod(done);
}

#[test]
fn what_the_pod_had_is_kept_and_ours_goes_first() {
    let mut v = app();
    v["metadata"]["annotations"] = json!({"keep": "me"});
    v["spec"]["serviceAccountName"] = json!("shop");
    v["spec"]["initContainers"] = json!([{"name": "migrate", "image": "m:1"}]);
    v["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let done = injected(v).unwrap();
    assert_eq!(
        names(&done, "initContainers"),
        ["hopwise-init", "hopwise-proxy", "migrate"]
    );
    assert_eq!(
        names(&done, "volumes"),
        ["data", "hopwise-token", "hopwise-cache"]
    );
    assert_eq!(done["metadata"]["annotations"]["keep"], "me");
    assert_eq!(done["spec"]["serviceAccountName"], "shop");
    assert!(done["metadata"]["annotations"][INJECTED].is_string());
}

#[test]
fn a_pod_without_metadata_gets_a_patch_that_applies() {
    // Found by fuzzing (issue 34): the patch added `/metadata/annotations` to a pod that has no
    // `metadata`, which no JSON patch can apply (the API server would have failed the request).
    for metadata in [None, Some(json!({}))] {
        let mut v = app();
        match metadata {
            None => drop(v.as_object_mut().unwrap().remove("metadata")),
            Some(m) => v["metadata"] = m,
        }
        let done = injected(v.clone()).unwrap();
        assert_eq!(
            done["metadata"]["annotations"][INJECTED],
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(
            names(&done, "initContainers"),
            ["hopwise-init", "hopwise-proxy"]
        );
        // The same through a review: admitted with a patch that applies to the pod as sent.
        let r = respond(review(v.clone(), "CREATE").to_string().as_bytes());
        assert!(r.allowed, "{r:?}");
        let patch: json_patch::Patch = serde_json::from_slice(&r.patch.unwrap()).unwrap();
        let mut doc = v;
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(doc, done);
    }
}

#[test]
fn an_injected_pod_is_left_alone() {
    let once = injected(app()).unwrap();
    assert_eq!(injected(once), Err(Decision::Skip(Skip::Injected)));
    // A container of ours without the mark (copied from an injected pod) counts too.
    let mut v = app();
    v["spec"]["containers"][0]["name"] = json!(PROXY_CONTAINER);
    assert_eq!(injected(v), Err(Decision::Skip(Skip::Injected)));
}

#[test]
fn an_annotation_or_a_label_opts_out() {
    for place in ["annotations", "labels"] {
        let mut v = app();
        v["metadata"][place] = json!({ INJECT: DISABLED });
        assert_eq!(injected(v), Err(Decision::Skip(Skip::OptedOut)), "{place}");
    }
}

#[test]
fn unsafe_pods_are_refused_with_the_reason() {
    let mut v = app();
    v["spec"]["hostNetwork"] = json!(true);
    let Err(Decision::Refuse(why)) = injected(v) else {
        panic!()
    };
    assert!(why.contains("host's network"), "{why}");

    let mut v = app();
    v["spec"]["securityContext"] = json!({"runAsUser": 2140});
    let Err(Decision::Refuse(why)) = injected(v) else {
        panic!()
    };
    assert!(why.contains("container app runs as uid 2140"), "{why}");
    // A container's own uid wins over the pod's.
    let mut v = app();
    v["spec"]["securityContext"] = json!({"runAsUser": 2140});
    v["spec"]["containers"][0]["securityContext"] = json!({"runAsUser": 1000});
    assert!(injected(v).is_ok());
}

fn review(object: Value, operation: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "7f0b2e1c", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": operation,
            "userInfo": {"username": "someone"}, "object": object, "dryRun": false
        }
    })
}

fn respond(body: &[u8]) -> AdmissionResponse {
    let answer = answer(body, &inject()).unwrap();
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(&answer).unwrap();
    assert_eq!(review.types.api_version, "admission.k8s.io/v1");
    assert_eq!(review.types.kind, "AdmissionReview");
    review.response.unwrap()
}

#[test]
fn a_review_of_a_pods_creation_is_answered_with_the_patch() {
    let r = respond(review(app(), "CREATE").to_string().as_bytes());
    assert_eq!((r.uid.as_str(), r.allowed), ("7f0b2e1c", true));
    let patch: json_patch::Patch = serde_json::from_slice(&r.patch.unwrap()).unwrap();
    let mut doc = app();
    json_patch::patch(&mut doc, &patch).unwrap();
    assert_eq!(doc, injected(app()).unwrap());
}

#[test]
fn reviews_of_anything_else_are_admitted_unchanged() {
    let update = respond(review(app(), "UPDATE").to_string().as_bytes());
    let mut other = review(json!({"apiVersion": "v1", "kind": "ConfigMap"}), "CREATE");
    other["request"]["kind"]["kind"] = json!("ConfigMap");
    let other = respond(other.to_string().as_bytes());
    let mut opted_out = app();
    opted_out["metadata"]["annotations"] = json!({ INJECT: DISABLED });
    let opted_out = respond(review(opted_out, "CREATE").to_string().as_bytes());
    for r in [update, other, opted_out] {
        assert!(r.allowed && r.patch.is_none(), "{r:?}");
    }
}

#[test]
fn a_body_that_is_no_review_is_a_bad_request() {
    let bad = |b: &[u8]| answer(b, &inject()).unwrap_err();
    assert!(matches!(bad(b"{not json"), BadReview::NotJson(_)));
    assert!(matches!(bad(b"[]"), BadReview::NotAReview { .. }));
    let mut v1beta1 = review(app(), "CREATE");
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    assert!(matches!(
        bad(v1beta1.to_string().as_bytes()),
        BadReview::NotAReview { .. }
    ));
    for uid in [json!(null), json!(""), json!(7)] {
        let mut v = review(app(), "CREATE");
        v["request"]["uid"] = uid;
        assert_eq!(bad(v.to_string().as_bytes()), BadReview::NoUid);
    }
}

#[test]
fn a_review_whose_request_cannot_be_read_is_refused_with_its_uid() {
    let mut cases = Vec::new();
    let mut v = review(app(), "CREATE");
    v["request"]["object"]["spec"]["containers"] = json!(5);
    cases.push((v, "cannot be read"));
    let mut v = review(app(), "CREATE");
    v["request"]["operation"] = json!("EXPLODE");
    cases.push((v, "cannot be read"));
    let mut v = review(app(), "CREATE");
    v["request"].as_object_mut().unwrap().remove("userInfo");
    cases.push((v, "cannot be read"));
    cases.push((review(Value::Null, "CREATE"), "without the pod"));
    let mut v = review(app(), "CREATE");
    v["request"]["kind"] = json!("Pod");
    cases.push((v, "names no kind"));
    let mut v = review(app(), "CREATE");
    v["request"]["object"]["spec"]["hostNetwork"] = json!(true);
    cases.push((v, "host's network"));
    for (v, says) in cases {
        let r = respond(v.to_string().as_bytes());
        assert_eq!((r.uid.as_str(), r.allowed), ("7f0b2e1c", false), "{v}");
        assert!(r.result.message.contains(says), "{}", r.result.message);
        assert_eq!(r.result.code, 400);
    }
}

#[test]
fn every_prefix_of_a_review_is_answered_without_a_panic() {
    let full = review(app(), "CREATE").to_string();
    for end in 0..full.len() {
        // Err (no review) or a refusal; the whole one alone is admitted.
        if let Ok(a) = answer(&full.as_bytes()[..end], &inject()) {
            let r: AdmissionReview<DynamicObject> = serde_json::from_slice(&a).unwrap();
            assert!(!r.response.unwrap().allowed);
        }
    }
}

/// The proxy container's arguments and its CA variable, for a pod injected with `inject`.
fn proxy_of(v: Value, inject: &Inject) -> (Vec<String>, Option<String>) {
    let Decision::Inject(patch) = decide(&pod(v.clone()), inject) else {
        panic!("not injected");
    };
    let mut doc = v;
    json_patch::patch(&mut doc, &patch).unwrap();
    let proxy = &doc["spec"]["initContainers"][1];
    let args = serde_json::from_value(proxy["args"].clone()).unwrap();
    let ca = proxy["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == CONTROL_CA_ENV)
        .map(|e| e["value"].as_str().unwrap().to_owned());
    (args, ca)
}

fn flag(args: &[String], name: &str) -> String {
    let at = args.iter().position(|a| a == name).unwrap();
    args[at + 1].clone()
}

#[test]
fn the_proxy_is_told_its_service_its_name_and_the_control_planes_ca() {
    let mut with_ca = inject();
    with_ca.control_ca_pem = Some("-----BEGIN CERTIFICATE-----\n…".into());
    // No label, no ServiceAccount: `default`'s, as the patch sets.
    let (args, ca) = proxy_of(app(), &with_ca);
    assert_eq!(flag(&args, "--service"), "default");
    assert_eq!(flag(&args, "--name"), "$(HOPWISE_POD_NAME)");
    assert_eq!(flag(&args, "--inbound"), "0.0.0.0:4143");
    assert_eq!(ca.as_deref(), with_ca.control_ca_pem.as_deref());
    // The ServiceAccount's name, unless the label names the service.
    let mut v = app();
    v["spec"]["serviceAccountName"] = json!("web");
    assert_eq!(flag(&proxy_of(v.clone(), &with_ca).0, "--service"), "web");
    v["metadata"]["labels"] = json!({ SERVICE_LABEL: "storefront" });
    assert_eq!(flag(&proxy_of(v, &with_ca).0, "--service"), "storefront");
    // Without a CA given, no variable (the proxy then refuses to start, saying why).
    assert_eq!(proxy_of(app(), &inject()).1, None);
}

#[test]
fn the_proxy_hands_inbound_requests_to_the_apps_first_tcp_port_or_the_annotated_one() {
    let has = |v: Value| {
        let args = proxy_of(v, &inject()).0;
        args.iter()
            .position(|a| a == "--app-port")
            .map(|at| args[at + 1].clone())
    };
    // No port declared: no app port (the proxy answers inbound requests 503).
    assert_eq!(has(app()), None);
    // The first container's first TCP port; a UDP one before it is not the app's.
    let mut v = app();
    v["spec"]["containers"][0]["ports"] = json!([
        { "containerPort": 53, "protocol": "UDP" },
        { "containerPort": 8080 },
        { "containerPort": 9090, "protocol": "TCP" },
    ]);
    assert_eq!(has(v.clone()), Some("8080".into()));
    // The annotation wins.
    v["metadata"]["annotations"] = json!({ APP_PORT: "9090" });
    assert_eq!(has(v.clone()), Some("9090".into()));
    // The proxy's own ports are refused, declared or annotated: requests would loop to it.
    let mut own = app();
    own["spec"]["containers"][0]["ports"] = json!([{ "containerPort": 4143 }]);
    match decide(&pod(own.clone()), &inject()) {
        Decision::Refuse(why) => assert!(why.contains("4143") && why.contains(APP_PORT), "{why}"),
        other => panic!("{other:?}"),
    }
    own["metadata"]["annotations"] = json!({ APP_PORT: "8080" });
    assert_eq!(has(own), Some("8080".into()));
    // One that is no port, or the proxy's, refuses the pod, naming it.
    for bad in ["0", "http", "70000", "", "4191"] {
        v["metadata"]["annotations"] = json!({ APP_PORT: bad });
        match decide(&pod(v.clone()), &inject()) {
            Decision::Refuse(why) => assert!(why.contains(APP_PORT), "{why}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}
