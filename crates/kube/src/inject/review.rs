//! An `AdmissionReview` (admission.k8s.io/v1) in, its answer out, as bytes: the one entry the
//! webhook's server calls. Read in two steps so that every malformed review gets the clearest
//! answer it can: a body that is not a review at all, or one without a request uid to answer,
//! is a [`BadReview`] (the server's HTTP 400: there is nothing to reply to); a review whose
//! request or pod cannot be read is refused (`allowed: false`, its uid, the reason). A review
//! of anything but a Pod's creation is admitted unchanged. Never panics; pure.

use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;

use super::{Decision, Inject, decide};
use crate::review::{BadReview, admitted, envelope, finish, refusal};

/// The answer to one review: the JSON of an `AdmissionReview` holding the response.
pub fn answer(body: &[u8], inject: &Inject) -> Result<Vec<u8>, BadReview> {
    let (value, uid) = envelope(body)?;
    let kind = |key: &str| {
        value
            .pointer(&format!("/request/kind/{key}"))
            .and_then(Value::as_str)
    };
    let response = match (kind("group"), kind("version"), kind("kind")) {
        (Some(""), Some("v1"), Some("Pod")) => {
            match serde_json::from_value::<AdmissionReview<Pod>>(value) {
                Ok(review) => match review.try_into() {
                    Ok(request) => respond(&request, inject),
                    Err(_) => refusal(&uid, "the review has no request".to_owned()),
                },
                Err(e) => refusal(&uid, format!("the review's request cannot be read: {e}")),
            }
        }
        // Not ours to change (a registration wider than ours sent it): admitted as it is.
        (Some(_), Some(_), Some(_)) => unchanged(&uid),
        _ => refusal(&uid, "the review's request names no kind".to_owned()),
    };
    finish(response)
}

fn respond(request: &AdmissionRequest<Pod>, inject: &Inject) -> AdmissionResponse {
    let allowed = AdmissionResponse::from(request);
    let creation = matches!(request.operation, Operation::Create);
    if !creation || request.sub_resource.is_some() {
        return unchanged(&request.uid);
    }
    let Some(object) = &request.object else {
        return refusal(&request.uid, "a Pod's creation without the pod".to_owned());
    };
    match decide(object, inject) {
        Decision::Skip(skip) => with_warning(allowed, skip.reason()).audit(skip.reason()),
        Decision::Refuse(why) => refusal(&request.uid, format!("hopwise injection: {why}")),
        Decision::Inject(patch) => match allowed.with_patch(patch) {
            Ok(patched) => patched.audit("injected"),
            Err(e) => refusal(&request.uid, format!("writing the patch: {e}")),
        },
    }
}

fn unchanged(uid: &str) -> AdmissionResponse {
    with_warning(admitted(uid), "hopwise injects pods at their creation only")
}

fn with_warning(mut response: AdmissionResponse, warning: &str) -> AdmissionResponse {
    response.warnings = Some(vec![format!("hopwise: {warning}")]);
    response
}

/// The audit log's note of what injection did (the API server prefixes the webhook's name).
trait Audit {
    fn audit(self, what: &str) -> Self;
}

impl Audit for AdmissionResponse {
    fn audit(mut self, what: &str) -> Self {
        self.audit_annotations
            .insert("injection".to_owned(), what.to_owned());
        self
    }
}
