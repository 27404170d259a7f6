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
          - matches: [{ path: { value: /stable } }]
            backends: [{ service: b-v1, subset: { version: v1 } }]
          - matches: [{ path: { value: /registered } }]
            backends: [{ service: b-v2, subset: { version: v2 } }]
          - backends: [{ service: b-v1 }]
  b-v1:
    copies:
      - { inbound: 127.0.0.1:7001, labels: { version: v1 } }
      - { inbound: 127.0.0.1:7002 }
  b-v2: {}
"#;

#[test]
fn a_target_a_caller_does_not_call_and_a_subset_no_declared_copy_carries_are_found() {
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
            (
                at(3),
                "backend-not-called",
                "shop → b (backend b-v2)".to_owned()
            ),
        ]
    );
    let f = (report.findings.iter())
        .find(|f| f.subject == "shop → b (backend b-v2)")
        .unwrap();
    assert_eq!(f.severity, crate::Severity::Warning);
    assert!(f.message.contains("404 no-route"), "{}", f.message);
    assert!(f.fix.contains("services.shop.calls"), "{}", f.fix);
    // v2 of b-v1's two declared copies: none carries it. v1: one does. b-v2's copies register
    // at run time: nothing is said.
    let f = (report.findings.iter())
        .find(|f| f.code == "label-subset")
        .unwrap();
    assert_eq!(
        f.message,
        "services.b.routes.r.rules[1]'s backend b-v1 selects the copies labelled {version: v2}, \
         which none of the 2 b-v1 copies the file declares carries: its requests are answered \
         503 no-endpoint"
    );
    assert_eq!(
        f.fix,
        "label a copy of b-v1 (`services.b-v1.copies[i].labels: { version: v2 }`), or send the \
         rule elsewhere"
    );
}
