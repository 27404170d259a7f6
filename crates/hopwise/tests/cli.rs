//! The `hopwise` binary end to end: `check` on the shipped examples (the seed's figures, text and
//! JSON), `check` on bad files (exit status 2, every problem with file, line, column and field
//! path, never a panic), and the `fanout` calculator.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");

fn example(name: &str) -> PathBuf {
    Path::new(EXAMPLES).join(name)
}

fn hopwise() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopwise"));
    // Far beyond what any of these runs needs; a run that hangs fails instead of stalling CI.
    cmd.timeout(Duration::from_secs(60));
    cmd
}

fn run(args: &[&str]) -> Output {
    hopwise().args(args).output().expect("run hopwise")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

/// Runs `hopwise check FILE [extra…]` and checks the exit status; nothing may panic.
fn check(file: &Path, extra: &[&str], status: i32) -> Output {
    let mut args = vec!["check"];
    args.extend_from_slice(extra);
    let file = file.to_str().expect("UTF-8 path");
    args.push(file);
    let o = run(&args);
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "hopwise panicked:\n{err}");
    assert_eq!(
        o.status.code(),
        Some(status),
        "`hopwise {}`\nstdout:\n{}\nstderr:\n{err}",
        args.join(" "),
        stdout(&o)
    );
    o
}

/// `hopwise check --format json FILE`, expecting `status`; the report parsed.
fn check_json(file: &Path, status: i32) -> Value {
    let o = check(file, &["--format", "json"], status);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", stdout(&o)))
}

/// Attempts at `service` when it fails as `failure`, from the `fanout` rows of a JSON report.
fn attempts(report: &Value, service: &str, failure: &str) -> u64 {
    let rows = report["fanout"].as_array().expect("`fanout` is a list");
    let row = rows
        .iter()
        .find(|r| r["service"] == service && r["failure"] == failure)
        .unwrap_or_else(|| panic!("no fan-out row for {service} {failure} in {rows:#?}"));
    row["attempts"].as_u64().expect("attempts is a number")
}

// ---- check on the examples ----------------------------------------------------------------

#[test]
fn the_shop_passes() {
    let o = check(&example("shop/mesh.yaml"), &[], 0);
    assert!(stdout(&o).contains("0 error(s)"), "{}", stdout(&o));
}

#[test]
fn the_seed_timeout_budget_sample_fails_with_the_seed_figures() {
    let o = check(&example("seed/timeout-budget.yaml"), &[], 1);
    let out = stdout(&o);
    for want in [
        "9.20 s",
        "3.05 s",
        "1.55 s",
        "650 ms or less",
        "316 ms or less",
        "1 of 3",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
}

#[test]
fn the_seed_shrinking_timeouts_pass() {
    let o = check(&example("seed/shrinking-timeouts.yaml"), &[], 0);
    assert!(stdout(&o).contains("1.48 s"), "{}", stdout(&o));
}

#[test]
fn the_envoy_documented_backoff_gives_773_ms() {
    let o = check(
        &example("seed/shrinking-timeouts-envoy-backoff.yaml"),
        &[],
        0,
    );
    assert!(stdout(&o).contains("773 ms"), "{}", stdout(&o));
}

#[test]
fn json_report_of_the_grpc_retry_chain() {
    let report = check_json(&example("seed/retry-chain-grpc.yaml"), 1);
    assert_eq!(report["mesh"], "seed-retry-chain-grpc");
    assert_eq!(attempts(&report, "inventory", "down"), 27);
    assert_eq!(attempts(&report, "inventory", "unavailable"), 27);
    assert!(report["timeouts"]["calls"].is_array());
    assert!(report["findings"].is_array());
}

#[test]
fn the_seed_retry_chains_give_27_3_1_27_81() {
    let grpc = check_json(&example("seed/retry-chain-grpc.yaml"), 1);
    assert_eq!(attempts(&grpc, "inventory", "down"), 27);
    assert_eq!(attempts(&grpc, "inventory", "unavailable"), 27);
    // Over HTTP the bottom proxy's 503 is retried by nobody above; a 503 is retried by nobody.
    let http = check_json(&example("seed/retry-chain-http.yaml"), 0);
    assert_eq!(attempts(&http, "inventory", "down"), 3);
    assert_eq!(attempts(&http, "inventory", "http503"), 1);
    let http_503 = check_json(&example("seed/retry-chain-http-503.yaml"), 1);
    assert_eq!(attempts(&http_503, "inventory", "http503"), 27);
    let app = check_json(&example("seed/retry-chain-app-retries.yaml"), 1);
    assert_eq!(attempts(&app, "inventory", "http503"), 81);
}

#[test]
fn max_fanout_decides_what_is_an_error() {
    // 3 attempts is the most the HTTP chain makes: at --max-fanout 2 that is an error.
    let file = example("seed/retry-chain-http.yaml");
    check(&file, &[], 0);
    let o = check(&file, &["--max-fanout", "2"], 1);
    assert!(stdout(&o).contains("retry-fanout"), "{}", stdout(&o));
}

// ---- check on bad files ---------------------------------------------------------------------

/// A problem as printed: `FILE:LINE:COLUMN: rest`.
#[derive(Debug)]
struct Printed {
    line: usize,
    column: usize,
    rest: String,
}

/// `yaml` written to `mesh.yaml` in a fresh directory (removed when the guard drops).
fn mesh_file(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let path = dir.path().join("mesh.yaml");
    std::fs::write(&path, yaml).expect("write the mesh file");
    (dir, path)
}

/// Writes `yaml` into a fresh directory and checks it: exit 2, nothing on stdout, the file named
/// on stderr, no panic. Returns stderr and the file's path.
fn refused(yaml: &str) -> (String, String, tempfile::TempDir) {
    let (dir, path) = mesh_file(yaml);
    let o = check(&path, &[], 2);
    assert!(o.stdout.is_empty(), "stdout:\n{}", stdout(&o));
    let err = stderr(&o);
    let name = path.to_str().expect("UTF-8 path").to_owned();
    assert!(err.contains(&name), "{name} not named in\n{err}");
    (err, name, dir)
}

/// Every problem line of stderr that carries a line and column.
fn problems(err: &str, file: &str) -> Vec<Printed> {
    err.lines()
        .filter_map(|l| l.strip_prefix(file)?.strip_prefix(':'))
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let line = parts.next()?.parse().ok()?;
            let column = parts.next()?.parse().ok()?;
            let rest = parts.next()?.trim_start().to_owned();
            Some(Printed { line, column, rest })
        })
        .collect()
}

