//! `hopwise tap` against real `hopwise proxy` processes (mutual TLS between them): a tap of the
//! callee's two copies and one of the caller's proxy, requests sent, each line checked field
//! by field (method, path, status, tries, latency, the caller's identity), `--route` keeping
//! one route's requests, `--max N` ending the tap after N; a misspelt route refused by name;
//! and a tapper that never reads: requests keep being answered, and the lines it could not
//! take are dropped and counted.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Proc, free, http_get, run_status, spawn};

/// An HTTP/1.1 keep-alive app: `/quote/retry` fails (503) the first time any app sharing
/// `retried` sees it, anything else 200.
fn app(name: &'static str, retried: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let retried = retried.clone();
            std::thread::spawn(move || serve(conn, name, &retried));
        }
    });
    addr
}

fn serve(conn: TcpStream, name: &str, retried: &AtomicUsize) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut first = String::new();
        if r.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
        }
        let fail = first.contains(" /quote/retry") && retried.fetch_add(1, Ordering::SeqCst) == 0;
        let status = if fail {
            "503 Service Unavailable"
        } else {
            "200 OK"
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{name}",
            name.len()
        );
        if w.write_all(head.as_bytes()).is_err() {
            return;
        }
    }
}

struct Mesh {
    dir: tempfile::TempDir,
    _procs: Vec<Proc>,
    /// a's local port for b.
    local: SocketAddr,
    a_admin: SocketAddr,
    b_admins: [SocketAddr; 2],
}

/// `a`'s proxy → (mTLS) → either of `b`'s two copies' proxies → their apps.
fn mesh() -> Mesh {
    let dir = tempfile::tempdir().unwrap();
    let (local, a_admin, b_admins) = (free(), free(), [free(), free()]);
    let retried = Arc::new(AtomicUsize::new(0));
    let copy = |i: usize| {
        format!(
            "{{ app: {}, inbound: {}, admin: {} }}",
            app(["b0", "b1"][i], retried.clone()),
            free(),
            b_admins[i]
        )
    };
    let yaml = format!(
        "mesh: {{ name: t, trust_domain: t.local, certs: certs }}
services:
  a:
    copies: [{{ admin: {a_admin}, upstreams: {{ b: {local} }} }}]
    calls:
      b:
        timeout: 5s
        retries: {{ count: 2, on: [5xx], backoff: {{ base: 1ms, max: 2ms }} }}
        routes:
          quote: {{ path: /quote }}
  b:
    copies: [{}, {}]
",
        copy(0),
        copy(1)
    );
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, yaml).unwrap();
    let file = file.to_str().unwrap();
    let (status, out) = run_status(&["certs", "--config", file]);
    assert_eq!(status, Some(0), "{out}");
    let mut procs = Vec::new();
    for copy in ["0", "1"] {
        procs.push(spawn(&[
            "proxy",
            "--config",
            file,
            "--service",
            "b",
            "--copy",
            copy,
        ]));
    }
    procs.push(spawn(&["proxy", "--config", file, "--service", "a"]));
    let m = Mesh {
        dir,
        _procs: procs,
        local,
        a_admin,
        b_admins,
    };
    // Both of b's copies answer through a before anything is tapped.
    assert!(common::until_all(
        local,
        &["b0", "b1"],
        Duration::from_secs(20)
    ));
    m
}

