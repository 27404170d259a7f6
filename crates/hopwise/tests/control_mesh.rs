//! A mesh with no static addresses: `hopwise control` and several `hopwise proxy --control`
//! processes. Copies come and go without touching a file, a copy killed with SIGKILL leaves
//! when its lease expires (retries to the other copy hide it meanwhile), and the control plane
//! killed and restarted interrupts no traffic. Every assertion is on real traffic. Proxies
//! follow incremental snapshots: after the first, whole, one, only what changed travels, and the
//! merged state is what a fresh subscriber is sent whole.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hopwise_control::pb;
use hopwise_control::plane::delta;
use hopwise_proxy::control::Cached;

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

/// `hopwise proxy` for a: b on local port `port`, an admin endpoint, a cache in `dir/cache`.
fn a_proxy_args(
    dir: &Path,
    server: SocketAddr,
    port: SocketAddr,
    admin: SocketAddr,
    cache: &str,
) -> Vec<String> {
    let path = |p: &str| dir.join(p).to_str().unwrap().to_owned();
    [
        "proxy",
        "--control",
        &format!("https://{server}"),
        "--control-ca",
        &path("state/ca.pem"),
        "--token-file",
        &path("state/tokens/a"),
        "--service",
        "a",
        "--upstream",
        &format!("b={port}"),
        "--admin",
        &admin.to_string(),
        "--cache",
        &path(cache),
    ]
    .map(str::to_owned)
    .to_vec()
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
    let args = a_proxy_args(dir.path(), server, port, admin, "cache-a");
    let (registry, registry_failed) = dead_address_tries(
        dir.path(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
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

/// A subscriber of `a` on its own stream, asking for deltas as `hopwise proxy` does: every
/// message, with the whole snapshot it gives merged onto the last one.
fn watch(
    server: SocketAddr,
    state: &Path,
    token: String,
) -> mpsc::Receiver<(pb::Snapshot, pb::Snapshot)> {
    let server = hopwise_control::client::Server::from_state(&server.to_string(), state).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut c = hopwise_control::client::connect(&server).await.unwrap();
            let mut stream = c
                .subscribe(pb::SubscribeRequest {
                    service: "a".into(),
                    token,
                    proxy: "watcher".into(),
                    admin_addr: String::new(),
                    deltas: true,
                })
                .await
                .unwrap()
                .into_inner();
            let mut last: Option<pb::Snapshot> = None;
            while let Ok(Some(m)) = stream.message().await {
                let whole = match &last {
                    Some(l) if m.base_version != 0 => {
                        assert_eq!(m.base_version, l.version, "a delta on another base");
                        delta::apply(l, m.clone()).unwrap()
                    }
                    _ => m.clone(),
                };
                last = Some(whole.clone());
                if tx.send((m, whole)).is_err() {
                    return;
                }
            }
        });
    });
    rx
}

/// The next message after which `b` has `n` endpoints, and the whole snapshot it gives.
fn until_b_has(
    rx: &mpsc::Receiver<(pb::Snapshot, pb::Snapshot)>,
    n: usize,
) -> (pb::Snapshot, pb::Snapshot) {
    loop {
        let (m, whole) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        if whole
            .upstreams
            .iter()
            .any(|u| u.service == "b" && u.endpoints.len() == n)
        {
            return (m, whole);
        }
    }
}

/// What a proxy cached (the merged, whole snapshot it accepted), but its version.
fn cached(path: &Path) -> Option<Cached> {
    let text = std::fs::read_to_string(path.join("snapshot.json")).ok()?;
    let c: Cached = serde_json::from_str(&text).ok()?;
    Some(Cached { version: 0, ..c })
}

