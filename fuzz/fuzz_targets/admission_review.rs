//! The injection webhook's one entry (`hopwise_kube::inject::answer`) on any body, as the API
//! server's POST would carry it. Never a panic, and:
//! - a body that is not JSON, not an `admission.k8s.io/v1` `AdmissionReview`, or without a
//!   request uid gets no answer (the server's 400), and only such a body;
//! - every answer is a v1 `AdmissionReview` whose response carries the request's uid; a refusal
//!   says why, with code 400, and carries no patch;
//! - a patch comes only for a Pod's creation, applies (RFC 6902, `json-patch`) to the pod as the
//!   review sent it, and gives a pod Kubernetes' types still read: marked as injected, our two
//!   init containers first and the pod's own after them in their order, its containers as they
//!   were, its volumes first and ours after, and one that `decide` now leaves alone
//!   (injection is idempotent).
#![no_main]

#[path = "review_common.rs"]
mod review_common;

use hopwise_kube::inject::{
    CACHE_VOLUME, Decision, INIT_CONTAINER, INJECTED, Inject, PROXY_CONTAINER, Skip, TOKEN_VOLUME,
    answer, decide,
};
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let inject = Inject::new("hopwise:fuzz", "https://hopwise-control.hopwise.svc:7900");
    let sent: Option<Value> = serde_json::from_slice(data).ok();
    let out = match answer(data, &inject) {
        Ok(out) => out,
        Err(e) => return review_common::no_answer(sent.as_ref(), &e),
    };
    let sent = sent.expect("an answer to a body that is not JSON");
    let uid = sent.pointer("/request/uid").and_then(Value::as_str);
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(&out).expect("the answer reads back as a review");
    assert_eq!(review.types.api_version, "admission.k8s.io/v1");
    assert_eq!(review.types.kind, "AdmissionReview");
    let r = review.response.expect("an answer without a response");
    assert_eq!(Some(r.uid.as_str()), uid);
    if !r.allowed {
        assert!(r.patch.is_none(), "a refusal with a patch");
        assert_eq!(r.result.code, 400);
        assert!(!r.result.message.is_empty(), "a refusal without a reason");
        return;
    }
    let Some(patch) = r.patch else {
        return;
    };
    let at = |p: &str| sent.pointer(p).and_then(Value::as_str);
    assert_eq!(
        (at("/request/kind/kind"), at("/request/operation")),
        (Some("Pod"), Some("CREATE")),
        "a patch for something else than a Pod's creation"
    );
    let patch: json_patch::Patch = serde_json::from_slice(&patch).expect("the patch reads");
    let before = sent
        .pointer("/request/object")
        .cloned()
        .expect("a patch for no pod");
    let mut after = before.clone();
    if let Err(e) = json_patch::patch(&mut after, &patch) {
        panic!("the patch does not apply to the pod sent: {e}\n{before}\n{patch:?}");
    }
    let pod: Pod = serde_json::from_value(after.clone())
        .unwrap_or_else(|e| panic!("the patched pod does not read as a Pod: {e}\n{after}"));
    let was: Pod = serde_json::from_value(before).expect("a patch for a pod that does not read");
    let marks = pod.metadata.annotations.as_ref();
    assert!(marks.is_some_and(|a| a.contains_key(INJECTED)), "{after}");
    let (spec, was_spec) = (
        pod.spec.as_ref().expect("a patched pod without a spec"),
        was.spec.as_ref().expect("a pod without a spec patched"),
    );
    let names = |cs: Option<&Vec<k8s_openapi::api::core::v1::Container>>| {
        cs.into_iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    let mut init = vec![INIT_CONTAINER.to_owned(), PROXY_CONTAINER.to_owned()];
    init.extend(names(was_spec.init_containers.as_ref()));
    assert_eq!(names(spec.init_containers.as_ref()), init);
    assert_eq!(
        spec.containers, was_spec.containers,
        "the pod's containers changed"
    );
    let volumes = |vs: &Option<Vec<k8s_openapi::api::core::v1::Volume>>| {
        vs.iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect::<Vec<_>>()
    };
    let mut want = volumes(&was_spec.volumes);
    want.extend([TOKEN_VOLUME.to_owned(), CACHE_VOLUME.to_owned()]);
    assert_eq!(volumes(&spec.volumes), want);
    assert_eq!(decide(&pod, &inject), Decision::Skip(Skip::Injected));
});
