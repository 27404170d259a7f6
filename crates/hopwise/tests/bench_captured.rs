//! `hopwise bench hops --modes captured` for real, as root (docs/performance.md, "Captured"):
//! the quick preset measures the captured chains beside the mTLS ones in one run, hop 1's
//! proxy counts the client's connections as captured, and the namespace each measurement made
//! is gone afterwards — at the end of a run, after Ctrl-C, and, for a SIGKILLed bench, after
//! the next bench swept it. Without root the mode is refused, naming why. Speed is reported,
//! never asserted.
//!
//! Every bench runs inside a network namespace of the test's own ([`Host`]), so the copies'
//! links, the proxies' ports and every address used stay inside namespaces the test made.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;
use common::netns::Host;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `hopwise bench hops --modes MODES --json …` inside `host`, recording under `state`.
fn bench(host: &Host, modes: &str, state: &Path, svg: &Path, extra: &[&str]) -> Command {
    let mut c = host.hopwise(&["bench", "hops", "--modes", modes, "--json"]);
    c.arg("--state")
        .arg(state)
        .arg("--svg")
        .arg(svg)
        .args(extra);
    c
}

/// Nothing of the namespace `netns` (`hopwise-<id>`) is left: the namespace, its hosts
/// directory, the link's end in `host`, its record under `state`.
fn assert_gone(host: &Host, state: &Path, netns: &str) {
    let id = netns.strip_prefix("hopwise-").unwrap();
    let left = || {
        let mut left: Vec<String> = [
            format!("/run/netns/{netns}"),
            format!("/etc/netns/{netns}"),
            state.join(format!("runs/{id}.json")).display().to_string(),
        ]
        .into_iter()
        .filter(|p| Path::new(p).exists())
        .collect();
        if host.links().contains(&format!("hw{id}h")) {
            left.push(format!("link hw{id}h"));
        }
        left
    };
    let start = Instant::now();
    while !left().is_empty() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(left(), Vec::<String>::new(), "{netns} left these behind");
}

/// The ids of the records under `state` (a bench's live namespaces).
fn records(state: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(state.join("runs")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".json").map(str::to_owned)
        })
        .collect()
}

