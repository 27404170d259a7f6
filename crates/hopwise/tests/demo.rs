//! `hopwise demo` for real: the seed's retry chain and timeout trap, and the seed's "Service
//! Mesh" measurement, each run by the binary with real `hopwise proxy` processes. Counts are
//! asserted exactly; time never is. Every proxy a demo started must be gone when it exits.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

/// Runs `hopwise demo <args>` and returns its JSON.
fn demo(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .arg("demo")
        .args(args)
        // A hang fails the test instead of stalling CI; the runs take seconds.
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    // Nothing left behind: no proxy process, no temporary directory.
    let pids = json["proxy_pids"].as_array().unwrap();
    assert!(!pids.is_empty());
    for pid in pids {
        let pid = pid.as_u64().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let workdir = json["workdir"].as_str().unwrap();
        assert!(
            stat.is_empty() || !cmdline.contains(workdir),
            "proxy {pid} outlived the demo: {stat}"
        );
    }
    assert!(!Path::new(json["workdir"].as_str().unwrap()).exists());
    json
}

fn counts(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect()
}

#[test]
fn retry_chain_reproduces_the_seeds_table_under_istio_and_never_multiplies_under_hopwise() {
    let checkouts = 3;
    let json = demo(&["retry-chain", "--checkouts", "3", "--json"]);
    assert_eq!(json["checkouts"], checkouts);
    let rows = json["rows"].as_array().unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "grpc-down",
            "http-down",
            "grpc-unavailable",
            "http-503",
            "http-503-retriable",
            "app-retries"
        ]
    );
    // The seed's table, checkout by checkout, counted by pricing's proxy.
    let istio: Vec<Vec<u64>> = rows
        .iter()
        .map(|r| counts(&r["istio"]["proxy_counts"]))
        .collect();
    for (row, want) in istio.iter().zip([27, 3, 27, 1, 27, 81]) {
        assert_eq!(*row, vec![want; checkouts], "{istio:?}");
    }
    for r in rows {
        let key = r["key"].as_str().unwrap();
        for defaults in ["istio", "hopwise"] {
            let run = &r[defaults];
            let proxy = counts(&run["proxy_counts"]);
            assert_eq!(proxy.len(), checkouts, "{key} {defaults}");
            // Where inventory is up it counts what it received, and agrees with the proxy.
            match run["inventory_counts"].as_array() {
                Some(_) => assert_eq!(counts(&run["inventory_counts"]), proxy, "{key} {defaults}"),
                None => assert!(key.ends_with("-down"), "{key} {defaults}"),
            }
            // What `hopwise check` predicts from the same file is what the proxies did.
            assert!(
                proxy.iter().all(|p| Some(*p) == run["check"].as_u64()),
                "{key} {defaults}: {proxy:?} against check's {}",
                run["check"]
            );
        }
        // hopwise: at most 3 attempts per checkout call in every row.
        let h = &r["hopwise"];
        let per_call = counts(&h["per_call"]);
        assert!(
            per_call.iter().all(|c| (1..=3).contains(c)),
            "{key}: {per_call:?}"
        );
        assert_eq!(h["max_per_call"].as_u64(), per_call.iter().copied().max());
        let per_checkout = counts(&h["proxy_counts"]);
        if key == "app-retries" {
            // The documented exception: the app's own retries (not a proxy's) multiply.
            assert_eq!(per_checkout, vec![9; checkouts], "{key}");
            assert_eq!(per_call, vec![3; 3 * checkouts], "{key}");
        } else {
            assert!(
                per_checkout.iter().all(|c| *c <= 3),
                "{key}: {per_checkout:?}"
            );
        }
        assert!(!h["why"].as_str().unwrap().is_empty());
    }
    // The hopwise figures, row by row, with the reason the proxies above did not retry.
    let hopwise: Vec<u64> = rows
        .iter()
        .map(|r| counts(&r["hopwise"]["proxy_counts"])[0])
        .collect();
    assert_eq!(hopwise, [3, 3, 1, 1, 3, 9]);
    let skipped = &rows[4]["hopwise"]["skipped"];
    for proxy in ["frontend's proxy", "checkout's proxy"] {
        assert!(
            skipped
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["proxy"] == proxy
                    && s["reason"] == "retried-below"
                    && s["count"] == checkouts),
            "{skipped}"
        );
    }

    // The timeout trap: Istio's list does not retry a timed-out try; with `reset` it does.
    let trap = json["timeout_trap"].as_array().unwrap();
    assert_eq!(trap.len(), 2);
    for (t, tries) in trap.iter().zip([1, 3]) {
        assert_eq!(t["requests"], 5);
        assert_eq!(t["proxy_tries"], 5 * tries, "{t}");
        assert_eq!(t["inventory_received"], 5 * tries, "{t}");
        assert!(t["client_got"].as_str().unwrap().contains("504"), "{t}");
    }
    assert!(trap[1]["retry_on"].as_str().unwrap().ends_with("reset"));
}

#[test]
fn loan_fee_collects_twice_under_the_seeds_policy_and_once_under_hopwises() {
    let json = demo(&["loan-fee", "--json"]);
    let layouts = json["layouts"].as_array().unwrap();
    let row = |l: &Value| {
        (
            l["balance_code"].as_u64().unwrap(),
            l["payment_code"].as_u64().unwrap(),
            l["reached_fee"].as_u64().unwrap(),
            l["collected"].as_u64().unwrap(),
            l["processes"].as_u64().unwrap(),
            l["local_hops"].as_u64().unwrap(),
        )
    };
    let table: Vec<_> = layouts.iter().map(row).collect();
    assert_eq!(
        table,
        [
            // The seed's thick application: the payment is tried once, its 503 reaches the app.
            (200, 503, 4, 1, 2, 1),
            // The seed's sidecar: the 503 is retried whatever the method — collected twice.
            (200, 200, 5, 2, 3, 2),
            // hopwise's defaults with gateway-error: the POST is not repeated.
            (200, 503, 4, 1, 3, 2),
            // With an Idempotency-Key the fee service honours: retried, collected once.
            (200, 200, 5, 1, 3, 2),
        ]
    );
    assert_eq!(layouts[3]["fee"]["deduplicated"], 1);
    // Metric keys: the thick service's own by action; the sidecar's by the mesh file's route
    // names, never the fee's path vocabulary.
    for l in layouts {
        let keys: Vec<&String> = l["metric"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["balance", "pay"], "{}", l["name"]);
        assert_eq!(l["metric"]["balance"]["tries"], 3, "{}", l["name"]);
    }
    let pay_tries: Vec<u64> = layouts
        .iter()
        .map(|l| l["metric"]["pay"]["tries"].as_u64().unwrap())
        .collect();
    assert_eq!(pay_tries, [1, 2, 1, 2]);
    // `hopwise check` flags the seed's policy before it runs.
    assert!(
        layouts[1]["check"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().starts_with("unsafe-retry (error)")),
        "{}",
        layouts[1]["check"]
    );
    // The code-side count: network concerns marked in the thick service, none in the thin.
    let code = &json["code"];
    assert!(code["thick"]["network"].as_u64().unwrap() > 0);
    assert_eq!(code["thin"]["network"], 0);
    assert_eq!(code["thin"]["safety"], 1);
    assert!(code["thick"]["lines"].as_u64() > code["thin"]["lines"].as_u64());
}

#[test]
fn bad_demo_options_fail_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["demo", "retry-chain", "--checkouts", "0"])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--checkouts"));
}
