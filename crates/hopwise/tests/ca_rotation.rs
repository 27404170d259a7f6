//! CA rotation rehearsed on a running mesh of real processes: `hopwise control` and
//! `hopwise proxy --control` copies of a and b, with traffic flowing through a → b the whole
//! time while `hopwise control rotate-ca` runs `add`, `reissue` and `retire`. After each stage a
//! new copy of b joins, so a handshakes under that stage's trust bundle and certificates. No
//! request may fail, no handshake may fail, and at the end every proxy presents a certificate
//! from the new root only: read from their cache directories with x509-parser, and seen in a
//! handshake from a client that trusts the new root alone (one that trusts the old root alone
//! is refused).
//!
//! The control plane's own port follows: its certificate is re-signed at `reissue`, every proxy
//! keeps (or regains) its control connection through the three stages and acknowledges a mesh
//! file applied after `retire`, only the new root's clients reach the control port then, and a
//! proxy restarted after `retire` with the OLD bundle as `--control-ca` connects again (it trusts
//! the bundle its last snapshot left in its cache).

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Proc, backend, free, get, spawn_logged as spawn};
use hopwise_proxy::tls::{CertFiles, CertStore};

const MESH: &str = "mesh: { name: rot, trust_domain: rot.local }
services:
  a: { calls: { b: { timeout: 2s } } }
  b: {}
";
const OLD_ROOT: &str = "hopwise CA (rot)";
const NEW_ROOT: &str = "hopwise CA (rot) #2";
/// Long enough never to fire on a slow machine; the point is that it happens at all.
const DEADLINE: Duration = Duration::from_secs(60);

/// A copy of b: its proxy (inbound, admin, cache) in front of an app answering `name`.
struct CopyOfB {
    _proc: Proc,
    name: &'static str,
    inbound: SocketAddr,
    admin: SocketAddr,
    cache: PathBuf,
}

/// `control_ca`: the bundle given as `--control-ca`.
fn copy_of_b(
    dir: &Path,
    (server, control_ca): (SocketAddr, &Path),
    copy: usize,
    name: &'static str,
) -> CopyOfB {
    let (inbound, admin) = (free(), free());
    let cache = dir.join(format!("cache-b{copy}"));
    let proc = spawn(
        &[
            "proxy",
            "--control",
            &format!("https://{server}"),
            "--control-ca",
            control_ca.to_str().unwrap(),
            "--token-file",
            dir.join("state/tokens/b").to_str().unwrap(),
            "--service",
            "b",
            "--copy",
            &copy.to_string(),
            "--inbound",
            &inbound.to_string(),
            "--app",
            &backend(name).to_string(),
            "--admin",
            &admin.to_string(),
            "--cache",
            cache.to_str().unwrap(),
            "--lease-ttl",
            "2s",
        ],
        &dir.join(format!("b{copy}.log")),
    );
    CopyOfB {
        _proc: proc,
        name,
        inbound,
        admin,
        cache,
    }
}

