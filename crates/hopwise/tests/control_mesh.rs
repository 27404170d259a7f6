//! A mesh with no static addresses: `hopwise control` and several `hopwise proxy --control`
//! processes. Copies come and go without touching a file, a copy killed with SIGKILL leaves
//! when its lease expires (retries to the other copy hide it meanwhile), and the control plane
//! killed and restarted interrupts no traffic. Every assertion is on real traffic.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Proc, backend, body, free, get, metric, spawn, until_all};

fn control(dir: &Path, listen: SocketAddr) -> Proc {
    spawn(&[
        "control",
        "--config",
        dir.join("mesh.yaml").to_str().unwrap(),
        "--state",
        dir.join("state").to_str().unwrap(),
        "--listen",
        &listen.to_string(),
    ])
}

/// A copy of `b` in front of `app`, registered with a short lease.
fn copy_of_b(dir: &Path, server: SocketAddr, copy: usize, app: SocketAddr) -> Proc {
    spawn(&[
        "proxy",
        "--control",
        &format!("https://{server}"),
        "--control-ca",
        dir.join("state/ca.pem").to_str().unwrap(),
        "--token-file",
        dir.join("state/tokens/b").to_str().unwrap(),
        "--service",
        "b",
        "--copy",
        &copy.to_string(),
        "--inbound",
        &free().to_string(),
        "--app",
        &app.to_string(),
        "--cache",
        dir.join(format!("cache-b{copy}")).to_str().unwrap(),
        "--lease-ttl",
        "2s",
    ])
}

#[test]
fn copies_come_and_go_and_the_control_plane_may_die() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mesh.yaml"),
        "mesh: { name: e2e, trust_domain: e2e.local }
services:
  a:
    calls:
      b: { timeout: 2s, retries: { count: 2, on: [connect-failure, refused-stream, reset-before-request] } }
  b: {}
",
    )
    .unwrap();
    let server = free();
    let mut cp = control(dir.path(), server);
    let (app1, app2) = (backend("one"), backend("two"));
    let b1 = copy_of_b(dir.path(), server, 0, app1);
    let _b2 = copy_of_b(dir.path(), server, 1, app2);
    let port = free();
    let _a = spawn(&[
        "proxy",
        "--control",
        &format!("https://{server}"),
        "--control-ca",
        dir.path().join("state/ca.pem").to_str().unwrap(),
        "--token-file",
        dir.path().join("state/tokens/a").to_str().unwrap(),
        "--service",
        "a",
        "--upstream",
        &format!("b={port}"),
        "--cache",
        dir.path().join("cache-a").to_str().unwrap(),
    ]);
    // Both copies registered, healthy and known to a — with no address in any file.
    assert!(
        until_all(port, &["one", "two"], Duration::from_secs(20)),
        "never saw both copies"
    );

    // SIGKILL one copy: no goodbye. Retries to the other hide it until its lease expires.
    drop(b1);
    let mut failed = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(4) {
        let r = get(port);
        if body(&r) != "two" {
            failed += 1;
        }
    }
    assert_eq!(failed, 0, "a request failed while a copy was dead");

    // The control plane dies: traffic goes on from the last snapshot.
    let _ = cp.0.kill();
    let _ = cp.0.wait();
    for _ in 0..20 {
        assert_eq!(body(&get(port)), "two");
    }
    // It comes back (same state directory); a new copy, started by hand, gets traffic.
    cp = control(dir.path(), server);
    let app3 = backend("three");
    let _b3 = copy_of_b(dir.path(), server, 2, app3);
    assert!(
        until_all(port, &["three"], Duration::from_secs(30)),
        "the new copy never got traffic"
    );
    drop(cp);
}

