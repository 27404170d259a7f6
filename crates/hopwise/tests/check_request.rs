//! `hopwise check FILE --request LINE` end to end, the real binary on a real file: the rule and
//! backends a request takes (text and JSON, exit 0), no rule (exit 1), a line or host that names
//! nothing (exit 2, the reason on stderr); the report's `shadowed-rule` and
//! `regex-never-matches` warnings, the latter at its file, line and column; and its splits.

use std::process::Output;
use std::time::Duration;

use assert_cmd::Command;

const MESH: &str = r#"mesh: { name: t, trust_domain: t.local }
services:
  a: { calls: { pricing: {}, pricing-v2: {} } }
  pricing:
    routes:
      canary:
        rules:
          - name: beta
            matches: [{ path: { value: /quote }, headers: [{ name: x-beta, value: "1" }] }]
            backends: [{ service: pricing-v2, weight: 90 }, { service: pricing, weight: 10 }]
          - matches: [{ path: { value: /quote } }]
            backends: [{ service: pricing }]
          - matches: [{ path: { value: /quote/ } }]
            backends: [{ service: pricing-v2 }]
          - matches: [{ path: { type: RegularExpression, value: "quote/[0-9]+" } }]
            backends: [{ service: pricing-v2 }]
  pricing-v2: {}
"#;

/// `hopwise check [args] FILE` on [`MESH`], expecting `status`; nothing may panic.
fn check(args: &[&str], status: i32) -> (String, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, MESH).expect("write the mesh file");
    let o: Output = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .timeout(Duration::from_secs(60))
        .arg("check")
        .args(args)
        .arg(&file)
        .output()
        .expect("run hopwise");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        o.status.code(),
        Some(status),
        "stdout:\n{out}\nstderr:\n{err}"
    );
    (out, err)
}

#[test]
fn a_request_names_its_rule_and_weighted_backends() {
    let (out, _) = check(&["--request", "GET pricing/quote/7 -H X-Beta:1"], 0);
    assert!(
        out.contains(
            "pricing: route canary, rule 0 (beta)  [services.pricing.routes.canary.rules[0]]"
        ),
        "{out}"
    );
    let shares: Vec<&str> = out.lines().filter(|l| l.contains(" %")).collect();
    assert_eq!(shares.len(), 2, "{out}");
    assert!(
        shares[0].contains("pricing-v2") && shares[0].ends_with("90.0 %"),
        "{out}"
    );
    assert!(shares[1].ends_with("10.0 %"), "{out}");

    let (out, _) = check(
        &[
            "--format",
            "json",
            "--request",
            "GET /quote -H host:pricing.t.local:80",
        ],
        0,
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["outcome"], "rule");
    assert_eq!(v["rule"], 1);
    assert_eq!(v["backends"][0]["service"], "pricing");
}

#[test]
fn no_rule_is_exit_1_and_a_bad_line_exit_2() {
    let (out, _) = check(&["--request", "GET pricing/other"], 1);
    assert!(out.contains("answers 404 (no-route"), "{out}");
    let (_, err) = check(&["--request", "GET nobody/x"], 2);
    assert!(err.contains("`nobody` names no service"), "{err}");
    let (_, err) = check(&["--request", "GET"], 2);
    assert!(err.contains("METHOD TARGET"), "{err}");
}

#[test]
fn the_report_warns_of_a_shadowed_rule() {
    let (out, _) = check(&["--format", "json"], 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let shadowed: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["code"] == "shadowed-rule")
        .collect();
    assert_eq!(shadowed.len(), 1, "{out}");
    assert_eq!(
        shadowed[0]["path"],
        "services.pricing.routes.canary.rules[2]"
    );
    assert_eq!(shadowed[0]["severity"], "warning");
}

#[test]
fn the_report_warns_of_a_path_pattern_that_no_path_matches_at_its_line() {
    let (out, _) = check(&[], 0);
    let line = out
        .lines()
        .position(|l| l.contains("regex-never-matches"))
        .unwrap_or_else(|| panic!("no regex-never-matches in\n{out}"));
    let (finding, fix) = (
        out.lines().nth(line).unwrap_or_default(),
        out.lines().nth(line + 1),
    );
    assert!(finding.starts_with("warning"), "{out}");
    assert!(
        finding.contains("`quote/[0-9]+`") && finding.contains("starts with `/`"),
        "{out}"
    );
    // The place: the file, the pattern's line and column, its path.
    let fix = fix.unwrap_or_default();
    assert!(
        fix.contains(
            "mesh.yaml:15:58: services.pricing.routes.canary.rules[3].matches[0].path.value)"
        ),
        "{out}"
    );
    let (out, _) = check(&["--format", "json"], 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let found: Vec<&serde_json::Value> = (v["findings"].as_array().expect("findings").iter())
        .filter(|f| f["code"] == "regex-never-matches")
        .collect();
    assert_eq!(found.len(), 1, "{out}");
    assert_eq!(found[0]["severity"], "warning");
}

#[test]
fn the_report_counts_each_backend_of_the_split() {
    let (out, _) = check(&[], 0);
    assert!(
        out.contains("Splits:") && out.contains("expected, by weight"),
        "{out}"
    );
    let (out, _) = check(&["--format", "json"], 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let splits = v["splits"].as_array().expect("splits");
    assert_eq!(splits.len(), 1, "{out}");
    let s = &splits[0];
    assert_eq!(
        (&s["caller"], &s["rule"]),
        (
            &"a".into(),
            &"services.pricing.routes.canary.rules[0]".into()
        )
    );
    let backends: Vec<(&str, f64)> = (s["backends"].as_array().expect("backends").iter())
        .map(|b| {
            (
                b["service"].as_str().unwrap_or_default(),
                b["percent"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    assert_eq!(backends, [("pricing-v2", 90.0), ("pricing", 10.0)]);
    assert!(
        s["backends"][0]["count"]["attempts"].as_u64().is_some(),
        "{out}"
    );
    assert!(s["expected_attempts"].as_f64().is_some(), "{out}");
}
