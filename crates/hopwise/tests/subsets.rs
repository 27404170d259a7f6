//! Label subsets end to end: real `hopwise proxy` processes over mutual TLS, real apps that say
//! which copy answered. b has two copies, one labelled `version: v1` and one `version: v2`; a's
//! proxy sends by b's own routes. From the mesh file: a 50/50 split between the subsets lands
//! every request on a copy of the subset it picked, in shares within binomial bounds; a rule
//! sending everything to v2 reaches v2 alone; a subset no copy carries is answered 503
//! `no-endpoint`. From the control plane: copies registered with `--label`, and the split
//! changed live by `hopwise control apply` fails no request of the steady traffic.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::traffic::Traffic;
use common::{Proc, backend, body, free, http_get, run_status, spawn, spawn_logged, until_all};

/// b's routes: `/canary` to v2 alone, `/gone` to a subset no copy carries, the rest split
/// between v1 and v2 by `weights`.
fn b_routes(weights: (u32, u32)) -> String {
    let (v1, v2) = weights;
    format!(
        "    routes:
      split:
        rules:
          - matches: [{{ path: {{ type: PathPrefix, value: /canary }} }}]
            backends: [{{ service: b, subset: {{ version: v2 }} }}]
          - matches: [{{ path: {{ type: PathPrefix, value: /gone }} }}]
            backends: [{{ service: b, subset: {{ version: v3 }} }}]
          - backends:
              - {{ service: b, subset: {{ version: v1 }}, weight: {v1} }}
              - {{ service: b, subset: {{ version: v2 }}, weight: {v2} }}
"
    )
}

/// `n` requests for `path` through a's port for b: how many each app answered, and any other
/// answer whole.
fn count(port: SocketAddr, path: &str, n: usize) -> (usize, usize, Vec<String>) {
    let (mut v1, mut v2, mut other) = (0, 0, Vec::new());
    for _ in 0..n {
        let resp = http_get(port, path, "b");
        match (resp.starts_with("HTTP/1.1 200"), body(&resp)) {
            (true, "v1") => v1 += 1,
            (true, "v2") => v2 += 1,
            _ => other.push(resp),
        }
    }
    (v1, v2, other)
}

#[test]
fn a_split_between_subsets_reaches_each_subsets_copies_in_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let (local, a_admin) = (free(), free());
    let (app1, app2) = (backend("v1"), backend("v2"));
    let yaml = format!(
        "mesh: {{ name: t, trust_domain: t.local, certs: certs }}
services:
  a:
    copies: [{{ admin: {a_admin}, upstreams: {{ b: {local} }} }}]
    calls: {{ b: {{ timeout: 5s }} }}
  b:
    copies:
      - {{ app: {app1}, inbound: {}, labels: {{ version: v1 }} }}
      - {{ app: {app2}, inbound: {}, labels: {{ version: v2 }} }}
{}",
        free(),
        free(),
        b_routes((50, 50))
    );
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, yaml).unwrap();
    let file = file.to_str().unwrap();
    let (status, out) = run_status(&["certs", "--config", file]);
    assert_eq!(status, Some(0), "{out}");
    let _procs: Vec<Proc> = [
        vec!["--service", "b", "--copy", "0"],
        vec!["--service", "b", "--copy", "1"],
        vec!["--service", "a"],
    ]
    .into_iter()
    .map(|args| spawn(&[&["proxy", "--config", file][..], &args].concat()))
    .collect();
    assert!(
        until_all(local, &["v1", "v2"], Duration::from_secs(20)),
        "both subsets answer through a"
    );

    // 50/50 over 400 requests: v1's count is binomial (400, 0.5), σ = 10; ±50 is 5 σ, a false
    // failure about once in 1.7 million runs. Every answer is one of the two copies'.
    let n = 400;
    let (v1, v2, other) = count(local, "/", n);
    println!("50/50 split over {n} requests: v1 {v1}, v2 {v2}");
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(v1 + v2, n);
    assert!(v1.abs_diff(n / 2) <= 50, "v1 {v1}, v2 {v2}");

    // Everything to v2: v2 alone answers.
    let (v1, v2, other) = count(local, "/canary", 100);
    assert_eq!((v1, v2, other.len()), (0, 100, 0), "{other:?}");

    // A subset no copy carries: as a service without copies is answered.
    let resp = http_get(local, "/gone", "b");
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.contains("x-hopwise-error: no-endpoint"), "{resp}");
}

