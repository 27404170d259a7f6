//! Control-plane replicas sharing a real etcd (`hopwise control --store etcd://…`), with
//! `hopwise proxy --control A,B` processes in front of real backends:
//!
//! - a copy registered through replica A is routed to by a proxy subscribed to replica B;
//! - each replica's `hopwise status` lists every proxy with the replica it is connected to;
//! - under steady load, a whole CA rotation (`add`, `reissue`, `retire`, each `--wait`ing,
//!   never `--force`d) runs through replica A while a's proxy is on B, then another one is
//!   finished through B (which waits for b's proxies, on A): no request fails;
//! - under steady load, replica A is killed with SIGKILL: no request fails, the proxies that
//!   were on A move to B and keep their leases (renewed through B), A's records of them leave
//!   B's status, and a copy started afterwards receives traffic;
//! - etcd is killed with SIGKILL and started again on its data directory: nothing is lost (the
//!   CA, the tokens, the mesh file's version, the copies), which a replica started afterwards
//!   shows, and traffic flows.
//! - (a second test) replica A is cut off etcd through a relay while etcd and B go on: A fences
//!   itself, its proxies (a client-only one among them) move to B, where a CA rotation waits for
//!   them and completes unforced; no request fails; with etcd back, A serves again.
//!
//! Needs a build with the `etcd` feature (`cargo nextest run -p hopwise --features etcd --test
//! control_etcd`, which needs `protoc`) and the `etcd` binary (Debian: `apt-get install
//! etcd-server`; `scripts/test` installs both).

#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod common;

use std::collections::BTreeMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::etcd::{Etcd, store_key};
use common::{Proc, backend, free, get, run as hopwise, spawn_logged as spawn, until_all};

/// `hopwise ARGS` as the admin: the bundle in B's state directory, the admin token from A's
/// (replicas share it through etcd, so either replica's works on every replica).
fn admin(dir: &Path, args: &[&str]) -> String {
    let ca = dir.join("state-b/ca.pem");
    let token = dir.join("state-a/admin-token");
    let mut all = args.to_vec();
    all.extend(["--ca", ca.to_str().unwrap()]);
    all.extend(["--admin-token", token.to_str().unwrap()]);
    hopwise(&all)
}

fn status(server: SocketAddr, dir: &Path) -> String {
    admin(dir, &["status", "--server", &server.to_string()])
}

/// From `hopwise status` (on a shared store): each proxy's stream — open or not — and the
/// replicas where it is open.
fn streams(status: &str) -> BTreeMap<String, (bool, String)> {
    let mut out = BTreeMap::new();
    let mut in_proxies = false;
    for line in status.lines() {
        if line == "proxies" {
            in_proxies = true;
            continue;
        }
        if line == "services" {
            break;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if in_proxies && cols.len() > 3 && cols[0] != "service" {
            out.insert(cols[1].to_owned(), (cols[2] == "open", cols[3].to_owned()));
        }
    }
    out
}

/// Polls `hopwise status` on `replica` until its proxies are `expected`; after 30 s, fails
/// saying `what` did not happen.
fn until_streams(
    (replica, dir): (SocketAddr, &Path),
    expected: &BTreeMap<String, (bool, String)>,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = streams(&status(replica, dir));
    while seen != *expected {
        assert!(Instant::now() < deadline, "{what}: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
        seen = streams(&status(replica, dir));
    }
}

/// From `hopwise status`: address → (lease, healthy) of every registered copy.
fn copies(status: &str) -> BTreeMap<String, (String, bool)> {
    status
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let lease = cols.iter().position(|c| *c == "lease")?;
            Some((
                cols[0].to_owned(),
                (cols.get(lease + 1)?.to_string(), cols[1] == "healthy"),
            ))
        })
        .collect()
}

/// From `hopwise status`: the rows of the proxies' table.
fn proxy_rows(status: &str) -> Vec<&str> {
    status
        .lines()
        .skip_while(|l| *l != "proxies")
        .skip(2)
        .take_while(|l| !l.is_empty())
        .collect()
}

