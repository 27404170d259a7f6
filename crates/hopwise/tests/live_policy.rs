//! Policy changes reach running proxies: `hopwise control` with a proxy for a and one for b,
//! traffic through a the whole time. A new mesh file (`hopwise control apply`, then an edit of
//! the file the control plane was started with) changes a route's timeout and retries, adds and
//! removes an upstream reachable through a's HTTP-proxy port, and changes who may call a path;
//! real requests show each change once every proxy has acknowledged it, and no request of the
//! steady traffic fails meanwhile. A file that moves a listener is refused by the proxy with the
//! reason, visible in `hopwise status`, and the policy in force keeps working; an edit `hopwise
//! check` refuses changes nothing.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hopwise_control::pb;

mod common;
use common::traffic::Traffic;
use common::{free, metric, spawn_logged as spawn};

/// b's app: `/hang` never answers, `/fail` answers 503, anything else 200 `ok`.
fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let _ = conn.set_nodelay(true);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split(' ').nth(1).unwrap_or("/").to_owned();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            break;
                        }
                    }
                    let (status, body) = match path.as_str() {
                        "/hang" => {
                            std::thread::sleep(Duration::from_secs(60));
                            return;
                        }
                        "/fail" => ("503 Service Unavailable", "down"),
                        _ => ("200 OK", "ok"),
                    };
                    let resp = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if conn.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// One request through a's local port for b: (status, the whole answer).
fn get(port: SocketAddr, path: &str) -> (u16, String) {
    get_from(port, "b", path)
}

