//! A captured app has no IPv6 path past its proxy (issue 28). An outside look once reached a
//! host's `[::]` server through the copy's link-local addresses, 200 and no proxy, while IPv4
//! was refused. Here the host's end of the link answers on `[::]` and the app tries both ways
//! IPv6 offers: a routed address on the link (what a dual-stack pod has: the test adds
//! `fd77::/64` at both ends) goes to its proxy's capture listener as IPv4 does — counted there —
//! and the mesh's egress rule refuses it; a link-local address is refused at once. The server
//! never sees a connection. With the rules loaded by `nft` (one `inet` table) and by
//! `iptables-restore` + `ip6tables-restore`.
//!
//! Needs root, `ip`, `nft`, `iptables` and `curl`, as `capture.rs` does; everything happens in
//! namespaces the test makes ([`Host`]) or its run makes, removed after.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;
use common::captured::{assert_nothing_left, captured};
use common::netns::{Host, ip};
use common::run::{RunIn, mesh_with, start_run, text};

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// web's proxy's admin port, inside the host namespace (`mesh_with`'s file).
const WEB_ADMIN: &str = "127.0.0.1:9901";

#[test]
fn a_captured_app_reaches_nothing_over_ipv6_but_its_proxy() {
    for rules in ["nft", "iptables"] {
        link_local_goes_to_the_proxy(rules);
    }
}

/// One run of web whose app calls the host's end of its link over IPv6, routed and link-local.
fn link_local_goes_to_the_proxy(rules: &str) {
    let host = Host::new();
    // A server outside the mesh, on every address of the host namespace, IPv6's included.
    let accepted = Arc::new(AtomicUsize::new(0));
    let listener = host.listen("[::]:8080");
    let seen = accepted.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            seen.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = std::io::Write::write_all(&mut conn, b"HTTP/1.1 200 OK\r\n\r\noutside");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let file = mesh_with(dir.path(), false, "refuse");
    let state = dir.path().join("state");
    let (addr_file, done_file) = (dir.path().join("ll"), dir.path().join("done"));
    // The app: wait for the addresses the test sets up, call each, say how curl ended (7:
    // refused at once, 52 or 56: the proxy closed it, 28: timed out, 0: answered), then stay until
    // the test has read the proxy's counters.
    let script = format!(
        "link=$(ip -o link show | grep -o 'hw[0-9a-f]*a' | head -n1)
         while [ ! -s {a} ]; do sleep 0.05; done
         curl -g -sS -m 5 http://[fd77::1]:8080/ >/dev/null 2>&1; echo routed $?
         curl -g -sS -m 5 \"http://[$(cat {a})%25$link]:8080/\" >/dev/null 2>&1; echo link-local $?
         while [ ! -e {d} ]; do sleep 0.05; done",
        a = addr_file.display(),
        d = done_file.display()
    );
    let mut cmd = host.run(
        file.to_str().unwrap(),
        state.to_str().unwrap(),
        "web",
        &["sh", "-c", &script],
    );
    cmd.env("HOPWISE_CAPTURE_RULES", rules)
        .stdout(Stdio::piped());
    let (mut run, mut err, id) = start_run(cmd);
    // Dual stack on the link: addresses in the test's namespace and the run's, no DAD wait.
    let (outer, inner) = (format!("hw{id}h"), format!("hw{id}a"));
    ip(&[
        "-n",
        &host.name,
        "addr",
        "add",
        "fd77::1/64",
        "dev",
        &outer,
        "nodad",
    ]);
    ip(&[
        "-n",
        &format!("hopwise-{id}"),
        "addr",
        "add",
        "fd77::2/64",
        "dev",
        &inner,
        "nodad",
    ]);
    let ll = link_local(&host, &outer);
    std::fs::write(&addr_file, &ll).unwrap();
    let mut out = BufReader::new(run.stdout.take().unwrap());
    let mut said = String::new();
    for _ in 0..2 {
        out.read_line(&mut said).unwrap();
    }
    let refused = captured(&host, WEB_ADMIN.parse().unwrap(), "egress-refused");
    std::fs::write(&done_file, "").unwrap();
    let status = run.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let why = format!("{rules}: fe80 {ll}:\n{said}{rest}");
    // The proxy closed the routed call (curl: 52 empty reply, or 56 reset, as the close
    // races curl's read); the link-local one never left the namespace.
    assert!(
        ["routed 52\nlink-local 7\n", "routed 56\nlink-local 7\n"].contains(&said.as_str()),
        "{why}"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the server was reached: {why}"
    );
    // The routed call was refused by the proxy, not by a missing route.
    assert_eq!(refused, 1, "{why}");
    assert!(status.success(), "{why}");
    assert_nothing_left(&host, &state, &[id]);
}

/// The link-local address of `link` in `host`, once duplicate address detection is over (until
/// then nobody may use it).
fn link_local(host: &Host, link: &str) -> String {
    let start = Instant::now();
    loop {
        let out = Command::new("ip")
            .args([
                "-n", &host.name, "-6", "-o", "addr", "show", "dev", link, "scope", "link",
            ])
            .output()
            .unwrap();
        let shown = text(&out).0;
        let addr = shown
            .split_whitespace()
            .skip_while(|w| *w != "inet6")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .map(str::to_owned);
        match addr {
            Some(a) if !shown.contains("tentative") => return a,
            _ => assert!(
                start.elapsed() < Duration::from_secs(10),
                "no usable link-local address on {link}: {shown}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
