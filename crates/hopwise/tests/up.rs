//! `hopwise up` end to end: the shop runs from its mesh file alone (control plane, a sample app
//! and a proxy per copy, a gateway in front of frontend, the load through it), `hopwise fault` makes inventory fail its next five
//! requests, and the proxies' own counters show exactly those five failures travelling up the
//! chain — no retry anywhere, since none of them is a failure hopwise's defaults repeat — and the
//! load client saw exactly five errors. Ctrl-C stops every process. A second `up` after a
//! SIGKILLed one starts clean.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::free;
use common::up::{Up, addr, samples, shop, until_gone};

fn http(addr: SocketAddr, method: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    // The knob ports take a change only as JSON and answer only to their own name
    // (hopwise_model::browser_guard).
    let json = if method == "GET" {
        ""
    } else {
        "content-type: application/json\r\n"
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\n{json}content-length: 0\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The sum of the series of `name` whose labels contain every one of `labels`.
fn metric(admin: SocketAddr, name: &str, labels: &[&str]) -> u64 {
    http(admin, "GET", "/metrics")
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn pids(run: &Path) -> Vec<u32> {
    std::fs::read_to_string(run.join("pids"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

fn ok_count(line: &str) -> u64 {
    line.split(" ok ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_shop_runs_a_fault_travels_up_and_ctrl_c_stops_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut up = Up::start(dir.path(), &shop(), &["--load", "25"]);
    let run = dir.path().join(".hopwise/shop");
    let s = samples(&run);
    assert_eq!(
        s["mesh"].as_str().unwrap(),
        std::fs::canonicalize(shop()).unwrap().to_str().unwrap()
    );
    let svc = |name: &str| s["services"][name].clone();
    assert_eq!(svc("pricing")["sample"], "chain");
    assert_eq!(svc("pricing")["copies"].as_array().unwrap().len(), 2);
    assert_eq!(svc("inventory")["sample"], "leaf");
    let admin = |name: &str, copy: usize| addr(&svc(name)["copies"][copy]["admin"]);
    let knobs = addr(&svc("inventory")["copies"][0]["knobs"]);

    // Traffic flows through all four services before anything fails.
    up.wait_line(|l| l.starts_with("load → gateway → frontend:") && ok_count(l) >= 10);
    let clean = http(knobs, "GET", "/fault");
    assert!(
        clean.ends_with(
            r#"{"error_rate":0.0,"latency_ms":0,"down":false,"hang":false,"fail_first":0,"lose_response":false}"#
        ),
        "{clean}"
    );

    // The knobs refuse what they cannot read, and change nothing.
    let bad = http(knobs, "POST", "/fault");
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    assert!(bad.contains("not a JSON object"), "{bad}");
    assert!(http(knobs, "POST", "/fault/clear").ends_with(r#""lose_response":false}"#));

    let fault = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .current_dir(dir.path())
        .args(["fault", "inventory", "--fail-first", "5"])
        .output()
        .unwrap();
    assert!(
        fault.status.success(),
        "{}",
        String::from_utf8_lossy(&fault.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&fault.stdout),
        "inventory copy 0: {\"error_rate\":0.0,\"latency_ms\":0,\"down\":false,\"hang\":false,\"fail_first\":5,\"lose_response\":false}\n"
    );
    // The five are used up, and requests pass again afterwards.
    let start = Instant::now();
    while !http(knobs, "GET", "/fault").contains("\"fail_first\":0") {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the five were never used"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = ok_count(&up.wait_line(|l| l.starts_with("load → gateway → frontend:")));
    up.wait_line(|l| l.starts_with("load → gateway → frontend:") && ok_count(l) >= after + 10);

    let proxies: Vec<SocketAddr> = [
        ("frontend", 1),
        ("checkout", 1),
        ("pricing", 2),
        ("inventory", 1),
    ]
    .iter()
    .flat_map(|(name, copies)| (0..*copies).map(|c| admin(name, c)))
    .collect();
    let sum = |name: &str, labels: &[&str]| -> u64 {
        proxies.iter().map(|a| metric(*a, name, labels)).sum()
    };
    assert!(sum("hopwise_requests_total", &["direction=\"inbound\""]) > 0);
    // Inventory's app answered 503 exactly five times: its proxy's inbound 5xx that the proxy
    // did not make itself. Nothing else makes that app fail, however slow the machine.
    let inventory = admin("inventory", 0);
    let app_503 = metric(
        inventory,
        "hopwise_responses_total",
        &["direction=\"inbound\"", "class=\"5xx\""],
    ) - metric(
        inventory,
        "hopwise_local_replies_total",
        &["direction=\"inbound\""],
    );
    assert_eq!(app_503, 5);
    // The shop's timeouts are tight (inventory 250 ms, pricing's tries 300 ms); a machine busy
    // enough to miss them adds failures and retries of its own. Then only the five are checked.
    let slow: u64 = ["per-try-timeout", "route-timeout", "deadline-exceeded"]
        .iter()
        .map(|r| sum("hopwise_local_replies_total", &[&format!("reason=\"{r}\"")]))
        .sum();
    let strict = slow == 0;
    if strict {
        // Pricing's proxy passed the five 503s up (hopwise's defaults do not retry a 503: it may
        // have been processed), pricing answered UNAVAILABLE, checkout's proxy passed that up,
        // checkout answered 502 to frontend: five failures at every hop, not one retry anywhere.
        let at = |svc: &str, class: &str| {
            sum(
                "hopwise_responses_total",
                &[
                    "direction=\"outbound\"",
                    &format!("service=\"{svc}\""),
                    &format!("class=\"{class}\""),
                ],
            )
        };
        assert_eq!(at("inventory", "5xx"), 5);
        assert_eq!(at("pricing", "grpc-error"), 5);
        assert_eq!(at("checkout", "5xx"), 5);
        assert_eq!(
            sum("hopwise_retries_total", &[]),
            0,
            "no failure here is one hopwise's defaults retry"
        );
    } else {
        eprintln!(
            "the machine was too slow for the shop's timeouts ({slow} fired); only the five 503s were checked exactly"
        );
    }

    // Ctrl-C: everything stops, and the load client saw exactly the five.
    let children = pids(&run);
    assert_eq!(
        children.len(),
        12,
        "control + 5 apps + 5 proxies + the gateway's"
    );
    let status = up.sigint();
    assert!(status.success(), "{status}");
    assert_eq!(
        until_gone(&children),
        Vec::<u32>::new(),
        "children left behind"
    );
    let total = up.wait_line(|l| l.starts_with("load, total:"));
    if strict {
        assert!(total.contains("errors 502×5 ·"), "{total}");
    }
    up.wait_line(|l| l.starts_with("stopped:"));
    assert!(!run.join("up.pid").exists());
}

#[test]
fn up_after_a_killed_up_starts_clean() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.yaml");
    std::fs::write(
        &file,
        "mesh: { name: tiny, trust_domain: tiny.local }\nservices:\n  a: { sample: chain, entry: { timeout: 2s }, calls: { b: { timeout: 1s } } }\n  b: { sample: leaf }\n",
    )
    .unwrap();
    let run = dir.path().join(".hopwise/tiny");
    let mut first = Up::start(dir.path(), &file, &[]);
    let old = pids(&run);
    assert_eq!(old.len(), 6, "control, 2 apps, 2 proxies, the gateway's");
    // SIGKILL: `up` cannot clean up; its children go because they asked to.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_eq!(
        until_gone(&old),
        Vec::<u32>::new(),
        "children outlived a killed up"
    );
    assert!(
        run.join("up.pid").exists(),
        "the stale run directory is still there"
    );

    let mut second = Up::start(dir.path(), &file, &[]);
    let s = samples(&run);
    let app = addr(&s["services"]["a"]["copies"][0]["app"]);
    let answer = http(app, "GET", "/");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains(r#""calls":[{"to":"b","route":null,"status":"200"}]"#),
        "{answer}"
    );
    let new = pids(&run);
    assert!(new.iter().all(|p| !old.contains(p)));
    assert!(second.sigint().success());
    assert_eq!(until_gone(&new), Vec::<u32>::new());
}

fn hopwise(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn up_refuses_a_file_that_check_refuses_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "services:\n  a: { sample: chian }\n",
    )
    .unwrap();
    let (code, _, err) = hopwise(dir.path(), &["up", "bad.yaml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.yaml:2:")
            && err.contains("services.a.sample: unknown value `chian`")
            && err.contains("nothing was started"),
        "{err}"
    );
    // An error finding: the call's 5 s timeout does not fit in the client's 1 s.
    std::fs::write(
        dir.path().join("slow.yaml"),
        "services:\n  a: { sample: chain, entry: { timeout: 1s }, calls: { b: { timeout: 5s } } }\n  b: { sample: leaf }\n",
    )
    .unwrap();
    let (code, _, err) = hopwise(dir.path(), &["up", "slow.yaml"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nothing was started"), "{err}");
    assert!(!dir.path().join(".hopwise").exists());
}

#[test]
fn fault_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = hopwise(dir.path(), &["fault", "inventory", "--down"]);
    assert_eq!(code, 2);
    assert!(err.contains("no running `hopwise up` found"), "{err}");
    // A run directory as `up` leaves it (the knobs are never reached: every case is refused first).
    let run = dir.path().join(".hopwise/m");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("up.pid"), "1\n").unwrap();
    std::fs::write(
        run.join("samples.json"),
        r#"{"mesh":"/m.yaml","services":{"a":{"sample":"chain","copies":[{"copy":0,"app":"127.0.0.1:1","knobs":"127.0.0.1:2","admin":"127.0.0.1:3","inbound":"127.0.0.1:4"}]},"mine":{"sample":null,"copies":[{"copy":0,"app":"127.0.0.1:5"}]}}}"#,
    )
    .unwrap();
    for (args, want) in [
        (
            &["fault", "ghost", "--down"][..],
            "`ghost` is not a service of this run (services: a, mine)",
        ),
        (
            &["fault", "mine", "--down"][..],
            "`mine` is your own app: its proxies inject --error-rate and --latency (for every copy, in the mesh file), not --down",
        ),
        (
            &["fault", "a", "--copy", "3", "--down"][..],
            "`a` has no copy 3 (copies: 0–0)",
        ),
        (&["fault", "a"][..], "nothing to change"),
    ] {
        let (code, _, err) = hopwise(dir.path(), args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// The library's lesson with `up`'s samples: the fee (TLS, outside the mesh) processes a payment
/// and loses the answer; loan's proxy retries the balance read (safe) and never the payment.
#[test]
fn a_lost_payment_answer_is_not_retried_and_a_lost_read_is() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.yaml");
    let fee = free();
    std::fs::write(
        &file,
        format!(
            "mesh: {{ name: lib, trust_domain: lib.local }}
services:
  loan:
    sample: chain
    entry: {{ timeout: 20s }}
    calls:
      fee:
        timeout: 15s
        retries: {{ count: 2, on: [connect-failure, refused-stream, gateway-error] }}
        routes:
          balance: {{ path: /penalty/, method: GET }}
          pay: {{ path: /penalty/pay, method: POST }}
  fee:
    sample: fee
    external: {{ address: {fee}, tls: {{ server_name: localhost }} }}
"
        ),
    )
    .unwrap();
    let mut up = Up::start(dir.path(), &file, &[]);
    let run = dir.path().join(".hopwise/lib");
    let s = samples(&run);
    let app = addr(&s["services"]["loan"]["copies"][0]["app"]);
    let admin = addr(&s["services"]["loan"]["copies"][0]["admin"]);
    assert_eq!(addr(&s["services"]["fee"]["copies"][0]["app"]), fee);
    assert_eq!(s["services"]["fee"]["copies"][0].get("admin"), None);

    // Through loan's proxy, over TLS to the fee: both routes answer.
    let ok = http(app, "GET", "/");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains(r#"{"to":"fee","route":"balance","status":"200"},{"to":"fee","route":"pay","status":"200"}"#), "{ok}");

    let (code, out, err) = hopwise(dir.path(), &["fault", "fee", "--lose-response"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"lose_response\":true"), "{out}");
    let requests = 4;
    for _ in 0..requests {
        let lost = http(app, "GET", "/");
        assert!(lost.starts_with("HTTP/1.1 502"), "{lost}");
    }
    let retries = |route: &str| {
        metric(
            admin,
            "hopwise_retries_total",
            &[&format!("route=\"{route}\"")],
        )
    };
    // Every read tried three times; no payment repeated (it may have been processed).
    assert_eq!(retries("balance"), 2 * requests);
    assert_eq!(retries("pay"), 0);
    let tries = |route: &str| {
        metric(
            admin,
            "hopwise_tries_total",
            &[&format!("route=\"{route}\"")],
        )
    };
    assert_eq!(
        (tries("balance"), tries("pay")),
        (1 + 3 * requests, 1 + requests)
    );
    assert!(up.sigint().success());
}