/// From `hopwise status`: the number after `label`.
fn number_after(status: &str, label: &str) -> u64 {
    status
        .split(label)
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The version, which on a shared store is the etcd revision the replica has seen.
fn version(status: &str) -> u64 {
    number_after(status, " · version ")
}

fn config_version(status: &str) -> u64 {
    number_after(status, "config version ")
}

struct Mesh {
    dir: PathBuf,
    etcd_url: String,
}

impl Mesh {
    fn replica(&self, name: &str, listen: SocketAddr, config: bool) -> Proc {
        let state = self.dir.join(format!("state-{name}"));
        let mut args = vec![
            "control".to_owned(),
            "--store".to_owned(),
            self.etcd_url.clone(),
            "--state".to_owned(),
            state.to_str().unwrap().to_owned(),
            "--listen".to_owned(),
            listen.to_string(),
            "--store-key".to_owned(),
            store_key(&self.dir, "store.key", 7)
                .to_str()
                .unwrap()
                .to_owned(),
        ];
        if config {
            args.push("--config".into());
            args.push(self.dir.join("mesh.yaml").to_str().unwrap().into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        spawn(&args, &self.dir.join(format!("control-{name}.log")))
    }

    /// A copy of `b` in front of `app`, on the replicas in the order given.
    fn copy_of_b(
        &self,
        servers: &[SocketAddr],
        copy: usize,
        app: SocketAddr,
    ) -> (Proc, SocketAddr) {
        let inbound = free();
        let p = spawn(
            &[
                "proxy",
                "--control",
                &control_list(servers),
                "--control-ca",
                self.dir.join("state-a/ca.pem").to_str().unwrap(),
                "--token-file",
                self.dir.join("state-a/tokens/b").to_str().unwrap(),
                "--service",
                "b",
                "--copy",
                &copy.to_string(),
                "--inbound",
                &inbound.to_string(),
                "--app",
                &app.to_string(),
                "--cache",
                self.dir.join(format!("cache-b{copy}")).to_str().unwrap(),
                "--lease-ttl",
                "3s",
            ],
            &self.dir.join(format!("proxy-b{copy}.log")),
        );
        (p, inbound)
    }

    /// a's proxy (client only: no inbound), on the replicas in the order given, with the CA and
    /// token from the state directory `state`; its outbound port to b is `port`.
    fn proxy_of_a(&self, servers: &[SocketAddr], state: &str, port: SocketAddr) -> Proc {
        let state = self.dir.join(state);
        spawn(
            &[
                "proxy",
                "--control",
                &control_list(servers),
                "--control-ca",
                state.join("ca.pem").to_str().unwrap(),
                "--token-file",
                state.join("tokens/a").to_str().unwrap(),
                "--service",
                "a",
                "--upstream",
                &format!("b={port}"),
                "--cache",
                self.dir.join("cache-a").to_str().unwrap(),
            ],
            &self.dir.join("proxy-a.log"),
        )
    }
}

fn control_list(servers: &[SocketAddr]) -> String {
    servers
        .iter()
        .map(|s| format!("https://{s}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Requests through `port`, one after another on new connections, until stopped; counts the
/// ones that did not come back 200 from a copy of b.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(port: SocketAddr) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (s, n, f) = (stop.clone(), sent.clone(), failed.clone());
        let thread = std::thread::spawn(move || {
            let mut failures = Vec::new();
            while !s.load(Ordering::Relaxed) {
                let r = get(port);
                n.fetch_add(1, Ordering::Relaxed);
                if !r.starts_with("HTTP/1.1 200") {
                    f.fetch_add(1, Ordering::Relaxed);
                    failures.push(r.lines().take(3).collect::<Vec<_>>().join(" | "));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            failures
        });
        Load {
            stop,
            sent,
            failed,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self.thread.take().unwrap().join().unwrap();
        (
            self.sent.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            failures,
        )
    }
}

/// `hopwise control rotate-ca --stage STAGE --wait 60s` through `server`; never forced.
fn rotate(dir: &Path, stage: &str, server: SocketAddr) -> String {
    let out = admin(
        dir,
        &[
            "control",
            "rotate-ca",
            "--stage",
            stage,
            "--wait",
            "60s",
            "--server",
            &server.to_string(),
        ],
    );
    assert!(!out.contains("forced"), "{out}");
    out
}

/// A whole CA rotation: `add` through one replica, `reissue` and `retire` through another (or
/// the same); a's proxy (its cache in `dir/cache-a`) holds both roots after `add`, the new one
/// alone after `retire`.
fn rotation(dir: &Path, add_at: SocketAddr, finish_at: SocketAddr) {
    let roots_at_a = |n: usize| until_roots(&dir.join("cache-a/ca.pem"), n);
    let added = rotate(dir, "add", add_at);
    assert!(added.contains("added"), "{added}");
    roots_at_a(2);
    let reissued = rotate(dir, "reissue", finish_at);
    assert!(reissued.contains("signs now"), "{reissued}");
    let retired = rotate(dir, "retire", finish_at);
    assert!(retired.contains("retired"), "{retired}");
    roots_at_a(1);
}

/// Waits (10 s at most) until a proxy wrote a trust bundle of `n` roots to `bundle`.
fn until_roots(bundle: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(bundle)
        .unwrap_or_default()
        .matches("BEGIN CERTIFICATE")
        .count()
        != n
    {
        assert!(
            Instant::now() < deadline,
            "{} never held the bundle of {n} root(s)",
            bundle.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP relay to etcd that the test can cut (listener and open connections closed), to take
/// one replica off etcd while etcd and the other replicas go on.
struct Relay {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    conns: Arc<std::sync::Mutex<Vec<TcpStream>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn start(addr: SocketAddr, to: SocketAddr) -> Relay {
        let listener = TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stop, open) = (cut.clone(), conns.clone());
        let thread = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let client = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    Err(e) => panic!("the relay to etcd failed: {e}"),
                };
                client.set_nonblocking(false).unwrap();
                let Ok(upstream) = TcpStream::connect(to) else {
                    continue;
                };
                let mut open = open.lock().unwrap();
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), upstream.try_clone().unwrap()),
                    (upstream.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut into);
                        let _ = into.shutdown(Shutdown::Both);
                    });
                }
                open.extend([client, upstream]);
            }
            // The listener closes here: new connections are refused.
        });
        Relay {
            addr,
            cut,
            conns,
            thread: Some(thread),
        }
    }

    /// Closes the listener and every connection through it.
    fn cut(&mut self) {
        self.cut.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Replica A reaches etcd through a relay that is then cut, while etcd and replica B go on: A
/// fences itself (ends its proxies' streams, refuses their calls), so its proxies — copies of b
/// and a's client-only proxy, which never renews a lease — move to B, where they count again:
/// under load, no request fails, B's status shows them connected via B alone, and a whole CA
/// rotation through B waits for them and completes without `--force`. With the relay back, A
/// serves again: a copy that knows only A registers through it and receives traffic.
#[test]
fn a_replica_cut_off_etcd_fences_itself_and_its_proxies_move() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(
        dir.join("mesh.yaml"),
        "mesh: { name: fence, trust_domain: fence.local }
services:
  a:
    calls:
      b: { timeout: 2s, retries: { count: 2, on: [connect-failure, refused-stream, reset-before-request] } }
  b: {}
",
    )
    .unwrap();
    let etcd = Etcd::new(dir);
    let mut relay = Relay::start(free(), etcd.client);
    let via_relay = Mesh {
        dir: dir.to_owned(),
        etcd_url: format!("etcd://{}/hopwise-test", relay.addr),
    };
    let direct = Mesh {
        dir: dir.to_owned(),
        etcd_url: etcd.url(),
    };
    let (a_addr, b_addr) = (free(), free());
    let replica_a = via_relay.replica("a", a_addr, true);
    let _replica_b = direct.replica("b", b_addr, false);

    // Every proxy on A first: two copies of b, and a's proxy (no inbound: client only).
    let (_b0, _) = direct.copy_of_b(&[a_addr, b_addr], 0, backend("zero"));
    let (_b1, _) = direct.copy_of_b(&[a_addr, b_addr], 1, backend("one"));
    let port = free();
    let _a = direct.proxy_of_a(&[a_addr, b_addr], "state-a", port);
    assert!(
        until_all(port, &["zero", "one"], Duration::from_secs(30)),
        "a never reached both copies of b"
    );
    let proxies = ["a-0", "b-0", "b-1"];
    let all_via = |replica: SocketAddr| -> BTreeMap<String, (bool, String)> {
        proxies
            .iter()
            .map(|p| ((*p).to_owned(), (true, replica.to_string())))
            .collect()
    };
    until_streams(
        (b_addr, dir),
        &all_via(a_addr),
        "B does not list every proxy as connected via A",
    );

    // Cut A off etcd; etcd and B go on.
    let load = Load::start(port);
    std::thread::sleep(Duration::from_millis(500));
    let cut = Instant::now();
    relay.cut();
    until_streams(
        (b_addr, dir),
        &all_via(b_addr),
        "A's proxies never showed in B's status as connected via B alone",
    );
    println!(
        "every proxy of A connected via B alone {:?} after A was cut off etcd",
        cut.elapsed()
    );
    let log_a = std::fs::read_to_string(dir.join("control-a.log")).unwrap();
    assert!(
        log_a.contains("fenced: this replica lost the shared store (etcd)"),
        "{log_a}"
    );

    // A rotation through B waits for the proxies that came from A, and completes unforced.
    rotation(dir, b_addr, b_addr);
    let (sent, failed, failures) = load.stop();
    println!(
        "load across A's fencing and a CA rotation through B: {sent} requests, {failed} failed"
    );
    assert_eq!(failed, 0, "requests failed: {failures:?}");
    let status_b = status(b_addr, dir);
    let rows = proxy_rows(&status_b);
    assert_eq!(rows.len(), 3, "{status_b}");
    assert!(rows.iter().all(|r| r.contains("CA gen. 2")), "{status_b}");

    // etcd reachable again: A takes a new lease and serves; a copy that knows only A gets in.
    let _relay = Relay::start(relay.addr, etcd.client);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(dir.join("control-a.log"))
        .unwrap()
        .contains("no longer fenced")
    {
        assert!(
            Instant::now() < deadline,
            "A never served again once it reached etcd"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_b2, _) = direct.copy_of_b(&[a_addr], 2, backend("two"));
    assert!(
        until_all(port, &["two"], Duration::from_secs(30)),
        "a copy that knows only A never received traffic once A reached etcd again"
    );
    drop(replica_a);
}

#[test]
fn replicas_share_etcd_survive_a_dead_replica_and_an_etcd_restart() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mesh_v1 = "mesh: { name: e2e, trust_domain: e2e.local }
services:
  a:
    calls:
      b: { timeout: 2s, retries: { count: 2, on: [connect-failure, refused-stream, reset-before-request] } }
  b: {}
";
    std::fs::write(dir.join("mesh.yaml"), mesh_v1).unwrap();
    let mut etcd = Etcd::new(dir);
    let mesh = Mesh {
        dir: dir.to_owned(),
        etcd_url: etcd.url(),
    };
    let (a_addr, b_addr) = (free(), free());
    // A initialises the empty prefix; B joins with what A stored (no --config).
    let mut replica_a = mesh.replica("a", a_addr, true);
    let _replica_b = mesh.replica("b", b_addr, false);
    let ca_pem = std::fs::read_to_string(dir.join("state-a/ca.pem")).unwrap();
    let tokens = files(&dir.join("state-a/tokens"));
    assert_eq!(
        std::fs::read_to_string(dir.join("state-b/admin-token")).unwrap(),
        std::fs::read_to_string(dir.join("state-a/admin-token")).unwrap(),
        "one admin token for every replica"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("state-b/ca.pem")).unwrap(),
        ca_pem,
        "both replicas trust the same CA"
    );
    assert_eq!(files(&dir.join("state-b/tokens")), tokens);

    // (a) b's copies talk to A first; a's proxy to B first.
    let (app0, app1) = (backend("zero"), backend("one"));
    let (_b0, _) = mesh.copy_of_b(&[a_addr, b_addr], 0, app0);
    let (_b1, _) = mesh.copy_of_b(&[a_addr, b_addr], 1, app1);
    let port = free();
    let _a = mesh.proxy_of_a(&[b_addr, a_addr], "state-b", port);
    assert!(
        until_all(port, &["zero", "one"], Duration::from_secs(30)),
        "a (on replica B) never reached both copies registered through replica A"
    );
    // Every replica lists every proxy, with where it is connected: b's on A, a's on B.
    let (via_a, via_b) = ((true, a_addr.to_string()), (true, b_addr.to_string()));
    let expected = BTreeMap::from([
        ("a-0".to_owned(), via_b.clone()),
        ("b-0".to_owned(), via_a.clone()),
        ("b-1".to_owned(), via_a.clone()),
    ]);
    for replica in [a_addr, b_addr] {
        let what = format!("replica {replica} does not list every proxy where it is connected");
        until_streams((replica, dir), &expected, &what);
    }
    let leases_before = copies(&status(b_addr, dir));
    assert_eq!(leases_before.len(), 2, "{leases_before:?}");

    // A whole CA rotation through A, under load, never forced: A waits for the word of a's
    // proxy, which only B hears. `add` reaches a's proxy (on B): it writes both roots.
    // (Whether a stage waits for a proxy of the other replica is asserted by the plane's unit
    // tests; here a proxy that were not waited for would fail handshakes, i.e. requests.)
    let load = Load::start(port);
    let revision_before = version(&status(a_addr, dir));
    let rotation = |add_at: SocketAddr, finish_at: SocketAddr| rotation(dir, add_at, finish_at);
    rotation(a_addr, a_addr);
    // Every write to etcd is a revision: the three stages, and the replicas' records of their
    // proxies (each proxy acknowledges a snapshot per stage, and once more with its new
    // certificate), coalesced.
    std::thread::sleep(Duration::from_millis(500));
    let revisions = version(&status(a_addr, dir)) - revision_before;
    println!("etcd writes across the rotation (3 stages, 3 proxies, 2 replicas): {revisions}");
    // Another rotation, begun through A and finished through B, which only followed the
    // `add`: B waits for b's proxies, which only A hears.
    rotation(a_addr, b_addr);
    let (sent, failed, failures) = load.stop();
    println!("load across two CA rotations: {sent} requests, {failed} failed");
    assert_eq!(
        failed, 0,
        "requests failed during the rotation: {failures:?}"
    );
    // Every proxy's certificate is from the new root, as B knows through A and itself.
    let status_b = status(b_addr, dir);
    let rows = proxy_rows(&status_b);
    assert_eq!(rows.len(), 3, "{status_b}");
    assert!(rows.iter().all(|r| r.contains("CA gen. 3")), "{status_b}");
    assert!(!status_b.contains("CA rotation in progress"), "{status_b}");
    let ca_pem = std::fs::read_to_string(dir.join("state-b/ca.pem")).unwrap();
    assert_eq!(ca_pem.matches("BEGIN CERTIFICATE").count(), 1, "{ca_pem}");
    assert_eq!(
        std::fs::read_to_string(dir.join("cache-a/ca.pem")).unwrap(),
        ca_pem,
        "a's proxy (on B) trusts the new root alone"
    );

    // A change through B reaches A: a new service, so a new token, written by A's watch.
    let mesh_v2 = format!("{mesh_v1}  c: {{}}\n");
    std::fs::write(dir.join("mesh-v2.yaml"), &mesh_v2).unwrap();
    let applied = admin(
        dir,
        &[
            "control",
            "apply",
            dir.join("mesh-v2.yaml").to_str().unwrap(),
            "--server",
            &b_addr.to_string(),
        ],
    );
    assert!(applied.contains("config version 2"), "{applied}");
    assert!(dir.join("state-b/tokens/c").is_file(), "{applied}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(dir.join("state-a/tokens/c").is_file() && config_version(&status(a_addr, dir)) == 2) {
        assert!(
            Instant::now() < deadline,
            "replica A never took in the mesh file applied through B"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // (b) Steady load; SIGKILL replica A.
    let load = Load::start(port);
    std::thread::sleep(Duration::from_millis(500));
    let killed = Instant::now();
    replica_a.kill();
    // On B: b's proxies connected to B too (A's records of them stay until its etcd lease
    // expires), then to B alone.
    let b = b_addr.to_string();
    let on_b_too = |s: &(bool, String)| s.0 && s.1.split(',').any(|r| r == b);
    let failover = loop {
        let on_b = streams(&status(b_addr, dir));
        if ["b-0", "b-1"]
            .iter()
            .all(|p| on_b.get(*p).is_some_and(on_b_too))
        {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "b's proxies never moved to replica B: {on_b:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("failover: both proxies of b subscribed to replica B {failover:?} after the SIGKILL");
    let expected_on_b = BTreeMap::from([
        ("a-0".to_owned(), via_b.clone()),
        ("b-0".to_owned(), via_b.clone()),
        ("b-1".to_owned(), via_b.clone()),
    ]);
    until_streams(
        (b_addr, dir),
        &expected_on_b,
        "the dead replica's records of its proxies never left B's status",
    );
    println!(
        "the dead replica's records left B's status {:?} after the SIGKILL (its lease: 5 s)",
        killed.elapsed()
    );
    // Longer than the leases' TTL (3 s): they are renewed through B.
    std::thread::sleep(Duration::from_secs(5));
    let leases_after = copies(&status(b_addr, dir));
    assert_eq!(
        leases_after, leases_before,
        "the copies kept their leases (granted through A, renewed through B)"
    );
    // A copy started now (A is first in its list, and dead) registers through B.
    let app2 = backend("two");
    let (_b2, _) = mesh.copy_of_b(&[a_addr, b_addr], 2, app2);
    assert!(
        until_all(port, &["two"], Duration::from_secs(30)),
        "a copy started after the failover never received traffic"
    );
    let (sent, failed, failures) = load.stop();
    println!("load across the failover: {sent} requests, {failed} failed");
    assert_eq!(
        failed, 0,
        "requests failed while replica A died: {failures:?}"
    );

    // (c) etcd dies (SIGKILL) and starts again on its data directory.
    let leases_before = copies(&status(b_addr, dir));
    let load = Load::start(port);
    etcd.kill();
    let down = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    etcd.start();
    println!(
        "etcd was down for {:?} (until healthy again)",
        down.elapsed()
    );
    // A replica started now knows only what etcd kept.
    let c_addr = free();
    let _replica_c = mesh.replica("c", c_addr, false);
    assert_eq!(
        std::fs::read_to_string(dir.join("state-c/ca.pem")).unwrap(),
        ca_pem,
        "the same root after etcd's restart"
    );
    let mut tokens_v2 = tokens.clone();
    tokens_v2.insert(
        "c".into(),
        std::fs::read_to_string(dir.join("state-b/tokens/c")).unwrap(),
    );
    assert_eq!(files(&dir.join("state-c/tokens")), tokens_v2);
    let status_c = status(c_addr, dir);
    assert_eq!(config_version(&status_c), 2, "{status_c}");
    assert!(!status_c.contains("CA rotation in progress"), "{status_c}");
    // Every copy is registered and healthy again (kept by etcd, or registered anew).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status_c = status(c_addr, dir);
        let c = copies(&status_c);
        if c.len() == 3 && c.values().all(|(_, healthy)| *healthy) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the copies did not come back after etcd's restart:\n{status_c}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        until_all(port, &["zero", "one", "two"], Duration::from_secs(30)),
        "traffic does not reach every copy after etcd's restart"
    );
    // C, which no proxy talks to, lists them all, connected to B.
    let mut expected_on_c = expected_on_b.clone();
    expected_on_c.insert("b-2".to_owned(), via_b.clone());
    until_streams(
        (c_addr, dir),
        &expected_on_c,
        "replica C does not list every proxy as connected to B",
    );
    let leases_after = copies(&status(c_addr, dir));
    let kept = leases_after
        .iter()
        .filter(|(addr, (lease, _))| leases_before.get(*addr).is_some_and(|(l, _)| l == lease))
        .count();
    println!(
        "after etcd's restart: {kept} of 3 copies kept their lease, the others registered anew"
    );
    let (sent, failed, _) = load.stop();
    println!("load across etcd's restart: {sent} requests, {failed} failed");
}