/// The one problem in `yaml`: at `line`, about `path` (empty: the document), saying `says`.
fn one_problem(yaml: &str, line: usize, path: &str, says: &[&str]) -> Printed {
    let (err, file, _dir) = refused(yaml);
    let mut found = problems(&err, &file);
    assert_eq!(found.len(), 1, "{err}");
    let p = found.remove(0);
    assert_eq!(p.line, line, "{err}");
    assert!(p.column >= 1, "{err}");
    if !path.is_empty() {
        assert!(
            p.rest.starts_with(&format!("{path}: ")),
            "{path} not named in\n{err}"
        );
    }
    for s in says {
        assert!(p.rest.contains(s), "{s:?} missing in\n{err}");
    }
    assert!(err.contains("1 problem(s)"), "{err}");
    p
}

#[test]
fn a_per_try_timeout_longer_than_the_route_timeout() {
    let p = one_problem(
        "services:\n  checkout:\n    calls:\n      pricing: { timeout: 1s, per_try_timeout: 2s }\n  pricing: {}\n",
        4,
        "services.checkout.calls.pricing.per_try_timeout",
        &["longer than the route timeout"],
    );
    // The column of `per_try_timeout` inside the flow mapping.
    assert_eq!(p.column, 31);
}

#[test]
fn an_unknown_field_gets_a_suggestion() {
    let p = one_problem(
        "services:\n  a:\n    timout: 1s\n",
        3,
        "services.a.timout",
        &["unknown field `timout`", "did you mean `timeout`?"],
    );
    assert_eq!(p.column, 5);
    one_problem(
        "services:\n  a:\n    calls: { b: { retries: { cuont: 2 } } }\n  b: {}\n",
        3,
        "services.a.calls.b.retries.cuont",
        &["did you mean `count`?"],
    );
    one_problem(
        "services:\n  a:\n    preset: istoi\n",
        3,
        "services.a.preset",
        &["unknown value `istoi`", "did you mean `istio`?"],
    );
}

#[test]
fn a_value_of_the_wrong_type() {
    one_problem(
        "services:\n  a:\n    retries: { count: many }\n",
        3,
        "services.a.retries.count",
        &["expected a whole number, found a string"],
    );
    one_problem(
        "services:\n  a:\n    timeout: 300\n",
        3,
        "services.a.timeout",
        &["no unit", "300ms"],
    );
    one_problem(
        "services:\n  a:\n    retries: { only_if_safe: yes }\n",
        3,
        "services.a.retries.only_if_safe",
        &["expected `true` or `false`"],
    );
    one_problem(
        "services: [a, b]\n",
        1,
        "services",
        &["expected a mapping of names, found a list"],
    );
}

