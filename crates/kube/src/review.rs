//! What every admission webhook of ours shares: an `AdmissionReview` (admission.k8s.io/v1)
//! read as far as its request's uid ([`envelope`]; a body with nothing to answer is a
//! [`BadReview`], the server's 400), the answers (admitted, refused with the reason), and the
//! review written back ([`finish`]). Pure; `inject/review.rs` and `mesh_resource/admission.rs`
//! decide.

use kube::core::Status;
use kube::core::admission::AdmissionResponse;
use serde_json::Value;

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// A body that no review answer can be written for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadReview {
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error("the body is not an {API_VERSION} {KIND} (apiVersion {api_version:?}, kind {kind:?})")]
    NotAReview { api_version: String, kind: String },
    #[error("the review has no request uid to answer")]
    NoUid,
    #[error("writing the answer: {0}")]
    Answer(String),
}

/// The review as JSON and its request's uid.
pub(crate) fn envelope(body: &[u8]) -> Result<(Value, String), BadReview> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| BadReview::NotJson(e.to_string()))?;
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default();
    if text("apiVersion") != API_VERSION || text("kind") != KIND {
        return Err(BadReview::NotAReview {
            api_version: text("apiVersion").to_owned(),
            kind: text("kind").to_owned(),
        });
    }
    let uid = value
        .pointer("/request/uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or(BadReview::NoUid)?
        .to_owned();
    Ok((value, uid))
}

/// Request `uid` refused, for `message` (kubectl prints it).
pub(crate) fn refusal(uid: &str, message: String) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid(&message);
    response.uid = uid.to_owned();
    response.result = Status::failure(&message, "BadRequest").with_code(400);
    response
}

/// Request `uid` admitted as it is.
pub(crate) fn admitted(uid: &str) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid("");
    response.uid = uid.to_owned();
    response.allowed = true;
    response.result = Status::success();
    response
}

/// The review holding `response`, as JSON.
pub(crate) fn finish(response: AdmissionResponse) -> Result<Vec<u8>, BadReview> {
    let mut review = response.into_review();
    review.types.api_version = API_VERSION.to_owned();
    review.types.kind = KIND.to_owned();
    serde_json::to_vec(&review).map_err(|e| BadReview::Answer(e.to_string()))
}
