//! A proxy SIGKILLed under an opaque TCP connection (docs/tcp.md): `hopwise proxy` as real
//! processes, mutual TLS between them, an echo app behind. Whichever proxy dies, the app's
//! connection ends with a reset or an end of file — never a hang: every read is bounded, and
//! reaching the bound fails the test.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{Proc, free, run_status, spawn};

const LIMIT: Duration = Duration::from_secs(10);

/// An app that echoes what it reads, on each connection.
fn echo_app() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

struct Mesh {
    _dir: tempfile::TempDir,
    caller: Proc,
    callee: Proc,
    /// The caller's local port for `echo`.
    local: SocketAddr,
}

/// `a`'s proxy → (mTLS tunnel) → `echo`'s proxy → the echo app, both proxies real processes.
fn mesh() -> Mesh {
    let dir = tempfile::tempdir().unwrap();
    let (local, inbound, app) = (free(), free(), echo_app());
    let yaml = format!(
        "mesh: {{ name: k, trust_domain: k.local, certs: certs }}
services:
  a:
    copies: [{{ admin: {}, upstreams: {{ echo: {local} }} }}]
    calls: {{ echo: {{ connect_timeout: 2s }} }}
  echo:
    tcp: {{}}
    copies: [{{ app: {app}, inbound: {inbound}, admin: {} }}]
",
        free(),
        free()
    );
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, yaml).unwrap();
    let file = file.to_str().unwrap();
    let (status, out) = run_status(&["certs", "--config", file]);
    assert_eq!(status, Some(0), "{out}");
    let callee = spawn(&["proxy", "--config", file, "--service", "echo"]);
    let caller = spawn(&["proxy", "--config", file, "--service", "a"]);
    Mesh {
        _dir: dir,
        caller,
        callee,
        local,
    }
}

/// A connection through both proxies that has carried a round trip.
fn connected(local: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Ok(mut c) = TcpStream::connect(local) {
            c.set_read_timeout(Some(LIMIT)).unwrap();
            c.write_all(b"ping").unwrap();
            let mut back = [0u8; 4];
            if c.read_exact(&mut back).is_ok() && &back == b"ping" {
                return c;
            }
        }
        assert!(Instant::now() < deadline, "no tunnel through {local}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How the connection ended after its proxy died: it must end, within the bound.
fn ends(mut c: TcpStream) {
    let mut buf = [0u8; 16];
    let _ = c.write_all(b"are you there");
    match c.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Ok(n) => panic!("{n} bytes came back through a dead proxy"),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            panic!("the app's connection hung for {LIMIT:?} after its proxy died")
        }
        Err(e) => panic!("unexpected end: {e}"),
    }
}

#[test]
fn the_callee_proxy_killed_resets_the_callers_connection() {
    let mut m = mesh();
    let c = connected(m.local);
    m.callee.kill();
    ends(c);
}

#[test]
fn the_caller_proxy_killed_ends_the_apps_connection() {
    let mut m = mesh();
    let c = connected(m.local);
    m.caller.kill();
    ends(c);
}