#[test]
fn quick_captured_and_mtls_lines_side_by_side_and_nothing_left() {
    let dir = tempfile::tempdir().unwrap();
    let (state, svg) = (dir.path().join("state"), dir.path().join("hops.svg"));
    let host = Host::new();
    let mut cmd =
        assert_cmd::Command::from_std(bench(&host, "captured,mtls", &state, &svg, &["--quick"]));
    let out = cmd.timeout(Duration::from_secs(240)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    for mode in ["captured", "mtls"] {
        let line = json["per_hop"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["system"] == "hopwise" && p["mode"] == mode)
            .unwrap_or_else(|| panic!("no hopwise {mode} line in {json}"));
        // A figure, of any size: no timing is asserted (a busy machine makes anything of it).
        assert!(line["p50_us"]["median"].is_f64(), "{line}");
        assert!(line["cores_per_proxy"]["median"].is_f64(), "{line}");
    }
    // The figure: capture's cost at its hop over the explicit hop, p50 and p90 (any sign:
    // one quick run on a shared machine is noise).
    for key in [
        "p50_percent",
        "p90_percent",
        "extra_p50_us",
        "explicit_p50_us",
    ] {
        assert!(json["captured"][key]["median"].is_f64(), "{key}: {json}");
    }
    let captured: Vec<&Value> = json["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["config"]["mode"] == "captured")
        .collect();
    // --quick: hops 1 and 2, one run.
    assert_eq!(captured.len(), 2, "{json}");
    for s in &captured {
        // The latency phase's connection and the rate phase's, all taken by capture.
        assert!(s["captured"].as_u64().unwrap() >= 2, "{s}");
        assert_gone(&host, &state, s["netns"].as_str().unwrap());
    }
    assert_eq!(records(&state), Vec::<String>::new());
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("hopwise captured"), "{plot}");
}

/// `--paired`: the captured chain beside the mTLS chain of its length, one client calling
/// both in turn (A from inside the copy's namespace, B on the host's loopback) and B's
/// backend directly. Structure and sanity only: A went through capture, the three answered
/// as many requests, the percentage is a number, the namespace is gone afterwards.
#[test]
fn a_paired_captured_run_measures_capture_beside_the_explicit_port() {
    let dir = tempfile::tempdir().unwrap();
    let (state, svg) = (dir.path().join("state"), dir.path().join("hops.svg"));
    let host = Host::new();
    let quick = ["--quick", "--paired", "--max-hops", "1", "--blocks", "4"];
    let mut cmd = assert_cmd::Command::from_std(bench(&host, "captured", &state, &svg, &quick));
    let out = cmd.timeout(Duration::from_secs(240)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &json["paired"][0];
    assert_eq!(p["label"], "captured 1 hop − mtls 1 hop", "{json}");
    assert_eq!(p["divided_by"], 1);
    assert_eq!(p["bar"]["unit"], "%");
    for key in ["p50_us", "percent", "percent_blocks", "baseline_per_hop_us"] {
        assert!(p[key]["median"].as_f64().unwrap().is_finite(), "{key}: {p}");
    }
    let samples = json["pair_samples"].as_array().unwrap();
    assert_eq!(samples.len(), 1, "{json}");
    let s = &samples[0];
    // The latency phase's one connection to A, taken by capture.
    assert!(s["captured"].as_u64().unwrap() >= 1, "{s}");
    let sent = |side: &Value| {
        side["requests"].as_u64().unwrap()
            + side["reconnects"].as_u64().unwrap()
            + side["errors"].as_u64().unwrap()
    };
    assert_eq!(
        (sent(&s["a"]), sent(&s["b"]), sent(&s["direct"])),
        (300, 300, 300),
        "{s}"
    );
    let blocks = s["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 4);
    assert!(
        blocks
            .iter()
            .all(|b| b["direct_p50_us"].as_f64().unwrap() > 0.0)
    );
    assert_gone(&host, &state, s["netns"].as_str().unwrap());
    assert_eq!(records(&state), Vec::<String>::new());
}

/// A long captured bench running in a namespace of the test's own (its 0-hop point takes a
/// few seconds, its captured hop a minute), once it has made its namespace `hopwise-<id>`.
struct Long {
    _dir: tempfile::TempDir,
    state: PathBuf,
    svg: PathBuf,
    host: Host,
    child: std::process::Child,
    id: String,
}

fn started() -> Long {
    let dir = tempfile::tempdir().unwrap();
    let (state, svg) = (dir.path().join("state"), dir.path().join("hops.svg"));
    let host = Host::new();
    let long = [
        "--runs",
        "1",
        "--max-hops",
        "1",
        "--requests",
        "20000",
        "--warmup",
        "0",
    ];
    let mut child = bench(&host, "captured", &state, &svg, &long)
        .args(["--duration", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let id = loop {
        if let Some(id) = records(&state).pop()
            && Path::new(&format!("/run/netns/hopwise-{id}")).exists()
        {
            break id;
        }
        assert!(child.try_wait().unwrap().is_none(), "the bench ended early");
        assert!(start.elapsed() < Duration::from_secs(60), "no namespace");
        std::thread::sleep(Duration::from_millis(20));
    };
    Long {
        _dir: dir,
        state,
        svg,
        host,
        child,
        id,
    }
}

#[test]
fn ctrl_c_removes_the_bench_s_namespace() {
    let mut b = started();
    // nsenter execs the bench: this pid is the bench's.
    let pid = b.child.id().to_string();
    let int = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(int.success());
    let status = b.child.wait().unwrap();
    assert!(!status.success(), "an interrupted bench reports it");
    assert_gone(&b.host, &b.state, &format!("hopwise-{}", b.id));
}

#[test]
fn a_sigkilled_bench_s_namespace_is_swept_by_the_next_bench() {
    let mut b = started();
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let netns = format!("hopwise-{}", b.id);
    // Dead, it removed nothing: its namespace and record stay for the next bench.
    std::thread::sleep(Duration::from_millis(300));
    assert!(Path::new(&format!("/run/netns/{netns}")).exists());
    assert_eq!(records(&b.state), vec![b.id.clone()]);
    let quick = ["--quick", "--max-hops", "1"];
    let out = bench(&b.host, "captured", &b.state, &b.svg, &quick)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let swept = format!("removed what the dead bench {} left", b.id);
    assert!(stderr.contains(&swept), "{stderr}");
    assert_gone(&b.host, &b.state, &netns);
    assert_eq!(records(&b.state), Vec::<String>::new());
}

#[test]
fn without_root_the_captured_mode_is_refused_naming_why() {
    common::netns::need_tools();
    let hopwise = PathBuf::from(env!("CARGO_BIN_EXE_hopwise"));
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&hopwise)
        .args(["bench", "hops", "--quick", "--modes", "captured"])
        .args([
            "--state",
            "/nonexistent/hopwise-bench",
            "--svg",
            "/dev/null",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--modes captured"), "{stderr}");
    assert!(stderr.contains("as root"), "{stderr}");
}
