//! `hopwise run` for real (docs/capture.md): an unmodified `curl` calling `http://fee/…` by
//! name from a captured app gets fee's answer through both proxies (fee sees the caller's
//! verified identity); a captured app listening on its own loopback answers inbound calls; a
//! destination outside the mesh is refused or passed as `mesh.capture.egress` says; a proxy
//! killed under a captured call ends the call and the run instead of leaving them hanging; a
//! SIGKILLed run's namespace, link, hosts file and record are removed by the next run; and no
//! test leaves any of them behind.
//!
//! Every test makes its own "host" namespace ([`Host`], removed on drop even when the test
//! fails) and runs everything inside it: the copies' namespaces hang off it, every address
//! (copies', services', the proxies' loopback ports) is assigned inside those namespaces, and
//! the host's own network is never touched. Needs root, `ip` (iproute2), `nft` (nftables) and
//! `curl` (and util-linux's `nsenter`), and `iptables` for the test of the rules without `nft`;
//! without them the tests fail, naming the package.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;
use common::captured::assert_nothing_left;
use common::netns::{Host, ip};
use common::run::{
    HOPWISE, RunIn, mesh, mesh_text, mesh_with, run_id, start_announced, start_run, text,
};

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// A stand-in fee app inside `host` on 127.0.0.1:7002: answers with the identity its proxy
/// vouched for and the path.
fn fee_app(host: &Host) {
    common::echo::serve(host.listen("127.0.0.1:7002"), "fee");
}

#[test]
fn curl_by_name_from_a_captured_app_gets_fees_answer_through_both_proxies() {
    // Then the rule that took it: a call to a service address goes by TPROXY, not NAT.
    let chain = curl_fee_captured("nft", "nft list chain inet hopwise to_services");
    let rule = chain.lines().find(|l| l.contains("tproxy")).unwrap_or("");
    let packets: u64 = rule
        .split_once("counter packets ")
        .and_then(|(_, r)| r.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    // Its SYN: the rule takes new connections only (plan.rs).
    assert!(packets >= 1, "the call did not go by TPROXY:\n{chain}");
}

#[test]
fn without_nft_iptables_rules_capture_the_same_call() {
    let chain = curl_fee_captured("iptables", "iptables -t mangle -L PREROUTING -v -n -x");
    // `pkts bytes target prot opt in out source destination`, fee's address as destination.
    let packets: u64 = chain
        .lines()
        .filter(|l| l.contains("TPROXY"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    // Its SYN, as with nft.
    assert!(packets >= 1, "the call did not go by TPROXY:\n{chain}");
}

/// An unmodified `curl http://fee/penalty/U-41` from a captured copy of web, its rules loaded
/// by `rules` (`HOPWISE_CAPTURE_RULES`), gets fee's answer — by the address it reached, so also
/// with a `Host` the mesh file does not name; then `list`, run in the copy's namespace, shows
/// the rule that took it (its output is returned). Nothing is left after.
fn curl_fee_captured(rules: &str, list: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = mesh(dir.path(), false);
    let host = Host::new();
    fee_app(&host);
    let f = file.to_str().unwrap();
    let _fee = start_announced(host.hopwise(&["proxy", "--config", f, "--service", "fee"]));
    let state = dir.path().join("state");
    let script = format!(
        "curl -sS -m 10 http://fee/penalty/U-41 && echo && \
         curl -sS -m 10 -H 'Host: fee.payments.example' http://fee/penalty/U-41 && echo && {list}"
    );
    let mut run = host.run(f, state.to_str().unwrap(), "web", &["sh", "-c", &script]);
    let out = run.env("HOPWISE_CAPTURE_RULES", rules).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let (answer, rest) = stdout.split_once('\n').unwrap();
    let (other_host, listed) = rest.split_once('\n').unwrap();
    // Only a call that went web's proxy → mTLS → fee's proxy carries web's verified identity.
    let fees = "fee saw spiffe://hopwise.local/service/web for /penalty/U-41";
    assert_eq!(answer, fees);
    assert_eq!(other_host, fees, "a Host the mesh does not name");
    assert_nothing_left(&host, &state, &[run_id(&stderr)]);
    listed.to_owned()
}

#[test]
fn a_captured_app_on_its_own_loopback_answers_a_captured_caller() {
    let dir = tempfile::tempdir().unwrap();
    let file = mesh(dir.path(), true);
    let host = Host::new();
    let f = file.to_str().unwrap();
    let state = dir.path().join("state");
    let s = state.to_str().unwrap();
    // fee's app listens on 127.0.0.1:7002 inside its namespace, as the mesh file says.
    let app = [
        HOPWISE,
        "sample",
        "--mesh",
        f,
        "--service",
        "fee",
        "--listen",
        "127.0.0.1:7002",
        "--knobs",
        "127.0.0.1:7003",
    ];
    let (fee, fee_err, fee_id) = start_run(host.run(f, s, "fee", &app));
    let mut fee = common::Proc(fee);
    let mut answer = String::new();
    let start = Instant::now();
    // The app may take a moment to listen after its proxy did.
    let curl = ["curl", "-sS", "-m", "5", "--fail", "http://fee/"];
    while start.elapsed() < Duration::from_secs(10) {
        let out = host.run(f, s, "web", &curl).output().unwrap();
        answer = text(&out).0;
        if out.status.success() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let v: serde_json::Value = serde_json::from_str(&answer)
        .unwrap_or_else(|_| panic!("not fee's leaf answer: {answer:?}"));
    assert_eq!(v["service"], "fee");
    // Stopping the run removes its namespace too (SIGTERM: it stops the app, then cleans up).
    let pid = nix::unistd::Pid::from_raw(fee.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let _ = fee.0.wait();
    drop(fee_err);
    assert_nothing_left(&host, &state, &[fee_id]);
}

#[test]
fn a_sigkilled_runs_leftovers_are_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = mesh(dir.path(), false);
    let host = Host::new();
    let f = file.to_str().unwrap();
    let state = dir.path().join("state");
    let s = state.to_str().unwrap();
    let (mut first, _, id) = start_run(host.run(f, s, "web", &["sleep", "600"]));
    // `nsenter` became `hopwise run` (same pid): SIGKILL, no goodbye.
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(
        Path::new(&format!("/run/netns/hopwise-{id}")).exists(),
        "a killed run cannot clean up: its namespace is still there"
    );
    assert!(host.links().contains(&format!("hw{id}h")));
    let out = host.run(f, s, "web", &["true"]).output().unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("removed what the dead run {id} left")),
        "{stderr}"
    );
    assert_nothing_left(&host, &state, std::slice::from_ref(&id));
    assert_nothing_left(&host, &state, &[run_id(&stderr)]);
}

#[test]
fn a_destination_outside_the_mesh_is_refused_or_passed_as_the_file_says() {
    let host = Host::new();
    // A server outside the mesh, on an address of the test's own "host" namespace.
    ip(&[
        "-n",
        &host.name,
        "addr",
        "add",
        "192.0.2.55/32",
        "dev",
        "lo",
    ]);
    let listener = host.listen("192.0.2.55:8080");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\noutside");
        }
    });
    let curl = ["curl", "-sS", "-m", "5", "http://192.0.2.55:8080/"];
    // Egress takes the redirect (NAT), not TPROXY: both ways of loading it.
    let cases = [("refuse", false), ("pass", true)];
    for (rules, (egress, answered)) in ["nft", "iptables"]
        .into_iter()
        .flat_map(|r| cases.map(|c| (r, c)))
    {
        let dir = tempfile::tempdir().unwrap();
        let file = mesh_with(dir.path(), false, egress);
        let state = dir.path().join("state");
        let out = host
            .run(
                file.to_str().unwrap(),
                state.to_str().unwrap(),
                "web",
                &curl,
            )
            .env("HOPWISE_CAPTURE_RULES", rules)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(
            out.status.success(),
            answered,
            "{rules}, egress {egress}: {stdout}\n{stderr}"
        );
        assert_eq!(
            stdout == "outside",
            answered,
            "{rules}, egress {egress}: {stdout}"
        );
        assert_nothing_left(&host, &state, &[run_id(&stderr)]);
    }
}

