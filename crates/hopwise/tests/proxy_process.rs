//! `hopwise proxy` as a real process: it starts from the mesh file alone, drains on SIGTERM
//! (the request in flight finishes, then it exits 0), and refuses bad input with exit 2. It runs
//! as the `hopwise-proxy` binary, which `hopwise proxy` replaces itself with.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    common::free().port()
}

/// A backend that answers every request after `delay`.
fn slow_backend(delay: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    std::thread::sleep(delay);
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nslow");
                }
            });
        }
    });
    port
}

#[test]
fn sigterm_drains_the_request_in_flight_then_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let backend = slow_backend(Duration::from_millis(800));
    let (upstream, admin) = (free_port(), free_port());
    let mesh = format!(
        "services:
  a:
    copies: [{{ admin: 127.0.0.1:{admin}, upstreams: {{ fee: 127.0.0.1:{upstream} }} }}]
    calls: {{ fee: {{ timeout: 5s }} }}
  fee:
    external: {{ address: 127.0.0.1:{backend} }}
"
    );
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, mesh).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["proxy", "--config"])
        .arg(&file)
        .args(["--service", "a"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("hopwise proxy for a"), "{line}");
    // `hopwise proxy` became the sidecar binary, under the same process id.
    let exe = std::fs::read_link(format!("/proc/{}/exe", child.id())).unwrap();
    assert_eq!(
        exe.file_name().unwrap(),
        "hopwise-proxy",
        "the proxy runs as {}",
        exe.display()
    );

    let request = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
        s.write_all(b"GET /penalty/U-41 HTTP/1.1\r\nhost: fee\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    });
    std::thread::sleep(Duration::from_millis(250));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let response = request.join().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("slow"), "{response}");

    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy did not exit after draining"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
    assert!(TcpStream::connect(("127.0.0.1", upstream)).is_err());
}

#[test]
fn a_proxy_for_an_unknown_service_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, "services:\n  a: {}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["proxy", "--config"])
        .arg(&file)
        .args(["--service", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`nope` is not a service in the mesh file (services: a)"),
        "{err}"
    );
}

#[test]
fn a_proxy_with_nothing_to_listen_on_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.yaml");
    // b has no copy: nothing says where its proxy would listen.
    std::fs::write(&file, "services:\n  a: { calls: { b: {} } }\n  b: {}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["proxy", "--config"])
        .arg(&file)
        .args(["--service", "b", "--plaintext"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the proxy of b has nothing to listen on: no inbound port, no outbound port, no upstream port"),
        "{err}"
    );
}

#[test]
fn a_port_in_use_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let file = dir.path().join("mesh.yaml");
    std::fs::write(
        &file,
        format!(
            "services:\n  a:\n    copies: [{{ outbound: 127.0.0.1:{port} }}]\n    calls: {{ b: {{}} }}\n  b: {{}}\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["proxy", "--config"])
        .arg(&file)
        .args(["--service", "a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port} (outbound)")),
        "{err}"
    );
}

#[test]
fn an_outbound_port_open_to_the_network_needs_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.yaml");
    std::fs::write(
        &file,
        "services:\n  a:\n    copies: [{ outbound: 0.0.0.0:0 }]\n    calls: { b: {} }\n  b: {}\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let args = ["proxy", "--plaintext", "--config", file, "--service", "a"];
    // Without the flag it must exit, not serve: waited for with a bound, killed past it.
    let mut refused = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = refused.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = refused.kill();
            panic!("the proxy started on 0.0.0.0 without --allow-remote-outbound");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(2));
    let mut err = String::new();
    let mut stderr = refused.stderr.take().unwrap();
    stderr.read_to_string(&mut err).unwrap();
    assert!(
        err.contains("the outbound (HTTP-proxy) listener would listen on 0.0.0.0:0")
            && err.contains("pass --allow-remote-outbound"),
        "{err}"
    );
    // With it, it starts (and announces itself on its first line).
    let allowed = [&args[..], &["--allow-remote-outbound"]].concat();
    let _proxy = common::spawn_with(&allowed, Stdio::null());
}

/// A `hopwise-proxy` of another build than the `hopwise` that started it (what `cargo run`
/// leaves behind: it rebuilds only `hopwise`) hands the proxy back to that `hopwise`, which runs
/// it in its own process — today's code, never the stale sidecar's.
#[test]
fn a_sidecar_of_another_build_hands_the_proxy_back_to_hopwise() {
    let dir = tempfile::tempdir().unwrap();
    let (admin, outbound) = (free_port(), free_port());
    let file = dir.path().join("mesh.yaml");
    std::fs::write(
        &file,
        format!(
            "services:\n  a:\n    copies: [{{ admin: 127.0.0.1:{admin}, outbound: 127.0.0.1:{outbound} }}]\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("proxy.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopwise-proxy"));
    cmd.arg("--config")
        .arg(&file)
        .args(["--service", "a"])
        .env("HOPWISE_SIDECAR_BUILD", "some-other-build")
        .env("HOPWISE_SIDECAR_FROM", env!("CARGO_BIN_EXE_hopwise"));
    let (mut proxy, line) = common::first_line(cmd, std::fs::File::create(&log).unwrap().into());
    assert!(line.contains("hopwise proxy for a"), "{line}");
    let exe = std::fs::read_link(format!("/proc/{}/exe", proxy.0.id())).unwrap();
    proxy.kill();
    assert_eq!(exe.file_name().unwrap(), "hopwise", "{}", exe.display());
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(err.contains("hopwise-proxy is from another build"), "{err}");
}
