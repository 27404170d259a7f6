//! Route targets a caller cannot reach, found by `check` from the file alone.

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

use hopwise_model::Mesh;

const MESH: &str = r#"
mesh: { name: t, trust_domain: t.local }
services:
  shop: { calls: { b: {}, b-v1: {} } }
  audit: { calls: { b: {}, b-v1: {}, b-v2: {} } }
  b:
    routes:
      r:
        rules:
          - matches: [{ path: { value: /new } }]
            filters:
              - type: RequestMirror
                request_mirror: { backend: { service: b-v2 } }
            backends: [{ service: b-v2, weight: 1 }, { service: b-v1, weight: 9 }]
          - matches: [{ path: { value: /canary } }]
            backends: [{ service: b-v1, subset: { version: v2 } }]
          - backends: [{ service: b-v1 }]
  b-v1: {}
  b-v2: {}
"#;

#[test]
fn a_target_a_caller_does_not_call_and_a_label_subset_are_found() {
    let mesh = Mesh::from_yaml(MESH).unwrap_or_else(|d| panic!("{}", d.render("test")));
    let report = crate::check(&mesh, &crate::Options::default());
    let mut found: Vec<(String, &str, String)> = (report.findings.iter())
        .filter(|f| matches!(f.code, "backend-not-called" | "label-subset"))
        .map(|f| (f.path.clone(), f.code, f.subject.clone()))
        .collect();
    found.sort();
    let at = |i: usize| format!("services.b.routes.r.rules[{i}]");
    assert_eq!(
        found,
        vec![
            (
                at(0),
                "backend-not-called",
                "shop → b (backend b-v2)".to_owned()
            ),
            (
                at(0),
                "backend-not-called",
                "shop → b (mirror b-v2)".to_owned()
            ),
            (
                at(1),
                "label-subset",
                "b (backend b-v1 {version: v2})".to_owned()
            ),
        ]
    );
    let f = (report.findings.iter())
        .find(|f| f.subject == "shop → b (backend b-v2)")
        .unwrap();
    assert_eq!(f.severity, crate::Severity::Warning);
    assert!(f.message.contains("404 no-route"), "{}", f.message);
    assert!(f.fix.contains("services.shop.calls"), "{}", f.fix);
}
