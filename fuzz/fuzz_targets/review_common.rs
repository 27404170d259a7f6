//! What both admission targets (`admission_review`, `mesh_admission`) ask of a body that got
//! no answer: that it truly had none to get.

use hopwise_kube::review::BadReview;
use serde_json::Value;

/// `e` said of `sent` (the body read as JSON, if it was): a body that is not JSON, not an
/// `admission.k8s.io/v1` `AdmissionReview`, or without a request uid — and only such a body.
pub fn no_answer(sent: Option<&Value>, e: &BadReview) {
    match e {
        BadReview::NotJson(_) => assert!(sent.is_none(), "JSON called not JSON"),
        BadReview::NotAReview { .. } => {
            let sent = sent.expect("not JSON, yet read as JSON");
            let says = |k: &str, v: &str| sent.get(k).and_then(Value::as_str) == Some(v);
            assert!(
                !(says("apiVersion", "admission.k8s.io/v1") && says("kind", "AdmissionReview"))
            );
        }
        BadReview::NoUid => {
            let sent = sent.expect("not JSON, yet read as JSON");
            let uid = sent.pointer("/request/uid").and_then(Value::as_str);
            assert!(uid.is_none_or(str::is_empty), "uid {uid:?} not found");
        }
        BadReview::Answer(_) => panic!("{e}"),
    }
}