/// One request to `port` for `host`: (status, the whole answer).
fn get_from(port: SocketAddr, host: &str, path: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(port) else {
        return (0, "no connection".to_owned());
    };
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let req = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    let _ = s.write_all(req.as_bytes());
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

fn admin_config(admin: SocketAddr) -> serde_json::Value {
    let mut s = TcpStream::connect(admin).unwrap();
    s.write_all(
        format!("GET /config HTTP/1.1\r\nhost: {admin}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap()).unwrap()
}

/// A control plane: its address and its state directory (its `ca.pem` and `admin-token`).
type At<'a> = (SocketAddr, &'a Path);

fn status(rt: &tokio::runtime::Runtime, (server, state): At<'_>) -> pb::StatusResponse {
    let server = hopwise_control::client::Server::from_state(&server.to_string(), state).unwrap();
    rt.block_on(hopwise_control::client::status(&server))
        .unwrap()
}

/// Waits (up to a generous limit) until both proxies have acknowledged `version` or later,
/// and returns how long that took and each proxy's last acknowledgement.
fn until_acked(
    rt: &tokio::runtime::Runtime,
    at: At<'_>,
    version: u64,
) -> (Duration, Vec<pb::ProxyStatus>) {
    let start = Instant::now();
    loop {
        let s = status(rt, at);
        let open: Vec<_> = s.proxies.into_iter().filter(|p| p.connected).collect();
        if open.len() == 2 && open.iter().all(|p| p.last_acked_version >= version) {
            return (start.elapsed(), open);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the proxies never acknowledged version {version}: {open:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn apply((server, state): At<'_>, file: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["control", "apply", file.to_str().unwrap()])
        .args(["--server", &server.to_string()])
        .args(["--state", state.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// a's listeners, in the mesh file (so moving one is a change its proxy sees).
#[derive(Clone, Copy)]
struct Ports {
    admin: SocketAddr,
    /// The local port for b.
    b: SocketAddr,
    /// The HTTP-proxy port (by `Host`).
    outbound: SocketAddr,
}

/// The mesh file: a's calls are `a_calls`; b's rules are `b_rules`.
fn mesh(a: Ports, a_calls: &str, b_rules: &str) -> String {
    let Ports { admin, b, outbound } = a;
    format!(
        "mesh: {{ name: live, trust_domain: live.local }}
services:
  a:
    copies: [{{ admin: {admin}, outbound: {outbound}, upstreams: {{ b: {b} }} }}]
    calls: {{ {a_calls} }}
  b: {{ {b_rules} }}
  c:
    calls:
      b: {{ timeout: 2s }}
"
    )
}

#[test]
fn policy_changes_reach_running_proxies_without_a_failed_request() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ports = Ports {
        admin: free(),
        b: free(),
        outbound: free(),
    };
    let (a_admin, a_port, server) = (ports.admin, ports.b, free());
    let v1_calls = "b: { timeout: 10s, retries: { count: 0 } }";
    let v2_calls = "b: { timeout: 1s, retries: { count: 2, on: [5xx] } }, c: { timeout: 3s }";
    let v1 = mesh(ports, v1_calls, "");
    std::fs::write(d.join("mesh.yaml"), &v1).unwrap();
    let _cp = spawn(
        &[
            "control",
            "--config",
            d.join("mesh.yaml").to_str().unwrap(),
            "--state",
            d.join("state").to_str().unwrap(),
            "--listen",
            &server.to_string(),
        ],
        &d.join("control.log"),
    );
    let control = format!("https://{server}");
    let state = d.join("state");
    let at = (server, state.as_path());
    let _b = spawn(
        &[
            "proxy",
            "--control",
            &control,
            "--control-ca",
            d.join("state/ca.pem").to_str().unwrap(),
            "--token-file",
            d.join("state/tokens/b").to_str().unwrap(),
            "--service",
            "b",
            "--inbound",
            &free().to_string(),
            "--app",
            &backend().to_string(),
            "--cache",
            d.join("cache-b").to_str().unwrap(),
            "--lease-ttl",
            "2s",
        ],
        &d.join("b.log"),
    );
    let _a = spawn(
        &[
            "proxy",
            "--control",
            &control,
            "--control-ca",
            d.join("state/ca.pem").to_str().unwrap(),
            "--token-file",
            d.join("state/tokens/a").to_str().unwrap(),
            "--service",
            "a",
            "--cache",
            d.join("cache-a").to_str().unwrap(),
        ],
        &d.join("a.log"),
    );
    // b's copy registered and known to a.
    let start = Instant::now();
    while get(a_port, "/").0 != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "b never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Version 1: no retries; anyone in the mesh may call b's /private.
    let retries = "hopwise_retries_total{service=\"b\",route=\"b\",condition=\"5xx\"}";
    assert_eq!(get(a_port, "/fail").0, 503);
    assert_eq!(metric(a_admin, retries), 0);
    assert_eq!(get(a_port, "/private").0, 200);
    // a does not call c: its HTTP-proxy port has no route there.
    let (code, text) = get_from(ports.outbound, "c", "/");
    assert_eq!(code, 404, "{text}");
    assert!(text.contains("x-hopwise-error: no-route"), "{text}");
    // `/` must always answer 200 `ok`.
    let traffic = Traffic::start(Duration::from_millis(5), move || {
        let (status, text) = get(a_port, "/");
        if status == 200 && text.ends_with("\r\n\r\nok") {
            Ok(String::new())
        } else {
            Err(text)
        }
    });

    // Version 2, by `hopwise control apply`: a timeout of 1 s, two retries on 5xx, a calls c
    // too, and only c may call b's /private.
    let v2 = mesh(ports, v2_calls, "allow_paths: { /private: [c] }");
    std::fs::write(d.join("v2.yaml"), &v2).unwrap();
    let version = status(&rt, at).version;
    apply(at, &d.join("v2.yaml"));
    let (took, proxies) = until_acked(&rt, at, version + 1);
    println!("apply → both proxies acked: {took:?}");
    for p in &proxies {
        assert!(p.last_ack_accepted, "{p:?}");
    }
    // The hanging backend now times out at 1 s, said so by a.
    let (code, text) = get(a_port, "/hang");
    assert_eq!(code, 504, "{text}");
    assert!(text.contains("x-hopwise-error: route-timeout"), "{text}");
    // A 503 is now retried twice, and counted.
    assert_eq!(get(a_port, "/fail").0, 503);
    assert_eq!(metric(a_admin, retries), 2);
    // a may no longer call /private; b's proxy says why.
    let (code, text) = get(a_port, "/private");
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("x-hopwise-error: forbidden"), "{text}");
    assert_eq!(get(a_port, "/").0, 200);
    // c is reachable through a's HTTP-proxy port now (no copy of it runs: 503 no-endpoint).
    let (code, text) = get_from(ports.outbound, "c", "/");
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("x-hopwise-error: no-endpoint"), "{text}");
    let config = admin_config(a_admin);
    assert_eq!(config["config_version"], 2, "{config}");
    assert_eq!(
        config["clusters"]["b"]["routes"][0]["policy"]["timeout"],
        "1s"
    );

    // Version 3 moves a's admin port: a cannot apply that without a restart. It says so, and
    // keeps version 2 whole; b (whose part did not change) takes it.
    let moved = free();
    let v3 = mesh(
        Ports {
            admin: moved,
            ..ports
        },
        v1_calls,
        "",
    );
    std::fs::write(d.join("v3.yaml"), &v3).unwrap();
    let version = status(&rt, at).version;
    apply(at, &d.join("v3.yaml"));
    let (_, proxies) = until_acked(&rt, at, version + 1);
    let a = proxies.iter().find(|p| p.service == "a").unwrap();
    assert!(!a.last_ack_accepted, "{a:?}");
    assert!(
        a.last_ack_reason
            .contains(&format!("the admin listener changed ({a_admin} → {moved})")),
        "{a:?}"
    );
    let b = proxies.iter().find(|p| p.service == "b").unwrap();
    assert!(b.last_ack_accepted, "{b:?}");
    let shown = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["status", "--server", &server.to_string()])
        .args(["--state", state.to_str().unwrap()])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    println!("{shown}");
    assert!(
        shown.contains("REJECTED: mesh version 3 not applied, keeping version 2"),
        "{shown}"
    );
    assert!(shown.contains("the admin listener changed"), "{shown}");
    // a still runs version 2: 1 s timeout, retries, and b now lets a call /private again
    // (b took version 3, which has no path rule).
    let (code, text) = get(a_port, "/hang");
    assert_eq!(
        (code, text.contains("route-timeout")),
        (504, true),
        "{text}"
    );
    assert_eq!(get(a_port, "/fail").0, 503);
    assert_eq!(metric(a_admin, retries), 4);
    assert_eq!(get_from(ports.outbound, "c", "/").0, 503);
    assert_eq!(admin_config(a_admin)["config_version"], 2);

    // Version 4: the file the control plane was started with is edited on disk (a's admin port
    // as at start; a timeout of 5 s and no retries; a no longer calls c; /private closed to
    // a again).
    let v4 = mesh(
        ports,
        &v1_calls.replace("10s", "5s"),
        "allow_paths: { /private: [c] }",
    );
    let version = status(&rt, at).version;
    std::fs::write(d.join("mesh.yaml"), &v4).unwrap();
    let (took, proxies) = until_acked(&rt, at, version + 1);
    println!("file edited → both proxies acked: {took:?}");
    for p in &proxies {
        assert!(p.last_ack_accepted, "{p:?}");
    }
    assert_eq!(get(a_port, "/private").0, 403);
    assert_eq!(get(a_port, "/fail").0, 503);
    assert_eq!(metric(a_admin, retries), 4, "no retries in version 4");
    assert_eq!(get_from(ports.outbound, "c", "/").0, 404);
    let config = admin_config(a_admin);
    assert_eq!(config["config_version"], 4, "{config}");
    assert_eq!(
        config["clusters"]["b"]["routes"][0]["policy"]["timeout"],
        "5s"
    );

    // An edit `hopwise check` refuses (a gives c 1 s, c gives b 2 s) is refused like `apply`:
    // logged with the finding, nothing changes.
    let bad = mesh(ports, &format!("{v1_calls}, c: {{ timeout: 1s }}"), "");
    std::fs::write(d.join("mesh.yaml"), &bad).unwrap();
    let start = Instant::now();
    let log = loop {
        let log = std::fs::read_to_string(d.join("control.log")).unwrap();
        if log.contains("refused") {
            break log;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(log.contains("exceeds-caller"), "{log}");
    assert_eq!(status(&rt, at).config_version, 4);
    assert_eq!(get(a_port, "/private").0, 403);

    let sent = traffic.sent();
    let (_, failed) = traffic.stop();
    println!("steady traffic: {sent} requests, {} failed", failed.len());
    assert!(sent > 0);
    assert!(failed.is_empty(), "{failed:?}");
}
