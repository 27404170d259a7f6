//! Copies' labels and subsets read from a mesh file: good ones kept, bad ones refused at their
//! own path and line.

use crate::{Diagnostic, Mesh};

fn refused(text: &str) -> Vec<Diagnostic> {
    Mesh::from_yaml(text).expect_err("should be refused").0
}

/// `path: message (line N)`, one a problem.
fn lines(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| {
            format!(
                "{}: {} (line {})",
                d.path,
                d.message,
                d.pos.map_or(0, |p| p.line)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_copys_labels_are_read_and_a_subset_selects_by_them() {
    let mesh = Mesh::from_yaml(
        "services:
  web:
    calls: { pricing: {} }
  pricing:
    copies:
      - { inbound: 127.0.0.1:7001, labels: { version: v1 } }
      - inbound: 127.0.0.1:7002
        labels:
          version: v2
          app.kubernetes.io/part-of: shop
      - { inbound: 127.0.0.1:7003 }
    routes:
      split:
        rules:
          - backends:
              - { service: pricing, subset: { app.kubernetes.io/part-of: shop }, weight: 1 }
",
    )
    .unwrap();
    let copies = &mesh.services["pricing"].copies;
    assert_eq!(copies[0].labels["version"], "v1");
    assert_eq!(copies[1].labels["version"], "v2");
    assert_eq!(copies[1].labels["app.kubernetes.io/part-of"], "shop");
    assert!(copies[2].labels.is_empty());
    let routes = &mesh.services["pricing"].routes;
    let json = format!("{routes:?}");
    assert!(json.contains("app.kubernetes.io/part-of"), "{json}");
}

#[test]
fn a_bad_key_or_value_is_refused_at_its_line() {
    let diags = refused(
        "services:
  pricing:
    copies:
      - inbound: 127.0.0.1:7001
        labels:
          version: v1
          bad key: x
          tier: -front
          count: 2
",
    );
    let text = lines(&diags);
    for want in [
        "services.pricing.copies[0].labels.bad key: `bad key` is not a label key: it must be at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit (line 7)",
        "services.pricing.copies[0].labels.tier: `-front` is not a label value: it must be at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit (line 8)",
        "services.pricing.copies[0].labels.count: a label's value is text: write \"2\" (line 9)",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert_eq!(diags.len(), 3, "{text}");
}

#[test]
fn labels_are_a_mapping_of_a_bounded_size() {
    let text = lines(&refused(
        "services:
  pricing:
    copies:
      - { inbound: 127.0.0.1:7001, labels: [version] }
",
    ));
    assert!(
        text.contains("services.pricing.copies[0].labels: expected a mapping of labels"),
        "{text}"
    );
    let many: Vec<String> = (0..=crate::labels::MAX_LABELS)
        .map(|i| format!("k{i}: v"))
        .collect();
    let text = lines(&refused(&format!(
        "services:\n  pricing:\n    copies:\n      - {{ inbound: 127.0.0.1:7001, labels: {{ {} }} }}\n",
        many.join(", ")
    )));
    assert!(text.contains("33 labels: at most 32"), "{text}");
}

#[test]
fn a_subsets_key_is_checked_as_a_copys_is() {
    let text = lines(&refused(
        "services:
  web:
    calls: { pricing: {} }
  pricing:
    routes:
      split:
        rules:
          - backends:
              - { service: pricing, subset: { Bad/key: v2 } }
",
    ));
    assert!(
        text.contains(
            "services.pricing.routes.split.rules[0].backends[0].subset.Bad/key: `Bad/key` is not a label key: its prefix `Bad` must be a DNS subdomain"
        ),
        "{text}"
    );
}
