//! The `Mesh` CRD (`mesh_resource.rs`, its schema converted from `hopwise schema`) on a real
//! kube-apiserver: it is accepted as a structural schema; every mesh file of `examples/` and one
//! with every kind of route rule applies as a `Mesh` with kubectl's server-side apply (strict
//! field validation, as users run it) and reads back unchanged — nothing pruned; a wrong type, an
//! unknown field and a value outside an enum are refused by the API server, naming the field.

// Test helpers: a failure should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;

use hopwise_kube::mesh_resource;
use hopwise_kube::testing::ApiServer;
use serde_json::{Value, json};

/// Routes with every kind of match, filter and backend, and the unions a structural schema
/// leaves open (copies as a list, a budget of `none`, allow as a list, sampling as a share).
const RULES: &str = r#"mesh:
  trust_domain: t.local
  tracing: { sampling: 1% }
defaults: { budget: none, timeout: 2s }
services:
  web:
    calls: { pricing: { retries: { count: 1 } }, pricing-v2: {} }
    copies: [{ app: "127.0.0.1:9000" }]
  pricing:
    allow: [web]
    inbound: { rate_limit: { total: { rate: 100, burst: 10 } } }
    fault: { abort: { status: 503, percent: 1 } }
    routes:
      canary:
        rules:
          - name: beta
            matches:
              - path: { type: RegularExpression, value: "^/quote/[0-9]+$" }
                method: GET
                headers: [{ name: x-beta, value: "1" }]
                query_params: [{ name: v, type: Exact, value: "2" }]
            filters:
              - type: RequestHeaderModifier
                request_header_modifier: { set: [{ name: x-canary, value: "yes" }], remove: [x-debug] }
            backends: [{ service: pricing-v2, weight: 90 }, { service: pricing, weight: 10 }]
          - matches: [{ path: { value: /quote } }]
            backends: [{ service: pricing }]
  pricing-v2: {}
"#;

/// A mesh file as the JSON the API server holds.
fn json_of(text: &str) -> Value {
    mesh_resource::spec_of(text, "mesh.yaml").unwrap()
}

/// `v` with every empty mapping as null: server-side apply keeps `api: {}` as `api: null`,
/// which the mesh file's reader takes as the same empty mapping.
fn empty_as_null(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.is_empty() => Value::Null,
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), empty_as_null(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(empty_as_null).collect()),
        other => other.clone(),
    }
}

/// Every mesh file under `examples/` (those `hopwise check` reads: a top-level `services`).
fn examples() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files = Vec::new();
    for dir in ["seed", "library", "shop"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if path.extension().is_some_and(|e| e == "yaml") && text.contains("\nservices:") {
                files.push((path.display().to_string(), text));
            }
        }
    }
    assert!(files.len() >= 8, "{files:?}");
    files
}

/// `spec` applied as `Mesh/default`, or kubectl's error.
fn apply(server: &ApiServer, spec: Value) -> Result<String, String> {
    server.kubectl_apply(&mesh_resource::object(spec).to_string(), &[])
}

#[tokio::test(flavor = "current_thread")]
async fn every_mesh_file_is_a_mesh_resource_and_a_wrong_one_is_refused_by_field() {
    let server = ApiServer::start().await.unwrap_or_else(|e| panic!("{e}"));
    let schema = serde_json::to_value(hopwise_model::schema()).unwrap();
    server
        .install_crds(&[mesh_resource::definition(&schema)])
        .await
        .unwrap();
    let mut files = examples();
    files.push(("routes".into(), RULES.into()));
    for (name, text) in &files {
        let spec = json_of(text);
        apply(&server, spec.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = server
            .kubectl_with(&["get", "mesh", "default", "-o", "json"], "")
            .unwrap();
        let held: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            empty_as_null(&held["spec"]),
            empty_as_null(&spec),
            "{name}: not held as written"
        );
    }
    println!("{} mesh files applied and read back", files.len());

    let refused = [
        (
            json!({ "mesh": { "trust_domain": 5 } }),
            "spec.mesh.trust_domain",
        ),
        (
            json!({ "services": { "web": { "protocl": "http" } } }),
            "protocl",
        ),
        (
            json!({ "services": { "web": { "protocol": "smtp" } } }),
            "spec.services.web.protocol",
        ),
        (
            json!({ "services": { "web": { "copies": 3, "calls": [] } } }),
            "spec.services.web.calls",
        ),
    ];
    for (spec, field) in refused {
        let err = apply(&server, spec.clone()).expect_err(&spec.to_string());
        assert!(err.contains(field), "{spec}: {err}");
    }
}