#[test]
fn a_negative_duration() {
    one_problem(
        "services:\n  a:\n    timeout: -1s\n",
        3,
        "services.a.timeout",
        &["`-1s` is negative"],
    );
}

#[test]
fn a_zero_duration() {
    one_problem(
        "services:\n  a:\n    per_try_timeout: 0s\n",
        3,
        "services.a.per_try_timeout",
        &["longer than zero", "none"],
    );
}

#[test]
fn a_call_to_a_missing_service() {
    one_problem(
        "services:\n  a:\n    calls:\n      b: {}\n",
        4,
        "services.a.calls.b",
        &["calls `b`, which is not a service in this file (services: a)"],
    );
}

#[test]
fn a_cycle() {
    one_problem(
        "services:\n  a:\n    calls: { b: {} }\n  b:\n    calls: { c: {} }\n  c:\n    calls: { a: {} }\n",
        7,
        "services.c.calls.a",
        &["cycle", "a → b → c → a"],
    );
}

#[test]
fn a_duplicate_key() {
    let p = one_problem(
        "services:\n  a: {}\n  b: {}\n  a: { timeout: 1s }\n",
        4,
        "",
        &["duplicate key `a` (first at line 2)"],
    );
    assert_eq!(p.column, 3);
}

#[test]

fn a_duplicate_key_names_its_field_path() {
    one_problem(
        "services:\n  a: {}\n  b: {}\n  a: { timeout: 1s }\n",
        4,
        "services.a",
        &["duplicate key `a`"],
    );
}

#[test]
fn invalid_yaml() {
    one_problem(
        "services:\n  a: [1, 2\n  b: 3\n",
        3,
        "",
        &["not valid YAML"],
    );
    one_problem(
        "services:\n  a: { timeout: 1s\n",
        3,
        "",
        &["not valid YAML"],
    );
}

#[test]
fn an_empty_file() {
    for text in ["", "\n", "# only a comment\n"] {
        let (err, _, _dir) = refused(text);
        assert!(err.contains("services: the mesh has no services"), "{err}");
        assert!(err.contains("1 problem(s)"), "{err}");
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let yaml = "\
services:
  checkout:
    timout: 1s
    preset: istoi
    calls:
      pricing: { timeout: 1s, per_try_timeout: 2s }
      nowhere: {}
  pricing:
    retries:
      count: -1
      on: [5xx, sometimes]
    connect_timeout: 0s
    limits: { max_requests: many }
    entry: { timeout: -1s }
";
    let (err, file, _dir) = refused(yaml);
    let found = problems(&err, &file);
    let got: Vec<(usize, &str)> = found
        .iter()
        .map(|p| (p.line, p.rest.split(": ").next().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "services.checkout.timout"),
            (4, "services.checkout.preset"),
            (6, "services.checkout.calls.pricing.per_try_timeout"),
            (7, "services.checkout.calls.nowhere"),
            (10, "services.pricing.retries.count"),
            (11, "services.pricing.retries.on[1]"),
            (12, "services.pricing.connect_timeout"),
            (13, "services.pricing.limits.max_requests"),
            (14, "services.pricing.entry.timeout"),
        ],
        "{err}"
    );
    // Each problem on a line of its own, then the count.
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 10, "{err}");
    assert!(lines[..9].iter().all(|l| l.starts_with(&file)), "{err}");
    assert!(
        lines[9].ends_with("9 problem(s); nothing was checked"),
        "{err}"
    );
}

#[test]
fn a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-mesh.yaml");
    let o = check(&path, &[], 2);
    let err = stderr(&o);
    assert!(err.contains(path.to_str().unwrap()), "{err}");
    assert!(err.contains("cannot read the mesh file"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]

fn the_largest_app_retries_does_not_panic() {
    let (_dir, path) =
        mesh_file("services:\n  a:\n    calls:\n      b: { app_retries: 4294967295 }\n  b: {}\n");
    check(&path, &[], 1);
}

#[test]

fn huge_worst_cases_do_not_panic() {
    let (_dir, path) = mesh_file(
        "services:
  a:
    calls:
      b: { timeout: none, app_retries: 4000000000 }
  b:
    calls:
      c: { timeout: 8760h, app_retries: 4000000000 }
  c: {}
",
    );
    check(&path, &[], 1);
}

#[test]

fn many_unbudgeted_retries_do_not_panic() {
    let (_dir, path) = mesh_file(
        "defaults: { preset: istio }
services:
  a:
    calls:
      b: { app_retries: 70000, retries: { count: 70000, backoff: { strategy: fixed } } }
  b: {}
",
    );
    check(&path, &[], 1);
}

#[test]

fn a_huge_retry_count_is_checked_quickly() {
    let (_dir, path) = mesh_file(
        "services:\n  a:\n    calls:\n      b: { retries: { count: 1000000 } }\n  b: {}\n",
    );
    let o = hopwise()
        .timeout(Duration::from_secs(10))
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        o.status.code().is_some(),
        "killed after 10 s: {:?}",
        o.status
    );
}

