//! `regex-never-matches`: the patterns of a mesh file's routes that can never match, found by
//! `check` from the file alone; the ones that only look wrong left alone.

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

use hopwise_model::Mesh;

use super::never_matching;
use crate::Severity;

/// `services.b.routes` written as `routes` (HTTP), and `g`'s (gRPC) as `grpc`.
fn mesh(routes: &str, grpc: &str) -> Mesh {
    let yaml = format!(
        "mesh: {{ name: t, trust_domain: t.local }}
services:
  a: {{ calls: {{ b: {{}}, b-v1: {{}}, g: {{}} }} }}
  b:
    routes:
{routes}
  b-v1: {{}}
  g:
    protocol: grpc
    routes:
{grpc}
"
    );
    Mesh::from_yaml(&yaml).unwrap_or_else(|d| panic!("{}", d.render("test")))
}

const HTTP: &str = r#"      r:
        rules:
          - matches: [{ path: { type: RegularExpression, value: "api/.*" } }]
            backends: [{ service: b-v1 }]
          - matches:
              - { path: { type: RegularExpression, value: "/x$/y" } }
              - { path: { value: /ok }, headers: [{ name: k, type: RegularExpression, value: "[^\\s\\S]" }] }
            backends: [{ service: b-v1 }]
          - matches:
              - { query_params: [{ name: q, value: "1" }, { name: id, type: RegularExpression, value: "$[0-9]+" }] }
              - { path: { value: /alive } }
            backends: [{ service: b-v1 }]
          - matches:                                        # none of these is proved dead
              - { path: { type: RegularExpression, value: "/api/.*" } }
              - { path: { type: RegularExpression, value: "\\*" } }
              - { path: { type: RegularExpression, value: ".*" } }
              - { headers: [{ name: k, type: RegularExpression, value: "\\w+" }] }
            backends: [{ service: b-v1 }]"#;

const GRPC: &str = r#"      r:
        rules:
          - matches: [{ method: { type: RegularExpression, service: "pkg\\.Svc", method: "Get\\bList" } }]
            backends: [{ service: g }]
          - matches: [{ method: { type: RegularExpression, service: "pkg\\..*" } }]
            backends: [{ service: g }]"#;

#[test]
fn patterns_that_can_never_match_are_found_with_why() {
    let found: Vec<(String, bool)> = never_matching(&mesh(HTTP, GRPC))
        .into_iter()
        .map(|f| {
            assert_eq!(
                (f.code, f.severity),
                ("regex-never-matches", Severity::Warning)
            );
            (f.path, f.message.contains("can never take a request"))
        })
        .collect();
    let b = "services.b.routes.r.rules";
    let want = [
        // A path pattern without its `/`: the rule's only match, so the rule is dead.
        (format!("{b}[0].matches[0].path.value"), true),
        // Both of rule 1's matches are dead: one by its path, one by a header.
        (format!("{b}[1].matches[0].path.value"), true),
        (format!("{b}[1].matches[1].headers[0].value"), true),
        // One of rule 2's matches is dead; the other still takes `/alive`.
        (format!("{b}[2].matches[0].query_params[1].value"), false),
        (
            "services.g.routes.r.rules[0].matches[0].method.method".to_owned(),
            true,
        ),
    ];
    assert_eq!(found, want);
}

#[test]
fn the_message_names_the_pattern_its_place_and_why() {
    let found = never_matching(&mesh(HTTP, GRPC));
    let path = &found[0];
    assert_eq!(path.subject, "b routes.r.rules[0]");
    for part in [
        "`api/.*`",
        "services.b.routes.r.rules[0].matches[0].path.value",
        "no path matches it",
        "starts with `/`",
        "rule services.b.routes.r.rules[0] can never take a request",
    ] {
        assert!(path.message.contains(part), "{part} in {}", path.message);
    }
    assert!(path.fix.contains("/api/.*"), "{}", path.fix);
    let query = &found[3];
    assert!(
        query.message.contains("no value matches it")
            && query
                .message
                .contains("matches[0] of services.b.routes.r.rules[2] never"),
        "{}",
        query.message
    );
}

#[test]
fn the_finding_is_in_the_report() {
    let m = mesh(HTTP, GRPC);
    let report = crate::check(&m, &crate::Options::default());
    let n = report
        .findings
        .iter()
        .filter(|f| f.code == "regex-never-matches")
        .count();
    assert_eq!(n, 5);
    assert!(!report.has_errors());
}
