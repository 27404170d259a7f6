//! `hopwise control bench`, small: 20 simulated proxies and 100 copies against a real
//! `hopwise control` child process. Only the report's shape is checked — figures from a test
//! run on a busy machine mean nothing (docs/performance.md has the real ones).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

#[test]
fn a_small_control_plane_benchmark_reports_every_figure_as_json() {
    let mut cmd = assert_cmd::Command::new(env!("CARGO_BIN_EXE_hopwise"));
    cmd.timeout(Duration::from_secs(120));
    let out = cmd
        .args([
            "control",
            "bench",
            "--proxies",
            "20",
            "--copies",
            "100",
            "--services",
            "5",
            "--rounds",
            "2",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["control_plane"], "child process");
    assert_eq!(r["proxies"], 20);
    assert_eq!(r["services"], 5);
    assert_eq!(r["copies"], 100);
    for phase in ["issue", "subscribe", "register", "set_health", "renew"] {
        for field in ["count", "seconds", "per_second", "in_flight"] {
            assert!(r[phase][field].is_number(), "{phase}.{field}: {r}");
        }
        for q in ["p50", "p99", "max"] {
            assert!(r[phase]["latency_ms"][q].is_number(), "{phase}: {r}");
        }
    }
    assert_eq!(r["issue"]["count"], 20);
    assert_eq!(r["register"]["count"], 100);
    for change in ["config_change", "registry_change"] {
        assert_eq!(r[change]["subscribers"], 20, "{r}");
        assert_eq!(r[change]["last_receipt_ms"].as_array().unwrap().len(), 2);
        for q in ["p50", "p99", "max"] {
            assert!(r[change]["latency_ms"][q].is_number(), "{change}: {r}");
        }
    }
    for m in ["rss_before_kib", "rss_loaded_kib", "rss_end_kib", "hwm_kib"] {
        assert!(r["memory"][m].as_u64().unwrap() > 0, "memory.{m}: {r}");
    }
    assert!(r["memory"]["method"].as_str().unwrap().contains("/proc/"));
    for m in ["cpus", "cpu_model", "kernel", "build"] {
        assert!(!r["machine"][m].is_null(), "machine.{m}: {r}");
    }
    assert!(r["snapshot_bytes"][0].as_u64().unwrap() > 0);
}