fn apply(server: SocketAddr, state: &Path, file: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["control", "apply", file.to_str().unwrap()])
        .args(["--server", &server.to_string()])
        .args(["--state", state.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn registered_labels_select_copies_and_a_split_changed_live_fails_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (local, a_admin, server) = (free(), free(), free());
    let mesh = |weights| {
        format!(
            "mesh: {{ name: live, trust_domain: live.local }}
services:
  a:
    copies: [{{ admin: {a_admin}, upstreams: {{ b: {local} }} }}]
    calls: {{ b: {{ timeout: 5s }} }}
  b:
{}",
            b_routes(weights)
        )
    };
    std::fs::write(d.join("mesh.yaml"), mesh((50, 50))).unwrap();
    let state = d.join("state");
    let _cp = spawn_logged(
        &[
            "control",
            "--config",
            d.join("mesh.yaml").to_str().unwrap(),
            "--state",
            state.to_str().unwrap(),
            "--listen",
            &server.to_string(),
        ],
        &d.join("control.log"),
    );
    let control = format!("https://{server}");
    let ca = state.join("ca.pem");
    let proxy = |service: &str, extra: &[&str], log: &str| {
        let token = state.join("tokens").join(service);
        let cache = d.join(format!("cache-{log}"));
        let args = [
            &[
                "proxy",
                "--control",
                &control,
                "--control-ca",
                ca.to_str().unwrap(),
                "--token-file",
                token.to_str().unwrap(),
                "--service",
                service,
                "--cache",
                cache.to_str().unwrap(),
                "--name",
                log,
            ][..],
            extra,
        ]
        .concat();
        spawn_logged(&args, &d.join(format!("{log}.log")))
    };
    let mut procs = Vec::new();
    for (version, app) in [("v1", backend("v1")), ("v2", backend("v2"))] {
        let (inbound, app, label) = (
            free().to_string(),
            app.to_string(),
            format!("version={version}"),
        );
        let extra = ["--inbound", &inbound, "--app", &app, "--label", &label];
        procs.push(proxy("b", &extra, &format!("b-{version}")));
    }
    procs.push(proxy("a", &[], "a"));
    assert!(
        until_all(local, &["v1", "v2"], Duration::from_secs(30)),
        "both registered copies answer through a"
    );
    let resp = http_get(local, "/canary", "b");
    assert_eq!(body(&resp), "v2", "{resp}");

    // Everything to v2, applied while requests run.
    // Each answer's body; a failed answer whole.
    let traffic = Traffic::start(Duration::from_millis(2), move || {
        let resp = http_get(local, "/", "b");
        match body(&resp) {
            "v1" | "v2" if resp.starts_with("HTTP/1.1 200") => Ok(body(&resp).to_owned()),
            _ => Err(resp),
        }
    });
    let start = Instant::now();
    while traffic.sent() < 50 {
        assert!(start.elapsed() < Duration::from_secs(30), "no traffic");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(d.join("v2.yaml"), mesh((0, 1))).unwrap();
    apply(server, &state, &d.join("v2.yaml"));
    // In force once the last 50 answers in a row came from v2 alone.
    let start = Instant::now();
    loop {
        let seen = traffic.seen();
        if seen.len() >= 50 && seen[seen.len() - 50..].iter().all(|s| s == "v2") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "v1 still answers after the change"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (seen, failed) = traffic.stop();
    println!(
        "{} requests while the split changed; then v2 alone; failed: {}",
        seen.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:?}");
    let (v1, v2, other) = count(local, "/", 50);
    assert_eq!((v1, v2, other.len()), (0, 50, 0), "{other:?}");
}
