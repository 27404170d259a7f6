//! `POST /validate-mesh`: a `Mesh`'s creation or update judged before the API server stores it,
//! so `kubectl apply` itself refuses what `hopwise control apply` refuses (a file that does not
//! read, `hopwise check` errors), with the same words; the warnings come back as kubectl's
//! `Warning:` lines. The control plane judges every generation again when it applies it: this
//! is the early answer, not the authority (registered `Ignore` on failure, `registration.rs`).
//! Pure: the judge is the binary's (`hopwise_control::plane::prepare`), so this crate links no
//! checker.

use kube::core::admission::AdmissionResponse;

use super::{KIND, mesh_text};
use crate::review::{BadReview, admitted, envelope, finish, refusal};

/// The path the webhook answers `Mesh` reviews on.
pub const PATH: &str = "/validate-mesh";
/// At most this many warnings go back (the API server keeps at most 4 KiB of them per answer).
const WARNINGS: usize = 8;

/// What a judge makes of a mesh file's text: admitted with warnings, or refused with why.
pub type Judge = dyn Fn(&str) -> Result<Vec<String>, String> + Send + Sync;

/// The answer to one review: a `Mesh` created or updated is judged; anything else admitted.
pub fn answer(body: &[u8], judge: &Judge) -> Result<Vec<u8>, BadReview> {
    let (value, uid) = envelope(body)?;
    let kind = value.pointer("/request/kind/kind").and_then(|k| k.as_str());
    let object = value.pointer("/request/object").filter(|o| o.is_object());
    let response = match (kind, object) {
        (Some(KIND), Some(object)) => match mesh_text(object) {
            Ok((text, _)) => judged(&uid, judge(&text)),
            Err(why) => refusal(&uid, format!("Mesh: {why}")),
        },
        // A deletion (no object), or a kind a wider registration sent: not ours to judge.
        _ => admitted(&uid),
    };
    finish(response)
}

fn judged(uid: &str, verdict: Result<Vec<String>, String>) -> AdmissionResponse {
    match verdict {
        Err(why) => refusal(uid, format!("hopwise: {why}")),
        Ok(warnings) if warnings.is_empty() => admitted(uid),
        Ok(mut warnings) => {
            if warnings.len() > WARNINGS {
                let more = warnings.len() - WARNINGS;
                warnings.truncate(WARNINGS);
                warnings.push(format!(
                    "hopwise check: {more} more (`hopwise check` says all)"
                ));
            }
            let mut response = admitted(uid);
            response.warnings = Some(warnings);
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn review(kind: &str, object: Value) -> Vec<u8> {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": { "group": "hopwise.dev", "version": "v1alpha1", "kind": kind },
                "resource": { "group": "hopwise.dev", "version": "v1alpha1", "resource": "meshes" },
                "operation": "UPDATE",
                "name": "default",
                "userInfo": {},
                "object": object,
            },
        })
        .to_string()
        .into_bytes()
    }

    fn response(bytes: &[u8]) -> Value {
        serde_json::from_slice::<Value>(bytes).unwrap()["response"].clone()
    }

    fn judge(text: &str) -> Result<Vec<String>, String> {
        match text {
            t if t.contains("bad") => Err("`hopwise check`: exceeds-client: 5 s > 1 s".into()),
            t if t.contains("noisy") => Ok((0..10).map(|i| format!("w{i}")).collect()),
            _ => Ok(Vec::new()),
        }
    }

    #[test]
    fn a_refused_mesh_is_denied_with_the_judges_words() {
        let body = review(
            "Mesh",
            json!({ "metadata": { "name": "default" }, "spec": { "bad": 1 } }),
        );
        let r = response(&answer(&body, &judge).unwrap());
        assert_eq!(r["uid"], "u-1");
        assert_eq!(r["allowed"], false);
        let message = r["status"]["message"].as_str().unwrap();
        assert!(message.contains("exceeds-client"), "{r}");
    }

    #[test]
    fn warnings_come_back_bounded_and_a_good_mesh_is_admitted() {
        let good = review(
            "Mesh",
            json!({ "metadata": {}, "spec": { "services": {} } }),
        );
        assert_eq!(response(&answer(&good, &judge).unwrap())["allowed"], true);
        let noisy = review("Mesh", json!({ "metadata": {}, "spec": { "noisy": 1 } }));
        let r = response(&answer(&noisy, &judge).unwrap());
        assert_eq!(r["allowed"], true);
        let warnings = r["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), WARNINGS + 1, "{r}");
        assert!(warnings[WARNINGS].as_str().unwrap().contains("2 more"));
    }

    #[test]
    fn a_mesh_without_a_spec_is_denied_and_other_kinds_admitted() {
        let none = review("Mesh", json!({ "metadata": {} }));
        assert_eq!(response(&answer(&none, &judge).unwrap())["allowed"], false);
        let other = review("Pod", json!({ "metadata": {}, "spec": { "bad": 1 } }));
        assert_eq!(response(&answer(&other, &judge).unwrap())["allowed"], true);
        assert!(answer(b"[]", &judge).is_err());
    }
}