// ---- fanout ---------------------------------------------------------------------------------

/// Runs `hopwise fanout [args…]`, expecting success; returns stdout.
fn fanout(args: &[&str]) -> String {
    let mut all = vec!["fanout"];
    all.extend_from_slice(args);
    let o = run(&all);
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "hopwise panicked:\n{err}");
    assert!(
        o.status.success(),
        "`hopwise {}`: {}\n{err}",
        all.join(" "),
        o.status
    );
    stdout(&o)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[test]
fn fanout_defaults_are_the_seed_sample() {
    let out = fanout(&[]);
    assert!(
        first_line(&out).starts_with("27 calls reach inventory for each request at frontend"),
        "{out}"
    );
    assert!(out.contains("3 × 3 × 3 = 27"), "{out}");
    assert!(
        out.contains("1           3           9          27"),
        "{out}"
    );
}

#[test]
fn fanout_with_code_retries() {
    let out = fanout(&["--code-retries", "2"]);
    assert!(first_line(&out).starts_with("729 calls"), "{out}");
    assert!(out.contains("9 × 9 × 9 = 729"), "{out}");
}

#[test]
fn fanout_with_budgets() {
    let out = fanout(&["--budget", "0.2"]);
    assert!(first_line(&out).starts_with("27 calls"), "{out}");
    assert!(first_line(&out).contains("about 1.7"), "{out}");
    let out = fanout(&["--budget", "0.1"]);
    assert!(first_line(&out).contains("about 1.3"), "{out}");
}

#[test]
fn fanout_with_only_the_top_retrying() {
    let out = fanout(&["--top-only"]);
    assert!(first_line(&out).starts_with("3 calls"), "{out}");
    assert!(out.contains("3 × 1 × 1 = 3"), "{out}");
}

#[test]
fn fanout_over_http() {
    let out = fanout(&["--protocol", "http"]);
    assert!(first_line(&out).starts_with("3 calls"), "{out}");
    let out = fanout(&["--protocol", "http", "--failure", "error"]);
    assert!(first_line(&out).starts_with("1 calls"), "{out}");
    let out = fanout(&[
        "--protocol",
        "http",
        "--failure",
        "error",
        "--retriable-status-codes",
        "503",
    ]);
    assert!(first_line(&out).starts_with("27 calls"), "{out}");
}

#[test]
fn fanout_refuses_a_budget_above_one() {
    for budget in ["2", "1.5", "-0.5", "NaN"] {
        let o = run(&["fanout", &format!("--budget={budget}")]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "--budget {budget}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(o.stdout.is_empty(), "{}", stdout(&o));
        assert!(err.contains(&format!("--budget {budget}")), "{err}");
        assert!(err.contains("between 0.0 and 1.0"), "{err}");
    }
}

#[test]
fn fanout_refuses_a_depth_of_zero() {
    let o = run(&["fanout", "--depth", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--depth 0"), "{}", stderr(&o));
}

#[test]
fn fanout_as_json() {
    let out = fanout(&["--format", "json"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    assert_eq!(v["bottom"], "inventory");
    assert_eq!(v["attempts"], 27);
    assert_eq!(v["factors"], serde_json::json!([3, 3, 3]));
    assert_eq!(v["received"]["inventory"], 27);
    let changes = v["changes"].as_array().unwrap();
    let budget = changes[0]["attempts"].as_f64().unwrap();
    assert!((budget - 1.728).abs() < 1e-9, "{budget}");
}

#[test]

fn fanout_of_a_deep_chain_does_not_panic() {
    fanout(&["--depth", "20", "--proxy-retries", "3"]);
}

#[test]

fn fanout_with_the_largest_code_retries_does_not_panic() {
    fanout(&["--code-retries", "4294967295"]);
}