#[test]
fn a_proxy_killed_under_a_captured_connection_ends_the_call_and_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = mesh(dir.path(), false);
    let host = Host::new();
    // fee's app takes the call and never answers; it says when the call got through.
    let listener = host.listen("127.0.0.1:7002");
    let (reached, got) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
            let _ = reached.send(());
        }
    });
    let f = file.to_str().unwrap();
    let _fee = start_announced(host.hopwise(&["proxy", "--config", f, "--service", "fee"]));
    let state = dir.path().join("state");
    let curl = ["curl", "-sS", "-m", "120", "http://fee/hang"];
    let (mut run, mut err, id) = start_run(host.run(f, state.to_str().unwrap(), "web", &curl));
    got.recv_timeout(Duration::from_secs(30))
        .expect("the call never reached fee's app");
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(state.join("runs").join(format!("{id}.json"))).unwrap(),
    )
    .unwrap();
    let proxy = record["proxy"][0]
        .as_i64()
        .expect("the record names the proxy");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // The call ends with its proxy (the kernel resets what the proxy held), and the run with
    // it — long before curl's own 120 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the captured call hung");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(!status.success());
    // Whichever sees it first: curl its connection end (52: empty reply, 56: reset), or the
    // run its proxy gone (it then stops the command).
    let seen = ["curl: (52)", "curl: (56)", "the proxy of web stopped"];
    assert!(seen.iter().any(|s| rest.contains(s)), "{rest}");
    assert_nothing_left(&host, &state, std::slice::from_ref(&id));
}

#[test]
fn a_captured_app_speaks_opaque_tcp_by_name_on_a_declared_port_and_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let file = mesh_text(
        dir.path(),
        "mesh: { name: capture-tcp, certs: certs }
services:
  web:
    copies: [{ admin: '127.0.0.1:9901' }]
    calls: { kv: {} }
  kv:
    tcp: { ports: [7005] }
    copies: [{ app: '127.0.0.1:7002', inbound: '127.0.0.1:7102' }]
",
    );
    let host = Host::new();
    // kv's app: an echo on the declared port, and another on a port nobody declared.
    for port in [7005, 7006] {
        let listener = host.listen(&format!("127.0.0.1:{port}"));
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut reader = conn.try_clone().unwrap();
                    let _ = std::io::copy(&mut reader, &mut conn);
                });
            }
        });
    }
    let f = file.to_str().unwrap();
    let _kv = start_announced(host.hopwise(&["proxy", "--config", f, "--service", "kv"]));
    let state = dir.path().join("state");
    // bash's /dev/tcp resolves `kv` from the namespace's hosts file; the bytes are no HTTP.
    let talk = |port: u16| {
        let script = format!("exec 3<>/dev/tcp/kv/{port}; printf 'ping\\n' >&3; head -c 5 <&3");
        let out = host
            .run(
                f,
                state.to_str().unwrap(),
                "web",
                &["timeout", "20", "bash", "-c", &script],
            )
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_nothing_left(&host, &state, &[run_id(&stderr)]);
        stdout
    };
    assert_eq!(talk(7005), "ping\n", "carried whole through both proxies");
    assert_eq!(
        talk(7006),
        "",
        "a port the mesh file did not open is never reached"
    );
}
