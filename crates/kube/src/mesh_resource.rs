//! The mesh file as a custom resource: a cluster-wide `Mesh` (`hopwise.dev/v1alpha1`) named
//! `default` whose `spec` is the mesh file's document, validated by the API server with the
//! schema `hopwise schema` prints ([`schema::structural`]). `hopwise control --kubernetes` starts
//! on it and applies each new generation as `hopwise control apply` applies a file (read, `hopwise
//! check`ed, refused whole on an error), writing what happened to its `status`. Pure but for the
//! watch ([`watch`]).

use serde_json::{Value, json};

pub mod admission;
pub mod schema;
mod watch;
pub use watch::{get, watch, write_status};

pub const GROUP: &str = "hopwise.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "Mesh";
pub const PLURAL: &str = "meshes";
/// The one `Mesh` the control plane reads (as Kuma's default mesh): one control plane, one
/// mesh file.
pub const NAME: &str = "default";

/// The CustomResourceDefinition, its `spec` schema from the mesh file's (`schema`: what
/// `hopwise_model::schema()` gives, as JSON).
pub fn definition(schema: &Value) -> Value {
    let mut spec = schema::structural(schema);
    if let Some(m) = spec.as_object_mut() {
        m.insert(
            "description".into(),
            json!("The mesh file (docs/mesh.md), as `hopwise check` reads it."),
        );
    }
    let status = json!({
        "type": "object",
        "description": "What the control plane made of the spec.",
        "x-kubernetes-preserve-unknown-fields": true,
    });
    let column =
        |name: &str, path: &str, ty: &str| json!({ "name": name, "type": ty, "jsonPath": path });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{PLURAL}.{GROUP}") },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": { "kind": KIND, "plural": PLURAL, "singular": "mesh", "listKind": "MeshList" },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "additionalPrinterColumns": [
                    column("Accepted", ".status.conditions[?(@.type==\"Accepted\")].status", "string"),
                    column("Reason", ".status.conditions[?(@.type==\"Accepted\")].reason", "string"),
                    column("Config", ".status.configVersion", "integer"),
                    column("Age", ".metadata.creationTimestamp", "date"),
                ],
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": { "spec": spec, "status": status },
                }},
            }],
        },
    })
}

/// A mesh file's text as the JSON a `Mesh`'s `spec` holds (keys in the file's order); `Err`
/// with the YAML reader's problem (`file` names it).
pub fn spec_of(text: &str, file: &str) -> Result<Value, String> {
    let tree = hopwise_model::yaml::parse(text).map_err(|d| d.render(file))?;
    let json = hopwise_model::yaml::json::write(&tree, &|_| Vec::new());
    serde_json::from_str(&json).map_err(|e| format!("{file} as JSON: {e}"))
}

/// A `Mesh` named [`NAME`] holding `spec` (a mesh file as JSON).
pub fn object(spec: Value) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": { "name": NAME },
        "spec": spec,
    })
}

/// The mesh file a `Mesh` holds, as text the control plane reads (JSON, which YAML 1.2 reads
/// as it is), and its generation.
pub fn mesh_text(object: &Value) -> Result<(String, i64), String> {
    let spec = object
        .get("spec")
        .filter(|s| s.is_object())
        .ok_or("no spec")?;
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
    let text = serde_json::to_string_pretty(spec).map_err(|e| e.to_string())?;
    Ok((text, generation))
}

/// What the control plane made of a generation of the `Mesh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// In force (changed or the same as before).
    pub accepted: bool,
    /// `Applied`, `Unchanged`, `Invalid` (does not read) or `Refused` (`hopwise check` errors, a
    /// new trust domain).
    pub reason: String,
    pub message: String,
    /// The configuration version in force afterwards.
    pub config_version: u64,
    /// Why it does not read, each with its place.
    pub problems: Vec<String>,
    /// `hopwise check`'s findings.
    pub findings: Vec<Found>,
}

impl Outcome {
    /// Not in force, for `reason`.
    pub fn refused(reason: &str, message: String) -> Outcome {
        Outcome {
            accepted: false,
            reason: reason.to_owned(),
            message,
            config_version: 0,
            problems: Vec::new(),
            findings: Vec::new(),
        }
    }
}

/// One of `hopwise check`'s findings, as the status lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Found {
    /// `error`, `warning` or `info`.
    pub severity: String,
    pub code: String,
    /// Where in the mesh file (`services.web.calls.api.retries`).
    pub path: String,
    pub message: String,
}

/// The `status` body for `generation` of the `Mesh`.
pub fn status(generation: i64, outcome: &Outcome) -> Value {
    json!({ "status": {
        "observedGeneration": generation,
        "configVersion": outcome.config_version,
        "conditions": [{
            "type": "Accepted",
            "status": if outcome.accepted { "True" } else { "False" },
            "reason": outcome.reason,
            "message": outcome.message,
            "observedGeneration": generation,
            "lastTransitionTime": crate::routes::now_rfc3339(),
        }],
        "problems": outcome.problems,
        "findings": outcome.findings,
    }})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_text_is_the_spec_and_a_mesh_without_one_is_refused() {
        let mesh = json!({ "metadata": { "name": "default", "generation": 3 },
            "spec": { "services": { "web": {} } } });
        let (text, generation) = mesh_text(&mesh).unwrap();
        assert_eq!(generation, 3);
        let read = hopwise_model::Mesh::from_yaml(&text).unwrap();
        assert!(read.services.contains_key("web"), "{text}");
        assert!(mesh_text(&json!({ "metadata": {} })).is_err());
    }

    #[test]
    fn a_spec_is_the_files_tree_and_a_file_that_does_not_read_says_where() {
        let spec = spec_of(
            "services:\n  web: { calls: { api: {} } }\n  api:\n",
            "m.yaml",
        )
        .unwrap();
        assert_eq!(
            spec,
            json!({ "services": { "web": { "calls": { "api": {} } }, "api": null } })
        );
        let err = spec_of("services: [", "m.yaml").unwrap_err();
        assert!(err.contains("m.yaml"), "{err}");
    }

    #[test]
    fn a_refusal_says_false_with_its_findings() {
        let mut outcome = Outcome::refused("Refused", "1 error".into());
        outcome.config_version = 4;
        outcome.findings = vec![Found {
            severity: "error".into(),
            code: "retry-storm".into(),
            path: "services.web.calls.api.retries".into(),
            message: "27 attempts".into(),
        }];
        let s = &status(7, &outcome)["status"];
        assert_eq!(s["observedGeneration"], 7);
        assert_eq!(s["configVersion"], 4);
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["reason"], "Refused");
        assert_eq!(s["findings"][0]["code"], "retry-storm");
        assert_eq!(s["findings"][0]["path"], "services.web.calls.api.retries");
    }

    #[test]
    fn the_definition_is_cluster_wide_with_a_status() {
        let schema = serde_json::to_value(hopwise_model::schema()).unwrap();
        let crd = definition(&schema);
        assert_eq!(crd["metadata"]["name"], "meshes.hopwise.dev");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let v = &crd["spec"]["versions"][0];
        assert!(v["subresources"]["status"].is_object());
        let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["type"], "object");
        assert!(spec["properties"]["services"].is_object(), "{spec}");
    }
}
