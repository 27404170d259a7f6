//! `hopwise demo registry` for real: a copy of b added and another SIGKILLed under a steady load,
//! with fixed addresses and through the control plane. The numbers it prints must be the ones
//! its processes counted — a's proxy's tries, b's apps' requests, the load's answers — and must
//! show the lesson: the fixed layout touches the mesh file and keeps sending to the dead
//! address; the registry touches nothing and stops once the lease is gone. Time is never
//! asserted. Every process it started must be gone when it exits.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn words(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect()
}

/// A phase's tally adds up: every request sent was answered by a copy or failed.
fn adds_up(t: &Value) {
    assert_eq!(n(&t["sent"]), n(&t["ok"]) + n(&t["failed"]), "{t}");
    let by_copy: u64 = t["by_copy"].as_object().unwrap().values().map(n).sum();
    assert_eq!(by_copy, n(&t["ok"]), "{t}");
    let failures: u64 = t["failures"].as_object().unwrap().values().map(n).sum();
    assert_eq!(failures, n(&t["failed"]), "{t}");
}

#[test]
fn the_registry_touches_no_file_and_stops_sending_to_a_dead_copy() {
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["demo", "registry", "--rate", "40", "--after-kill", "4s"])
        .args(["--lease-ttl", "1s", "--json"])
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    let r: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let layouts = r["layouts"].as_array().unwrap();
    let names: Vec<&str> = layouts
        .iter()
        .map(|l| l["layout"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fixed", "registry"]);

    for l in layouts {
        adds_up(&l["add"]);
        adds_up(&l["kill"]);
        // The added copy answered before it counted as added.
        assert!(n(&l["add"]["by_copy"]["b2"]) >= 5, "{l}");
        // What it prints is a's proxy's count less the apps' count.
        let (tries, apps, dead) = (n(&l["tries"]), n(&l["app_requests"]), n(&l["sent_to_dead"]));
        assert_eq!(dead, tries - apps, "{l}");
        // Each retry after a refused connection followed one try to the dead address (the
        // only copy that refuses): a second count, by a's proxy alone, that cannot exceed it.
        assert!(n(&l["connect_failure_retries"]) <= dead, "{l}");
        // The load's answers after the kill are the live copies' requests from a.
        assert!(n(&l["kill"]["ok"]) <= apps, "{l}");
    }
    let (fixed, registry) = (&layouts[0], &layouts[1]);
    assert_eq!(words(&fixed["files_touched"]), ["mesh.yaml"]);
    assert_eq!(words(&fixed["restarted"]), ["a"]);
    assert!(fixed["mesh"].as_str().unwrap().matches("inbound:").count() == 3);
    assert!(words(&registry["files_touched"]).is_empty());
    assert!(words(&registry["restarted"]).is_empty());
    assert!(!registry["mesh"].as_str().unwrap().contains("127.0.0.1"));
    // Round robin over three copies, nothing to take the dead one out: a's proxy keeps trying
    // it for as long as the load runs. The registry drops it when its lease ends.
    let (fixed_dead, registry_dead) = (n(&fixed["sent_to_dead"]), n(&registry["sent_to_dead"]));
    assert!(fixed_dead > 0, "{fixed}");
    assert!(registry_dead < fixed_dead, "{registry_dead} ≥ {fixed_dead}");

    // Nothing left behind: no process, no temporary directory.
    let workdir = r["workdir"].as_str().unwrap();
    for pid in r["proxy_pids"].as_array().unwrap() {
        let pid = n(pid);
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !cmdline.contains(workdir),
            "process {pid} outlived the demo"
        );
    }
    assert!(!Path::new(workdir).exists());
}