/// A running `hopwise tap`, its stdout lines collected.
struct Tap {
    child: Child,
    /// Its stdout's lines, once it has closed.
    lines: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Tap {
    /// Starts `hopwise tap ARGS --json` and waits until it says it is tapping.
    fn start(args: &[&str]) -> Tap {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
            .arg("tap")
            .args(args)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        err.read_line(&mut first).unwrap();
        assert!(first.starts_with("tapping "), "hopwise tap said: {first}");
        let out = child.stdout.take().unwrap();
        let lines =
            std::thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).collect());
        Tap {
            child,
            lines: Some(lines),
        }
    }

    /// Every line until the tap exits by itself (it must, within 20 s), and its status.
    fn finish(mut self) -> (Vec<serde_json::Value>, std::process::ExitStatus) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "the tap did not end by itself");
            std::thread::sleep(Duration::from_millis(20));
        };
        let lines = self.lines.take().unwrap().join().unwrap();
        let lines = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (lines, status)
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn admins(a: &[SocketAddr]) -> String {
    a.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn a_tap_shows_each_request_field_by_field_and_max_ends_it() {
    let m = mesh();
    let b = admins(&m.b_admins);
    let b_tap = Tap::start(&["b", "--admin", &b, "--route", "quote", "--max", "4"]);
    let a_tap = Tap::start(&["a", "--admin", &m.a_admin.to_string(), "--max", "3"]);

    // Not quote's: b's tap of `quote` must not show it.
    assert!(http_get(m.local, "/other", "b").starts_with("HTTP/1.1 200"));
    assert!(http_get(m.local, "/quote/retry?token=secret", "b").starts_with("HTTP/1.1 200"));
    for _ in 0..4 {
        assert!(http_get(m.local, "/quote/7", "b").starts_with("HTTP/1.1 200"));
    }

    let (a_lines, status) = a_tap.finish();
    assert!(status.success(), "{status:?}");
    assert_eq!(a_lines.len(), 3, "--max 3: {a_lines:#?}");
    let (other, retried) = (&a_lines[0], &a_lines[1]);
    assert_eq!(other["path"], "/other");
    assert_eq!(
        other["route"], "quote",
        "a's first route takes what no prefix matches"
    );
    assert_eq!(retried["direction"], "outbound");
    assert_eq!(retried["service"], "a");
    assert_eq!(retried["upstream"], "b");
    assert_eq!(retried["route"], "quote");
    assert_eq!(retried["method"], "GET");
    assert_eq!(retried["path"], "/quote/retry?…", "the query is redacted");
    assert_eq!(retried["status"], 200);
    assert_eq!(retried["tries"], 2);
    assert_eq!(retried["retries"], serde_json::json!(["5xx"]));
    assert!(retried["duration_us"].as_u64().unwrap() > 0);
    assert!(
        retried["caller"].is_null(),
        "outbound: the app, no identity"
    );
    assert!(retried["copy"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert_eq!(retried["tapped_copy"], 0);

    let (b_lines, status) = b_tap.finish();
    assert!(status.success(), "{status:?}");
    assert_eq!(b_lines.len(), 4, "--max 4: {b_lines:#?}");
    // The 503 and the retry that followed it, then the first two of the four.
    assert_eq!(b_lines[0]["status"], 503);
    assert_eq!(b_lines[1]["status"], 200);
    for l in &b_lines {
        assert_eq!(l["direction"], "inbound");
        assert_eq!(l["service"], "b");
        assert_eq!(l["route"], "quote", "only quote's requests: {l}");
        assert_eq!(l["method"], "GET");
        assert_eq!(l["caller"], "spiffe://t.local/service/a");
        assert!(l["duration_us"].as_u64().is_some(), "{l}");
        assert!([0, 1].contains(&l["tapped_copy"].as_u64().unwrap()), "{l}");
    }
    assert_eq!(b_lines[2]["path"], "/quote/7");
    let _ = &m.dir;
}

#[test]
fn a_route_the_service_does_not_have_is_refused_by_name() {
    let m = mesh();
    let (status, out) = run_status(&[
        "tap",
        "b",
        "--admin",
        &admins(&m.b_admins),
        "--route",
        "qoute",
    ]);
    assert_ne!(status, Some(0), "{out}");
    assert!(
        out.contains("route `qoute` is not a route of `b`; its routes: inbound, quote"),
        "{out}"
    );
}

/// The sum of the series of `name` on an admin endpoint's `/metrics`.
fn metric(admin: SocketAddr, name: &str) -> u64 {
    http_get(admin, "/metrics", &admin.to_string())
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[test]
fn a_tapper_that_never_reads_loses_lines_and_holds_no_request() {
    let m = mesh();
    // A tap of a's proxy whose reader never reads: its socket buffers fill, then its queue.
    let mut stalled = TcpStream::connect(m.a_admin).unwrap();
    stalled
        .write_all(format!("GET /tap HTTP/1.1\r\nhost: {}\r\n\r\n", m.a_admin).as_bytes())
        .unwrap();
    // Long paths make long lines: the buffers fill sooner.
    let path = format!("/quote/{}", "x".repeat(3000));
    let sent = Arc::new(AtomicUsize::new(0));
    let dropped = loop {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (path, sent, local) = (path.clone(), sent.clone(), m.local);
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        let r = http_get(local, &path, "b");
                        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
                        sent.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let dropped = metric(m.a_admin, "hopwise_tap_dropped_total");
        if dropped > 0 || sent.load(Ordering::SeqCst) >= 20_000 {
            break dropped;
        }
    };
    assert!(
        dropped > 0,
        "{} requests, none dropped",
        sent.load(Ordering::SeqCst)
    );
    // Every request was answered while the tap was stalled (each one asserted 200 above).
    let mut buf = [0u8; 64];
    stalled
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let n = stalled.read(&mut buf).unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "the stalled tap's stream was open all along"
    );
}
