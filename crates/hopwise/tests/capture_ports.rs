//! A service's `ports` for real (docs/capture.md, "A service's ports"): an unmodified `curl`
//! in a captured app calls `api` on two ports and reaches two different ports of api's app —
//! as a Kubernetes Service maps `port` to `targetPort` — through both proxies over mutual TLS;
//! a port `api` does not list is refused at the caller's proxy (as a Service refuses a port it
//! does not expose), an app's own `x-hopwise-service-port` changes nothing, and no app ever
//! sees that header. Runs in a namespace of its own ([`Host`]), as `capture.rs`: needs root,
//! `ip`, `nft`, `curl`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;
use common::captured::assert_nothing_left;
use common::netns::Host;
use common::run::{RunIn, mesh_text, run_id, start_announced, text};

#[test]
fn a_captured_app_reaches_each_listed_port_at_its_target_and_no_other_port() {
    let dir = tempfile::tempdir().unwrap();
    let file = mesh_text(
        dir.path(),
        "mesh: { name: capture-ports, certs: certs }
services:
  web:
    copies: [{ admin: '127.0.0.1:9901' }]
    calls: { api: {} }
  api:
    ports: [{ port: 80, target_port: 7002 }, { port: 9090, target_port: 7004 }]
    copies: [{ app: '127.0.0.1:7002', inbound: '127.0.0.1:7102' }]
",
    );
    let host = Host::new();
    // api's app: its main port, an admin port, and a port nothing lists.
    common::echo::serve(host.listen("127.0.0.1:7002"), "main");
    common::echo::serve(host.listen("127.0.0.1:7004"), "admin");
    common::echo::serve(host.listen("127.0.0.1:7006"), "unlisted");
    let f = file.to_str().unwrap();
    let _api = start_announced(host.hopwise(&["proxy", "--config", f, "--service", "api"]));
    let state = dir.path().join("state");
    // Each call on a line of its own; a refused one prints curl's error code instead.
    let script = "for url in http://api/a http://api:9090/b http://api:7004/c http://api:7006/d; do \
                    curl -sS -m 10 -H 'x-hopwise-service-port: 9090' \"$url\" 2>&1 | head -n 1 | tr -d '\\n'; echo; \
                  done";
    let out = host
        .run(f, state.to_str().unwrap(), "web", &["sh", "-c", script])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_nothing_left(&host, &state, &[run_id(&stderr)]);
    let lines: Vec<&str> = stdout.lines().collect();
    let web = "spiffe://hopwise.local/service/web";
    assert_eq!(lines.len(), 4, "{stdout}\n{stderr}");
    assert_eq!(lines[0], format!("main saw {web} for /a"), "port 80 → 7002");
    assert_eq!(
        lines[1],
        format!("admin saw {web} for /b"),
        "port 9090 → 7004"
    );
    // A target is no port callers dial, and an unlisted port is not reached either: both
    // closed by web's proxy before a byte went anywhere.
    for (line, port) in [(lines[2], 7004), (lines[3], 7006)] {
        assert!(
            line.starts_with("curl: (52)") || line.starts_with("curl: (56)"),
            "port {port}: {line}"
        );
    }
}
