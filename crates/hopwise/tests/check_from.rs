//! `hopwise check --from` end to end: the shipped Istio examples (the seed's figures, text and
//! JSON, exit 1 on error findings) and bad input (exit 2, each problem with its file and line,
//! never a panic).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

const IMPORT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/import");

fn example(name: &str) -> String {
    Path::new(IMPORT).join(name).display().to_string()
}

fn run(args: &[&str], status: i32) -> (String, String) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .timeout(Duration::from_secs(60))
        .args(args)
        .output()
        .expect("run hopwise");
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(
        out.status.code(),
        Some(status),
        "stdout:\n{o}\nstderr:\n{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
    (o, e)
}

#[test]
fn the_seed_timeout_table_from_istio_configuration() {
    let dir = example("istio-timeouts");
    let calls = example("istio-timeouts/calls.txt");
    let args = [
        "check",
        "--from",
        &dir,
        "--calls",
        &calls,
        "--backoff",
        "fixed",
    ];
    let (text, _) = run(&args, 1);
    for line in [
        "frontend → checkout  none     none     3      9.20 s",
        "checkout → pricing   1.00 s   none     3      3.05 s",
        "pricing → inventory  500 ms   none     3      1.55 s",
        "set per_try_timeout to 650 ms or less",
        "set per_try_timeout to 316 ms or less",
        "virtualservices.yaml:42): http[0].retries.perTryTimeout)",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let mut json = args.to_vec();
    json.extend(["--format", "json"]);
    let (out, _) = run(&json, 1);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    let worst = &v["timeouts"]["calls"][0]["worst_case"];
    assert_eq!(
        (worst["secs"].as_u64(), worst["nanos"].as_u64()),
        (Some(9), Some(200_000_000))
    );
    assert_eq!(v["import"]["defaults"], "istio");
    let places = v["places"].as_array().expect("places");
    assert_eq!(places.len(), v["findings"].as_array().map_or(0, Vec::len));
}

#[test]
fn the_retry_chain_from_kubernetes_services() {
    let dir = example("istio-retry-chain");
    let calls = example("istio-retry-chain/calls-code-retries.txt");
    let (out, _) = run(
        &[
            "check", "--from", &dir, "--calls", &calls, "--format", "json",
        ],
        1,
    );
    let v: Value = serde_json::from_str(&out).expect("JSON");
    let rows = v["fanout"].as_array().expect("fanout");
    let down = rows
        .iter()
        .find(|r| r["service"] == "inventory" && r["failure"] == "down")
        .expect("a row for inventory down");
    assert_eq!(down["attempts"], 729);
}

fn temp(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    (dir, path)
}

#[test]
fn bad_input_is_refused_with_its_line() {
    let calls = example("istio-timeouts/calls.txt");
    // Not YAML.
    let (_d, bad) = temp("bad.yaml", "kind: VirtualService\nspec: [1, 2\n");
    let (_, err) = run(
        &[
            "check",
            "--from",
            &bad.display().to_string(),
            "--calls",
            &calls,
        ],
        2,
    );
    assert!(err.contains("bad.yaml:3:1: not valid YAML"), "{err}");
    // A known field of the wrong type.
    let (_d2, wrong) = temp(
        "vs.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: pricing}\nspec:\n  hosts: [pricing]\n  http:\n  - retries:\n      attempts: two\n",
    );
    let (_, err) = run(
        &[
            "check",
            "--from",
            &wrong.display().to_string(),
            "--calls",
            &calls,
        ],
        2,
    );
    assert!(
        err.contains("vs.yaml:8:17: virtualservice/pricing: `spec.http[0].retries.attempts`: expected a whole number, found a string"),
        "{err}"
    );
    // A cycle of calls: at the line that closes it.
    let (_d3, cycle) = temp("calls.txt", "a -> b\nb -> c\nc -> a\n");
    let dir = example("istio-timeouts");
    let (_, err) = run(
        &[
            "check",
            "--from",
            &dir,
            "--calls",
            &cycle.display().to_string(),
        ],
        2,
    );
    assert!(err.contains("calls.txt:") && err.contains("cycle"), "{err}");
}

#[test]
fn convert_writes_a_file_check_reads_alike() {
    let dir = example("istio-retry-chain");
    let calls = example("istio-retry-chain/calls.txt");
    let out = tempfile::tempdir().expect("temp dir");
    let file = out.path().join("mesh.yaml").display().to_string();
    let (_, err) = run(
        &["convert", "--from", &dir, "--calls", &calls, "--out", &file],
        0,
    );
    assert!(err.contains("skipped deployment/pricing"), "{err}");
    let text = std::fs::read_to_string(&file).expect("written");
    assert!(text.contains("preset: istio"), "{text}");
    let (json, _) = run(&["check", &file, "--format", "json"], 1);
    let v: Value = serde_json::from_str(&json).expect("JSON");
    let rows = v["fanout"].as_array().expect("fanout");
    let down = rows
        .iter()
        .find(|r| r["service"] == "inventory" && r["failure"] == "down")
        .expect("a row for inventory down");
    assert_eq!(down["attempts"], 27);
}

/// The fan-out row at inventory for `failure`, from `check`'s JSON.
fn attempts_at_inventory(json: &str, failure: &str) -> u64 {
    let v: Value = serde_json::from_str(json).expect("JSON");
    v["fanout"]
        .as_array()
        .expect("fanout")
        .iter()
        .find(|r| r["service"] == "inventory" && r["failure"] == failure)
        .and_then(|r| r["attempts"].as_u64())
        .expect("a row for inventory")
}

#[test]
fn calls_from_a_metrics_export_say_where_each_came_from() {
    // Istio's `istio_requests_total` (the entry from the `unknown` source, on line 4) and
    // Linkerd's `response_total` (outbound series only: line 4 is inbound, no call).
    for (dir, export, metric, lines, status, figure) in [
        (
            "istio-retry-chain",
            "requests.txt",
            "istio_requests_total",
            [5, 6, 7],
            1,
            27,
        ),
        (
            "linkerd-chain",
            "responses.txt",
            "response_total",
            [2, 3, 5],
            0,
            1,
        ),
    ] {
        let config = example(dir);
        let calls = example(&format!("{dir}/{export}"));
        let args = ["check", "--from", &config, "--calls", &calls];
        let (text, _) = run(&args, status);
        let chain = [
            ("frontend", "checkout"),
            ("checkout", "pricing"),
            ("pricing", "inventory"),
        ];
        for ((from, to), line) in chain.into_iter().zip(lines) {
            let said = format!("call     {from} → {to} ({calls}:{line}, {metric})");
            assert!(text.contains(&said), "missing {said:?} in\n{text}");
        }
        let (json, _) = run(&[&args[..], &["--format", "json"]].concat(), status);
        assert_eq!(attempts_at_inventory(&json, "down"), figure, "{dir}");
        let v: Value = serde_json::from_str(&json).expect("JSON");
        assert_eq!(v["import"]["calls"].as_array().map(Vec::len), Some(3));
    }
}
