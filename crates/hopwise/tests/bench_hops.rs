//! `hopwise bench hops` for real, as a smoke run: the quick preset over 0..1 hops starts the
//! backend, the client and two `hopwise proxy` processes per hop, plain and mTLS, and reports a
//! per-hop figure for each. Speed is reported, never asserted: the only checks are that the
//! figures exist and a hop costs something. Also: bad options fail cleanly.

use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

fn hopwise() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopwise"));
    // A hang fails the test instead of stalling CI; the run itself takes a few seconds.
    cmd.timeout(Duration::from_secs(120));
    cmd
}

/// `hopwise bench hops --quick --json --max-hops 1 ARGS… --svg SVG`, which must succeed: its JSON.
fn quick_json(args: &[&str], svg: &std::path::Path) -> Value {
    let out = hopwise()
        .args(["bench", "hops", "--quick", "--json", "--max-hops", "1"])
        .args(args)
        .arg("--svg")
        .arg(svg)
        .output()
        .expect("the bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).expect("the bench's JSON")
}

#[test]
fn quick_json_run_reports_a_cost_per_hop_plain_and_mtls() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("hops.svg");
    let json = quick_json(&[], &svg);
    assert_eq!(json["options"]["max_hops"], 1);
    assert_eq!(json["options"]["runs"], 1);
    let per_hop = json["per_hop"].as_array().unwrap();
    for mode in ["plain", "mtls"] {
        let line = per_hop
            .iter()
            .find(|p| p["system"] == "hopwise" && p["mode"] == mode)
            .unwrap_or_else(|| panic!("no hopwise {mode} line in {json}"));
        let cost = line["p50_us"]["median"].as_f64().unwrap();
        // A difference of two latencies: noise can make it negative on a busy machine, so
        // only that it was computed is checked (no timing assertion).
        assert!(cost.is_finite(), "{mode}: {cost} µs per hop");
        let cores = line["cores_per_proxy"]["median"].as_f64().unwrap();
        assert!(cores > 0.0, "{mode}: {cores} cores per proxy");
        assert!(line["rss_mib"]["median"].as_f64().unwrap() > 0.0);
    }
    // 0 hops, then plain and mTLS at 1 hop.
    assert_eq!(json["configs"].as_array().unwrap().len(), 3);
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("hopwise mtls"));
}

/// `--paired` for real: each recording configuration started beside its twin recording
/// nothing, one client alternating requests between them. Structure and sanity only: both
/// chains answered as many requests, every difference is a number, each run has its blocks,
/// the tracing pair's spans reached the collector. No timing is asserted.
#[test]
fn a_paired_run_measures_each_recording_beside_its_twin() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("hops.svg");
    let paired = [
        "--paired",
        "--modes",
        "plain",
        "--access-log",
        "--tracing",
        "100%",
    ];
    let json = quick_json(&[&paired[..], &["--blocks", "5"]].concat(), &svg);
    assert_eq!(json["options"]["paired"], true);
    // Only the pairs ran: no solo chains, no plot.
    assert!(json["configs"].as_array().unwrap().is_empty(), "{json}");
    assert!(!svg.exists());
    let paired = json["paired"].as_array().unwrap();
    let labels: Vec<&str> = paired
        .iter()
        .map(|p| p["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        [
            "plain + access log 1 hop − plain 1 hop",
            "plain + tracing 100% 1 hop − plain 1 hop"
        ]
    );
    for p in paired {
        for key in ["p50_us", "p90_us", "p50_blocks_us", "p90_blocks_us"] {
            assert!(p[key]["median"].as_f64().unwrap().is_finite(), "{key}: {p}");
        }
        assert_eq!(p["p50_blocks_us"]["n"], 5, "{p}");
        assert_eq!(p["judged_on"], "blocks", "one run: its blocks are judged");
    }
    assert_eq!(paired[0]["bar"]["limit"], 5.0);
    assert!(["meets", "over", "cannot_judge"].contains(&paired[0]["verdict"].as_str().unwrap()));
    assert_eq!(paired[1]["verdict"], "no_bar");
    let samples = json["pair_samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2, "{json}");
    for s in samples {
        // Every round called both: as many requests each (measured, resent or failed).
        let sent = |side: &Value| {
            side["requests"].as_u64().unwrap()
                + side["reconnects"].as_u64().unwrap()
                + side["errors"].as_u64().unwrap()
        };
        assert_eq!((sent(&s["a"]), sent(&s["b"])), (300, 300), "{s}");
        assert!(s["a"]["requests"].as_u64().unwrap() > 0);
        let blocks = s["blocks"].as_array().unwrap();
        assert_eq!(blocks.len(), 5, "{s}");
        for b in blocks {
            assert!(b["a_p50_us"].as_f64().unwrap() > 0.0, "{b}");
            assert!(b["b_p50_us"].as_f64().unwrap() > 0.0, "{b}");
        }
    }
    assert!(
        samples[0].get("spans").is_none(),
        "the access log exports nothing"
    );
    // Only A traces, every request at 100 %.
    assert!(samples[1]["spans"].as_u64().unwrap() > 0, "{}", samples[1]);
}

#[test]
fn paired_with_nothing_to_pair_says_what_to_add() {
    let out = hopwise()
        .args([
            "bench",
            "hops",
            "--paired",
            "--quick",
            "--modes",
            "plain,mtls",
        ])
        .args(["--svg", "/dev/null"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing to pair"), "{stderr}");
}

#[test]
fn bad_options_fail_with_a_message() {
    let out = hopwise()
        .args(["bench", "hops", "--max-hops", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--max-hops"), "{stderr}");
}

/// The rate client opens no more connections than `--connections`, however slow the answers:
/// a request due while all are busy is counted as a stall, so the proxies' peak memory is read
/// at a known load.
#[test]
fn the_rate_client_keeps_to_its_connections_and_counts_stalls() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    // Each answer takes 50 requests' worth of time at 500/s.
                    std::thread::sleep(Duration::from_millis(100));
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if conn.write_all(answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let out = hopwise()
        .args(["bench", "client", "--target", &target.to_string()])
        .args(["--rate", "500", "--duration", "1s", "--connections", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["connections"], 3, "{result}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
    // About 30 answered, the other ~470 due requests counted as stalls.
    assert!(result["missed"].as_u64().unwrap() > 100, "{result}");
    assert!(result["requests"].as_u64().unwrap() > 0, "{result}");
}