/// The answers to `n` requests through `port`.
fn answers(port: SocketAddr, n: usize) -> BTreeSet<String> {
    (0..n).map(|_| body(&get(port)).to_owned()).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// Copies join and leave and the mesh file changes while a's proxy follows deltas: each copy
/// costs one address on the wire, the new file arrives as a delta and takes effect, traffic goes
/// to exactly the registered copies, and what a cached is what a proxy started afresh is sent
/// whole.
#[test]
fn a_proxy_following_deltas_holds_what_a_fresh_one_is_sent_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = "mesh: { name: delta, trust_domain: delta.local }
services:
  a: { calls: { b: { timeout: 2s } } }
  b: {}
";
    std::fs::write(dir.path().join("mesh.yaml"), mesh).unwrap();
    let server = free();
    let _cp = control(dir.path(), server);
    let token_a = dir.path().join("state/tokens/a");
    let rx = watch(
        server,
        &dir.path().join("state"),
        std::fs::read_to_string(&token_a).unwrap().trim().to_owned(),
    );
    let (first, _) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(first.base_version, 0, "a stream starts whole");
    assert_eq!(first.mesh_yaml.as_deref(), Some(mesh));

    let b1 = copy_of_b(dir.path(), server, 0, backend("one"));
    let _b2 = copy_of_b(dir.path(), server, 1, backend("two"));
    let (port, admin) = (free(), free());
    let a_proxy = |port: SocketAddr, admin: SocketAddr, cache: &str| {
        let args = a_proxy_args(dir.path(), server, port, admin, cache);
        spawn(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let _a = a_proxy(port, admin, "cache-a");
    until_b_has(&rx, 2);
    assert!(until_all(port, &["one", "two"], Duration::from_secs(20)));

    // A third copy joins: one address added, nothing else on the wire.
    let _b3 = copy_of_b(dir.path(), server, 2, backend("three"));
    let (joined, whole) = until_b_has(&rx, 3);
    assert_ne!(joined.base_version, 0, "a delta");
    assert_eq!(joined.mesh_yaml, None);
    assert_eq!(joined.policy_json, None);
    assert_eq!(joined.trust_bundle_pem, None);
    assert_eq!(joined.upstreams.len(), 1);
    assert_eq!(joined.upstreams[0].endpoints.len(), 1);
    assert!(joined.upstreams[0].removed_endpoints.is_empty());
    assert!(until_all(port, &["three"], Duration::from_secs(20)));
    assert_eq!(answers(port, 60), set(&["one", "two", "three"]));

    // One leaves (SIGKILL; its lease expires): one address removed.
    drop(b1);
    let (left, after) = until_b_has(&rx, 2);
    assert_ne!(left.base_version, 0);
    assert_eq!(left.upstreams.len(), 1);
    assert!(left.upstreams[0].endpoints.is_empty());
    assert_eq!(left.upstreams[0].removed_endpoints.len(), 1);
    let b = |s: &pb::Snapshot| s.upstreams[0].endpoints.clone();
    assert!(b(&whole).contains(&left.upstreams[0].removed_endpoints[0]));
    assert!(!b(&after).contains(&left.upstreams[0].removed_endpoints[0]));
    // a's proxy has it too once its cache says so; then only the two registered copies answer.
    let deadline = Instant::now() + Duration::from_secs(20);
    while cached(&dir.path().join("cache-a")).map(|c| c.upstreams["b"].len()) != Some(2) {
        assert!(Instant::now() < deadline, "a never dropped the dead copy");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(answers(port, 60), set(&["two", "three"]));

    // A new mesh file: a delta carrying the file and nothing of the copies, put in force.
    let changed = mesh.replace("timeout: 2s", "timeout: 7s");
    let file = dir.path().join("mesh-2.yaml");
    std::fs::write(&file, &changed).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["control", "apply", file.to_str().unwrap(), "--server"])
        .arg(server.to_string())
        .arg("--state")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (applied, _) = loop {
        let (m, whole) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        if whole.config_version == 2 {
            break (m, whole);
        }
    };
    assert_ne!(applied.base_version, 0);
    assert_eq!(applied.mesh_yaml.as_deref(), Some(changed.as_str()));
    assert!(applied.upstreams.is_empty() && applied.removed_upstreams.is_empty());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let config = body(&common::http_get(admin, "/config", &admin.to_string())).to_owned();
        let json: serde_json::Value = serde_json::from_str(&config).unwrap();
        if json["config_version"] == 2 {
            assert!(config.contains("\"7s\""), "{config}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a never put config version 2 in force"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(answers(port, 40), set(&["two", "three"]));

    // A second proxy of a, started now, is sent one whole snapshot: a holds the same.
    let _a2 = a_proxy(free(), free(), "cache-a2");
    let fresh = cached(&dir.path().join("cache-a2")).unwrap();
    let followed = cached(&dir.path().join("cache-a")).unwrap();
    assert_eq!(followed, fresh);
    assert_eq!(fresh.config_version, 2);
    assert_eq!(fresh.upstreams["b"].len(), 2);
}
