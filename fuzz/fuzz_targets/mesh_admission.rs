//! `hopwise webhook`'s `/validate-mesh` (`hopwise_kube::mesh_resource::admission::answer`, with
//! the judge the binary gives it: `hopwise_control::plane::prepare(..).admission()`) on any body,
//! as the API server's POST would carry it. Never a panic, and:
//! - a body that is not JSON, not an `admission.k8s.io/v1` `AdmissionReview`, or without a
//!   request uid gets no answer (the server's 400), and only such a body;
//! - every answer is a v1 `AdmissionReview` whose response carries the request's uid, and never
//!   a patch (a validation changes nothing);
//! - a `Mesh` with a mapping as its spec is admitted exactly when `hopwise control apply` would
//!   take its file (the same text the control plane reads, `mesh_text`), with at most 9
//!   warnings; one without a spec is refused; any other kind admitted; a refusal says why, 400.
#![no_main]

#[path = "review_common.rs"]
mod review_common;

use hopwise_kube::mesh_resource::admission::answer;
use hopwise_kube::mesh_resource::mesh_text;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn judge(text: &str) -> Result<Vec<String>, String> {
    hopwise_control::plane::prepare(text, "Mesh/default").admission()
}

fuzz_target!(|data: &[u8]| {
    let sent: Option<Value> = serde_json::from_slice(data).ok();
    let out = match answer(data, &judge) {
        Ok(out) => out,
        Err(e) => return review_common::no_answer(sent.as_ref(), &e),
    };
    let sent = sent.expect("an answer to a body that is not JSON");
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(&out).expect("the answer reads back as a review");
    assert_eq!(review.types.api_version, "admission.k8s.io/v1");
    let r = review.response.expect("an answer without a response");
    assert_eq!(
        Some(r.uid.as_str()),
        sent.pointer("/request/uid").and_then(Value::as_str)
    );
    assert!(r.patch.is_none(), "a validation with a patch");
    if !r.allowed {
        assert_eq!(r.result.code, 400);
        assert!(!r.result.message.is_empty(), "a refusal without a reason");
    }
    assert!(r.warnings.as_ref().is_none_or(|w| w.len() <= 9));
    let kind = sent.pointer("/request/kind/kind").and_then(Value::as_str);
    let object = sent.pointer("/request/object").filter(|o| o.is_object());
    match (kind, object) {
        (Some("Mesh"), Some(object)) => match mesh_text(object) {
            Ok((text, _)) => assert_eq!(r.allowed, judge(&text).is_ok(), "{text}"),
            Err(_) => assert!(!r.allowed, "a Mesh without a spec admitted"),
        },
        _ => assert!(r.allowed, "not a Mesh, yet refused"),
    }
});