/// Requests sent through a → b without a pause, from a few threads, while the test runs.
struct Traffic {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<BTreeMap<String, usize>>>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Traffic {
    fn start(port: SocketAddr, threads: usize) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(BTreeMap::new()));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..threads)
            .map(|_| {
                let (stop, answers, failures) = (stop.clone(), answers.clone(), failures.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let r = get(port);
                        let ok = r.starts_with("HTTP/1.1 200");
                        let body = r.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
                        if ok && !body.is_empty() {
                            *answers.lock().unwrap().entry(body).or_default() += 1;
                        } else {
                            failures.lock().unwrap().push(r);
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        Traffic {
            stop,
            answers,
            failures,
            threads,
        }
    }

    fn answered(&self, name: &str) -> usize {
        self.answers.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    /// Waits until the copy answering `name` has answered a request.
    fn until_answered_by(&self, name: &str) {
        let t = Instant::now();
        while self.answered(name) == 0 {
            assert!(
                t.elapsed() < DEADLINE,
                "copy `{name}` never got traffic (so far {:?}; {} request(s) failed)",
                self.answers.lock().unwrap(),
                self.failures.lock().unwrap().len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(self) -> (BTreeMap<String, usize>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let answers = self.answers.lock().unwrap().clone();
        let failures = self.failures.lock().unwrap().clone();
        (answers, failures)
    }
}

/// `hopwise control rotate-ca --stage STAGE`, waiting while it is not safe yet.
fn rotate((server, dir): (SocketAddr, &Path), stage: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args([
            "control",
            "rotate-ca",
            "--server",
            &server.to_string(),
            "--state",
            dir.to_str().unwrap(),
            "--stage",
            stage,
            "--wait",
            "60s",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rotate-ca --stage {stage}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn metric(admin: SocketAddr, prefix: &str, label: &str) -> u64 {
    let mut s = TcpStream::connect(admin).unwrap();
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nhost: {admin}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The DER of every certificate in a PEM text.
fn ders(pem: &str) -> Vec<Vec<u8>> {
    let mut rest = pem.as_bytes();
    let mut out = Vec::new();
    while let Ok((next, block)) = x509_parser::pem::parse_x509_pem(rest) {
        out.push(block.contents);
        rest = next;
    }
    out
}

fn common_name(name: &x509_parser::x509::X509Name<'_>) -> String {
    name.iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or("?")
        .to_owned()
}

/// The subject common name of each certificate in a PEM file.
fn subjects(path: &Path) -> Vec<String> {
    ders(&std::fs::read_to_string(path).unwrap())
        .iter()
        .map(|der| {
            common_name(
                x509_parser::parse_x509_certificate(der)
                    .unwrap()
                    .1
                    .subject(),
            )
        })
        .collect()
}

/// Checks that the leaf certificate in `cert` names the new root as its issuer and carries
/// its signature.
fn assert_from_new_root(cert: &Path, new_root_der: &[u8]) {
    let (_, root) = x509_parser::parse_x509_certificate(new_root_der).unwrap();
    let leaf_der = ders(&std::fs::read_to_string(cert).unwrap()).remove(0);
    let (_, leaf) = x509_parser::parse_x509_certificate(&leaf_der).unwrap();
    assert_eq!(
        common_name(leaf.issuer()),
        NEW_ROOT,
        "{} is not from the new root",
        cert.display()
    );
    assert_eq!(leaf.issuer().as_raw(), root.subject().as_raw());
    leaf.verify_signature(Some(root.public_key()))
        .unwrap_or_else(|e| panic!("{}: not signed by the new root: {e}", cert.display()));
}

/// A TLS handshake with a proxy's inbound port, as a client presenting `cert`/`key` and
/// trusting only the roots in `bundle`. Returns the issuer of the certificate the proxy
/// presented.
fn handshake(
    dir: &Path,
    cert: &Path,
    key: &Path,
    bundle: &str,
    addr: SocketAddr,
) -> Result<String, String> {
    let files = CertFiles {
        cert: dir.join("client.pem"),
        key: dir.join("client-key.pem"),
        ca: dir.join("trust.pem"),
    };
    std::fs::copy(cert, &files.cert).unwrap();
    std::fs::copy(key, &files.key).unwrap();
    std::fs::write(&files.ca, bundle).unwrap();
    let store = CertStore::open(files).unwrap();
    let config = store
        .client_config("spiffe://rot.local/service/b", b"http/1.1")
        .unwrap();
    let name = rustls_pki_types::ServerName::try_from("b").unwrap();
    let mut conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    let presented = conn.peer_certificates().unwrap()[0].to_vec();
    let (_, leaf) = x509_parser::parse_x509_certificate(&presented).unwrap();
    Ok(common_name(leaf.issuer()))
}

#[test]
fn the_ca_is_rotated_under_traffic_without_a_failed_request() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("mesh.yaml"), MESH).unwrap();
    let server = free();
    let _cp = spawn(
        &[
            "control",
            "--config",
            dir.join("mesh.yaml").to_str().unwrap(),
            "--state",
            dir.join("state").to_str().unwrap(),
            "--listen",
            &server.to_string(),
        ],
        &dir.join("control.log"),
    );
    let old_root = std::fs::read_to_string(dir.join("state/ca.pem")).unwrap();
    // The bundle as it was at the start, as an operator might have copied it elsewhere.
    let old_bundle = dir.join("old-ca.pem");
    std::fs::write(&old_bundle, &old_root).unwrap();
    let state = dir.join("state");
    let ca = state.join("ca.pem");
    let mut copies = vec![copy_of_b(dir, (server, &ca), 0, "zero")];
    let (port, a_admin) = (free(), free());
    let _a = spawn(
        &[
            "proxy",
            "--control",
            &format!("https://{server}"),
            "--control-ca",
            ca.to_str().unwrap(),
            "--token-file",
            dir.join("state/tokens/a").to_str().unwrap(),
            "--service",
            "a",
            "--upstream",
            &format!("b={port}"),
            "--admin",
            &a_admin.to_string(),
            "--cache",
            dir.join("cache-a").to_str().unwrap(),
        ],
        &dir.join("a.log"),
    );
    // Count from the first answer: until copy zero is healthy and in a's snapshot (slower on a
    // busy machine), a answers no-endpoint, which says nothing about the rotation.
    let t = Instant::now();
    while !get(port).starts_with("HTTP/1.1 200") {
        assert!(t.elapsed() < DEADLINE, "a never reached copy zero");
        std::thread::sleep(Duration::from_millis(50));
    }
    let traffic = Traffic::start(port, 3);
    traffic.until_answered_by("zero");

    // Out of order: refused, exit 1, nothing changes.
    let refused = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["control", "rotate-ca", "--server", &server.to_string()])
        .args(["--state", state.to_str().unwrap(), "--stage", "retire"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(text.contains("refused: no rotation in progress"), "{text}");

    // add: the bundle is [old, new]; the old root still signs. A new copy joins under it.
    let out = rotate((server, &state), "add");
    println!("rotate-ca --stage add:\n{out}");
    assert!(out.contains(&format!("{OLD_ROOT}, {NEW_ROOT}")), "{out}");
    copies.push(copy_of_b(dir, (server, &ca), 1, "one"));
    traffic.until_answered_by("one");

    // reissue: once every proxy trusts the new root, it signs and every proxy renews.
    let out = rotate((server, &state), "reissue");
    println!("rotate-ca --stage reissue:\n{out}");
    assert!(out.contains("CA generation 2"), "{out}");
    copies.push(copy_of_b(dir, (server, &ca), 2, "two"));
    traffic.until_answered_by("two");

    // retire: once every proxy presents a certificate from the new root, the old one leaves.
    let out = rotate((server, &state), "retire");
    println!("rotate-ca --stage retire:\n{out}");
    assert!(
        out.contains(&format!("trust bundle: {NEW_ROOT} ·")),
        "{out}"
    );
    copies.push(copy_of_b(dir, (server, &ca), 3, "three"));
    traffic.until_answered_by("three");
    std::thread::sleep(Duration::from_millis(500));
    let (answers, failures) = traffic.stop();

    // --- not one request failed, not one handshake failed ---------------------------------------
    let total: usize = answers.values().sum();
    println!("answers during the rotation: {answers:?} ({total} requests)");
    assert!(
        failures.is_empty(),
        "{} of {} requests failed, the first: {:?}",
        failures.len(),
        total + failures.len(),
        failures.first()
    );
    let handshakes = "hopwise_tls_handshakes_total";
    let failed = "result=\"failed\"";
    assert_eq!(
        metric(a_admin, handshakes, failed),
        0,
        "a: a handshake failed"
    );
    assert!(
        metric(a_admin, handshakes, "result=\"ok\"") >= 4,
        "a met every copy"
    );
    for c in &copies {
        assert_eq!(
            metric(c.admin, handshakes, failed),
            0,
            "copy `{}`: a handshake failed",
            c.name
        );
    }

    // --- the new root alone, everywhere ------------------------------------------------------
    let new_bundle = std::fs::read_to_string(dir.join("state/ca.pem")).unwrap();
    assert_eq!(subjects(&dir.join("state/ca.pem")), [NEW_ROOT]);
    let new_root_der = ders(&new_bundle).remove(0);
    let mut caches: Vec<(PathBuf, &str)> = vec![(dir.join("cache-a"), "a")];
    caches.extend(copies.iter().map(|c| (c.cache.clone(), "b")));
    for (cache, service) in &caches {
        // The retire snapshot reached every proxy before the last copy got traffic; this only
        // waits out the slowest file write.
        let t = Instant::now();
        while std::fs::read_to_string(cache.join("ca.pem")).unwrap() != new_bundle {
            assert!(t.elapsed() < DEADLINE, "{}: old bundle", cache.display());
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_from_new_root(&cache.join(format!("{service}.pem")), &new_root_der);
    }
    // What the copies present: a client trusting only the new root completes the handshake
    // with each and sees a certificate the new root issued; one trusting only the old root is
    // refused. The client certificate is a's own.
    let (a_cert, a_key) = (dir.join("cache-a/a.pem"), dir.join("cache-a/a-key.pem"));
    for c in &copies {
        let issuer = handshake(dir, &a_cert, &a_key, &new_bundle, c.inbound)
            .unwrap_or_else(|e| panic!("copy `{}` refused a client of the new root: {e}", c.name));
        assert_eq!(issuer, NEW_ROOT, "copy `{}`", c.name);
        let old = handshake(dir, &a_cert, &a_key, &old_root, c.inbound);
        assert!(
            old.is_err(),
            "copy `{}` still presents a certificate the old root accepts: {old:?}",
            c.name
        );
    }

    // --- the control port: the new root's, and every proxy still connected ----------------------
    let admin = std::fs::read_to_string(state.join("admin-token")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = |bundle: &str| {
        hopwise_control::client::Server::new(
            &server.to_string(),
            bundle.to_owned(),
            Some(admin.trim().to_owned()),
        )
    };
    let reach = |bundle: &str| rt.block_on(hopwise_control::client::status(&client(bundle)));
    let e = reach(&old_root).unwrap_err().to_string();
    assert!(
        e.contains("certificate"),
        "a client of the old root only: {e}"
    );
    // A mesh file applied after retire reaches every proxy, through its control connection.
    let after = MESH.replace("timeout: 2s", "timeout: 1500ms");
    let applied = rt
        .block_on(hopwise_control::client::apply(
            &client(&new_bundle),
            &after,
            "after.yaml",
        ))
        .unwrap();
    assert!(applied.applied && !applied.unchanged, "{applied:?}");
    let every_proxy_acked = |names: &[&str]| {
        let t = Instant::now();
        loop {
            let s = reach(&new_bundle).unwrap();
            let acked = |n: &str| {
                s.proxies.iter().any(|p| {
                    p.proxy == n
                        && p.connected
                        && p.last_ack_accepted
                        && p.last_acked_version >= applied.version
                })
            };
            if names.iter().all(|n| acked(n)) {
                return;
            }
            assert!(
                t.elapsed() < DEADLINE,
                "not every proxy of {names:?} acknowledged version {}: {:?}",
                applied.version,
                s.proxies
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    every_proxy_acked(&["a-0", "b-0", "b-1", "b-2", "b-3"]);

    // A proxy restarted after retire, given the OLD bundle: the one its cache kept lets it in.
    let zero_cache = copies[0].cache.clone();
    copies.remove(0);
    let restarted = copy_of_b(dir, (server, &old_bundle), 0, "zero");
    assert_eq!(restarted.cache, zero_cache);
    every_proxy_acked(&["b-0"]);
    let status = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["status", "--server", &server.to_string()])
        .args(["--state", state.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    println!("{}", String::from_utf8_lossy(&status.stdout));
}