/// Tries that met a refused connection at a's proxy while `requests` requests were sent after
/// one of b's two copies was SIGKILLed.
fn dead_address_tries(
    dir: &Path,
    a_args: &[&str],
    kill: impl FnOnce(),
    port: SocketAddr,
    admin: SocketAddr,
    requests: usize,
) -> (u64, usize) {
    let _a = spawn(a_args);
    assert!(until_all(port, &["one", "two"], Duration::from_secs(20)));
    let before = metric(admin, "hopwise_local_replies_total")
        + metric(
            admin,
            "hopwise_retries_total{service=\"b\",route=\"b\",condition=\"connect-failure\"}",
        );
    kill();
    let mut failed = 0;
    for _ in 0..requests {
        if body(&get(port)) != "two" {
            failed += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = metric(admin, "hopwise_local_replies_total")
        + metric(
            admin,
            "hopwise_retries_total{service=\"b\",route=\"b\",condition=\"connect-failure\"}",
        );
    let _ = dir;
    (after - before, failed)
}

/// The seed's next lesson, counted: a copy dies without a goodbye; how many requests are still
/// sent to its address? With the registry (lease) and outlier ejection, a handful; with a fixed
/// address and no failure detection, every other request, for as long as nobody edits a file.
#[test]
fn requests_sent_to_a_dead_copy_registry_against_fixed_addresses() {
    let requests = 200;
    // 1. Registry: control plane, leases of 2 s.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mesh.yaml"),
        "mesh: { name: dead, trust_domain: dead.local }
services:
  a: { calls: { b: { timeout: 2s } } }
  b: {}
",
    )
    .unwrap();
    let server = free();
    let _cp = control(dir.path(), server);
    let b1 = copy_of_b(dir.path(), server, 0, backend("one"));
    let _b2 = copy_of_b(dir.path(), server, 1, backend("two"));
    let (port, admin) = (free(), free());
    let token = dir.path().join("state/tokens/a");
    let ca = dir.path().join("state/ca.pem");
    let cache = dir.path().join("cache-a");
    let (registry, registry_failed) = dead_address_tries(
        dir.path(),
        &[
            "proxy",
            "--control",
            &format!("https://{server}"),
            "--control-ca",
            ca.to_str().unwrap(),
            "--token-file",
            token.to_str().unwrap(),
            "--service",
            "a",
            "--upstream",
            &format!("b={port}"),
            "--admin",
            &admin.to_string(),
            "--cache",
            cache.to_str().unwrap(),
        ],
        move || drop(b1),
        port,
        admin,
        requests,
    );

    // 2. Fixed addresses in the file, no failure detection (`outlier: none`).
    let dir2 = tempfile::tempdir().unwrap();
    let (i1, i2, port2, admin2) = (free(), free(), free(), free());
    let (one, two) = (backend("one"), backend("two"));
    std::fs::write(
        dir2.path().join("mesh.yaml"),
        format!(
            "mesh: {{ name: fixed, trust_domain: fixed.local, certs: certs }}
services:
  a:
    copies: [{{ admin: {admin2}, upstreams: {{ b: {port2} }} }}]
    calls: {{ b: {{ timeout: 2s, outlier: none, balancer: round-robin }} }}
  b:
    copies: [{{ inbound: {i1}, app: {one} }}, {{ inbound: {i2}, app: {two} }}]
"
        ),
    )
    .unwrap();
    let file = dir2.path().join("mesh.yaml");
    let f = file.to_str().unwrap();
    let certs = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["certs", "--config", f])
        .output()
        .unwrap();
    assert!(certs.status.success());
    let fb1 = spawn(&["proxy", "--config", f, "--service", "b", "--copy", "0"]);
    let _fb2 = spawn(&["proxy", "--config", f, "--service", "b", "--copy", "1"]);
    let (fixed, fixed_failed) = dead_address_tries(
        dir2.path(),
        &["proxy", "--config", f, "--service", "a"],
        move || drop(fb1),
        port2,
        admin2,
        requests,
    );
    println!("requests after the SIGKILL: {requests}");
    println!("registry + ejection: {registry} sent to the dead copy, {registry_failed} failed");
    println!("fixed addresses, no detection: {fixed} sent to the dead copy, {fixed_failed} failed");
    // Retries to the other copy hide the dead one from callers in both.
    assert_eq!((registry_failed, fixed_failed), (0, 0));
    // Outlier ejection after 5 consecutive failures, then the lease: a handful at most.
    assert!(registry <= 10, "{registry}");
    // Round robin with no detection: every other request, for as long as it runs.
    assert!(fixed >= (requests as u64) / 3, "{fixed}");
}
