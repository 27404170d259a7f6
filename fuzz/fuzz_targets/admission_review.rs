//! The injection webhook's one entry (`hopwise_kube::inject::answer`) on any body, as the API
//! server's POST would carry it. Never a panic, and:
//! - a body that is not JSON, not an `admission.k8s.io/v1` `AdmissionReview`, or without a
//!   request uid gets no answer (the server's 400), and only such a body;
//! - every answer is a v1 `AdmissionReview` whose response carries the request's uid; a refusal
//!   says why, with code 400, and carries no patch;
//! - a patch comes only for a Pod's creation, applies (RFC 6902, `json-patch`) to the pod as the
//!   review sent it, and gives a pod Kubernetes' types still read: marked as injected, our two
//!   init containers first and the pod's own after them in their order, its containers as they
//!   were but for probes moved to the proxy's admin port (`httpGet` of
//!   `/app-health/<container>/<kind>` on 4191, every other field of the probe kept, moved only
//!   from an `httpGet`, `tcpSocket` or `grpc` probe), its volumes first and ours after, and one
//!   that `decide` now leaves alone (injection is idempotent).
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
    assert_eq!(spec.containers.len(), was_spec.containers.len());
    for (now, was) in spec.containers.iter().zip(&was_spec.containers) {
        assert_eq!(&moved_back(now, was), was, "the pod's containers changed");
    }
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

/// `now` with each probe injection moved put back as `was` had it, after checking the move:
/// an `httpGet` of `/app-health/<container>/<kind>` on the admin port in place of an `httpGet`,
/// `tcpSocket` or `grpc` probe (not one naming a `host`), every other field the same.
fn moved_back(
    now: &k8s_openapi::api::core::v1::Container,
    was: &k8s_openapi::api::core::v1::Container,
) -> k8s_openapi::api::core::v1::Container {
    use k8s_openapi::api::core::v1::Probe;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let mut back = now.clone();
    let slots = [
        ("startupz", &mut back.startup_probe, &was.startup_probe),
        ("livez", &mut back.liveness_probe, &was.liveness_probe),
        ("readyz", &mut back.readiness_probe, &was.readiness_probe),
    ];
    for (kind, probe, original) in slots {
        if probe == original {
            continue;
        }
        let (Some(moved), Some(original)) = (probe.as_ref(), original.as_ref()) else {
            panic!("a probe added or removed: {probe:?} / {original:?}");
        };
        let get = moved.http_get.as_ref().expect("moved to an httpGet");
        assert_eq!(get.port, IntOrString::Int(4191));
        assert_eq!(get.path.as_deref(), Some(format!("/app-health/{}/{kind}", now.name).as_str()));
        let host = |h: &Option<String>| h.as_deref().is_some_and(|h| !h.is_empty());
        let movable = original.http_get.as_ref().is_some_and(|g| !host(&g.host))
            || original.tcp_socket.as_ref().is_some_and(|t| !host(&t.host))
            || original.grpc.is_some();
        assert!(movable, "moved from {original:?}");
        let rest = |p: &Probe| Probe {
            http_get: None,
            tcp_socket: None,
            grpc: None,
            exec: None,
            ..p.clone()
        };
        assert_eq!(rest(moved), rest(original), "a probe's other fields changed");
        *probe = Some(original.clone());
    }
    back
}
