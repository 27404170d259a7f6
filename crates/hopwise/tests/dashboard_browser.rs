//! The dashboard against a real mesh: `hopwise control --dashboard --samples FILE` and three
//! `hopwise proxy --control` processes (a calls b and c; a has no inbound port, b's app is a
//! sample with fault knobs), real traffic through a's proxy. One test reads the dashboard's
//! JSON API and compares each edge with the proxies' own `/metrics`; the other drives the page
//! in headless Chromium (`tests/browser/dashboard.mjs`, playwright-core): graph and numbers,
//! keyboard, both calculators with the seed's samples, a fault set through the page. The same
//! browser test runs against `hopwise up` on the shop, with the fault on inventory, and finds
//! the shop's charts in the chain's order (frontend → checkout first). A fourth
//! checks the charts over time against a's `/metrics` (`tests/browser/charts.mjs`).
//!
//! The browser test needs `/usr/bin/chromium` and `tests/browser/node_modules` (scripts/test
//! installs both). Without them it fails under CI (`CI` set) and is skipped, saying so,
//! elsewhere. `HOPWISE_SCREENSHOT=docs/dashboard.png` saves a screenshot of `hopwise up`'s.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly
#![allow(clippy::print_stdout, clippy::print_stderr)] // what the browser saw, or why it was skipped

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Proc, free, spawn};
use serde_json::{Value, json};

/// The knobs of the sample app, as `hopwise up`'s samples serve them.
#[derive(Debug, Clone, PartialEq)]
struct Fault {
    error_rate: f64,
    latency_ms: u64,
    down: bool,
    hang: bool,
    fail_first: u64,
    lose_response: bool,
}

impl Fault {
    const CLEAR: Fault = Fault {
        error_rate: 0.0,
        latency_ms: 0,
        down: false,
        hang: false,
        fail_first: 0,
        lose_response: false,
    };

    fn json(&self) -> String {
        json!({"error_rate": self.error_rate, "latency_ms": self.latency_ms, "down": self.down,
               "hang": self.hang, "fail_first": self.fail_first, "lose_response": self.lose_response})
        .to_string()
    }

    /// Merges a partial object; refuses unknown knobs and wrong types.
    fn merge(&mut self, body: &str) -> Result<(), String> {
        let Ok(Value::Object(o)) = serde_json::from_str::<Value>(body) else {
            return Err("send a JSON object".into());
        };
        let mut next = self.clone();
        for (k, v) in o {
            let bad = || format!("{k}: wrong value {v}");
            match k.as_str() {
                "error_rate" => {
                    next.error_rate = v
                        .as_f64()
                        .filter(|r| (0.0..=1.0).contains(r))
                        .ok_or_else(bad)?
                }
                "latency_ms" => next.latency_ms = v.as_u64().ok_or_else(bad)?,
                "fail_first" => next.fail_first = v.as_u64().ok_or_else(bad)?,
                "down" => next.down = v.as_bool().ok_or_else(bad)?,
                "hang" => next.hang = v.as_bool().ok_or_else(bad)?,
                "lose_response" => next.lose_response = v.as_bool().ok_or_else(bad)?,
                _ => return Err(format!("unknown knob {k}")),
            }
        }
        *self = next;
        Ok(())
    }
}

/// Reads one request (head and `content-length` body); `None` when the peer is gone.
fn read_request(conn: &mut TcpStream) -> Option<(String, String, String)> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|n| *n > 0)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok().filter(|n| *n > 0)?;
        if h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some((method, path, String::from_utf8_lossy(&body).into_owned()))
}

fn answer(conn: &mut TcpStream, status: u16, body: &str) -> bool {
    conn.write_all(
        format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .is_ok()
}

/// Serves every connection on its own thread with `handle(request) → keep going`.
fn listen(
    handle: impl Fn(&mut TcpStream, (String, String, String)) -> bool + Send + Sync + 'static,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let handle = handle.clone();
            std::thread::spawn(move || {
                while let Some(req) = read_request(&mut conn) {
                    if !handle(&mut conn, req) {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A sample app (answers `name`, or fails as its knobs say) and its knobs.
fn sample(name: &'static str) -> (SocketAddr, SocketAddr) {
    let fault = Arc::new(Mutex::new(Fault::CLEAR));
    let owed = Arc::new(Mutex::new(0.0f64));
    let f = fault.clone();
    let app = listen(move |conn, (_, path, _)| {
        // The proxy's health probe is not traffic: it is never failed.
        if path == "/health" {
            return answer(conn, 200, "ok");
        }
        let now = f.lock().unwrap().clone();
        if now.down || now.lose_response {
            return false;
        }
        if now.hang {
            std::thread::sleep(Duration::from_secs(30));
            return false;
        }
        std::thread::sleep(Duration::from_millis(now.latency_ms));
        let fail = {
            let mut s = f.lock().unwrap();
            let mut o = owed.lock().unwrap();
            *o += s.error_rate;
            if s.fail_first > 0 {
                s.fail_first -= 1;
                true
            } else if *o >= 1.0 {
                *o -= 1.0;
                true
            } else {
                false
            }
        };
        if fail {
            answer(conn, 503, "{\"error\":\"injected\"}")
        } else {
            answer(conn, 200, name)
        }
    });
    let knobs = listen(move |conn, (method, path, body)| {
        let mut s = fault.lock().unwrap();
        match (method.as_str(), path.as_str()) {
            ("GET", "/fault") => answer(conn, 200, &s.json()),
            ("POST", "/fault/clear") => {
                *s = Fault::CLEAR;
                answer(conn, 200, &s.json())
            }
            ("POST", "/fault") => match s.merge(&body) {
                Ok(()) => answer(conn, 200, &s.json()),
                Err(e) => answer(conn, 400, &json!({ "error": e }).to_string()),
            },
            _ => answer(conn, 404, "{}"),
        }
    });
    (app, knobs)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_nodelay(true).unwrap();
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").as_bytes(),
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (
        status,
        out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned(),
    )
}

/// Sum of `hopwise_requests_total` sent outbound to `to`, at the proxy whose admin is `admin`.
fn outbound_requests(admin: SocketAddr, to: &str) -> u64 {
    requests(admin, "outbound", to)
}

/// What a proxy counted in `hopwise_requests_total` for one direction and service.
fn requests(admin: SocketAddr, direction: &str, service: &str) -> u64 {
    let (_, text) = get(admin, "/metrics");
    text.lines()
        .filter(|l| {
            l.starts_with("hopwise_requests_total{")
                && l.contains(&format!("direction=\"{direction}\""))
        })
        .filter(|l| l.contains(&format!("service=\"{service}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn until(what: &str, limit: Duration, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !pred() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running mesh with the dashboard.
struct Mesh {
    _procs: Vec<Proc>,
    _dir: tempfile::TempDir,
    dashboard: SocketAddr,
    /// (service, admin address) of each proxy.
    admins: Vec<(&'static str, SocketAddr)>,
    /// a's local ports for b and c.
    to_b: SocketAddr,
    to_c: SocketAddr,
    b_knobs: SocketAddr,
    c_knobs: SocketAddr,
}

fn mesh_up() -> Mesh {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("mesh.yaml"),
        "mesh: { name: dash, trust_domain: dash.local }
services:
  a:
    entry: { timeout: 3s }
    calls:
      # 503s from b are retried (twice), so the dashboard has retries and a budget to show.
      b:
        timeout: 2s
        retries:
          on: [connect-failure, refused-stream, reset-before-request, retriable-status-codes]
          status_codes: [503]
      c: { timeout: 2s }
  b: {}
  c: {}
",
    )
    .unwrap();
    let (b_app, b_knobs) = sample("b");
    let (c_app, c_knobs) = sample("c");
    let (b_in, c_in) = (free(), free());
    let samples = json!({"mesh": d.join("mesh.yaml"), "services": {
        "a": {"sample": null, "copies": []},
        "b": {"sample": "inventory", "copies": [{"copy": 0, "app": b_app.to_string(), "knobs": b_knobs.to_string(), "inbound": b_in.to_string()}]},
    }});
    std::fs::write(d.join("samples.json"), samples.to_string()).unwrap();
    let (server, dashboard) = (free(), free());
    let path = |p: &str| d.join(p).to_str().unwrap().to_owned();
    let mut procs = vec![spawn(&[
        "control",
        "--config",
        &path("mesh.yaml"),
        "--state",
        &path("state"),
        "--listen",
        &server.to_string(),
        "--dashboard",
        &dashboard.to_string(),
        "--samples",
        &path("samples.json"),
    ])];
    let control = format!("https://{server}");
    let mut admins = Vec::new();
    for (service, inbound, app) in [("b", b_in, b_app), ("c", c_in, c_app)] {
        let admin = free();
        procs.push(spawn(&[
            "proxy",
            "--control",
            &control,
            "--control-ca",
            &path("state/ca.pem"),
            "--token-file",
            &path(&format!("state/tokens/{service}")),
            "--service",
            service,
            "--inbound",
            &inbound.to_string(),
            "--app",
            &app.to_string(),
            "--admin",
            &admin.to_string(),
            "--cache",
            &path(&format!("cache-{service}")),
            "--health-path",
            "/health",
        ]));
        admins.push((service, admin));
    }
    let (to_b, to_c, a_admin) = (free(), free(), free());
    procs.push(spawn(&[
        "proxy",
        "--control",
        &control,
        "--control-ca",
        &path("state/ca.pem"),
        "--token-file",
        &path("state/tokens/a"),
        "--service",
        "a",
        "--upstream",
        &format!("b={to_b}"),
        "--upstream",
        &format!("c={to_c}"),
        "--admin",
        &a_admin.to_string(),
        "--cache",
        &path("cache-a"),
    ]));
    admins.push(("a", a_admin));
    // Both upstreams registered, healthy and known to a.
    until("a reaches b and c", Duration::from_secs(30), || {
        get(to_b, "/").1 == "b" && get(to_c, "/").1 == "c"
    });
    Mesh {
        _procs: procs,
        _dir: dir,
        dashboard,
        admins,
        to_b,
        to_c,
        b_knobs,
        c_knobs,
    }
}

fn traffic(m: &Mesh, to_b: usize, to_c: usize) {
    for _ in 0..to_b {
        assert_eq!(get(m.to_b, "/"), (200, "b".to_owned()));
    }
    for _ in 0..to_c {
        assert_eq!(get(m.to_c, "/"), (200, "c".to_owned()));
    }
}

fn admin_of(m: &Mesh, service: &str) -> SocketAddr {
    m.admins.iter().find(|(s, _)| *s == service).unwrap().1
}

#[test]
fn the_dashboard_api_shows_what_the_proxies_count() {
    let m = mesh_up();
    traffic(&m, 25, 10);
    let a = admin_of(&m, "a");
    let (want_b, want_c) = (outbound_requests(a, "b"), outbound_requests(a, "c"));
    assert!(want_b >= 25 && want_c >= 10, "{want_b} {want_c}");
    let mut graph = Value::Null;
    until(
        "the dashboard shows a's counts",
        Duration::from_secs(30),
        || {
            graph = serde_json::from_str(&get(m.dashboard, "/api/graph").1).unwrap_or(Value::Null);
            let edge = |to: &str| {
                graph["edges"]
                    .as_array()
                    .and_then(|es| es.iter().find(|e| e["from"] == "a" && e["to"] == to))
                    .map(|e| e["requests"].as_u64())
            };
            edge("b") == Some(Some(want_b)) && edge("c") == Some(Some(want_c))
        },
    );
    let ab = graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["to"] == "b")
        .unwrap();
    // Failures are what a's proxy counted (a no-endpoint answer while b was still starting is
    // one); the success rate is the rest.
    let (_, text) = get(a, "/metrics");
    let count = |class: &str| -> u64 {
        text.lines()
            .filter(|l| {
                l.starts_with("hopwise_responses_total{") && l.contains("direction=\"outbound\"")
            })
            .filter(|l| l.contains("service=\"b\"") && l.contains(&format!("class=\"{class}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    assert_eq!(ab["failures"].as_u64(), Some(count("5xx")), "{ab}");
    assert!(ab["success"].as_f64().unwrap() > 0.5, "{ab}");
    let failed_before = count("5xx");
    let retried_before = ab["retries"]["retriable-status-codes"]
        .as_u64()
        .unwrap_or(0);
    assert!(ab["p99_ms"].as_f64().unwrap() > 0.0);
    assert!(ab["proxy_p50_ms"].as_f64().unwrap() > 0.0, "{ab}");
    // Every proxy is read, a's too although it has no inbound port (it never registers).
    for s in graph["services"].as_array().unwrap() {
        assert_eq!(s["proxies"][0]["metrics"], "ok", "{s}");
    }
    let b = graph["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "b")
        .unwrap();
    assert_eq!(b["proxies"][0]["healthy"], true);
    // What reached b's proxy: not a's outbound count, which also holds the start-up probes a's
    // proxy answered itself before b registered (seven of them on a fresh, slow machine).
    assert_eq!(
        b["stats"]["requests"].as_u64(),
        Some(requests(admin_of(&m, "b"), "inbound", "b"))
    );

    // A fault set through the dashboard reaches the sample, and the edge shows what followed.
    let mut s = TcpStream::connect(m.dashboard).unwrap();
    s.set_nodelay(true).unwrap();
    let body = r#"{"fail_first": 3}"#;
    s.write_all(format!("POST /api/fault/b/0 HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", m.dashboard, body.len()).as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(get(m.b_knobs, "/fault").1.contains("\"fail_first\":3"));
    // Three 503s: a's proxy tries the first request three times (503 is retried), all three
    // fail, and a gets one 503; the next requests succeed at once.
    let answers: Vec<u16> = (0..6).map(|_| get(m.to_b, "/").0).collect();
    assert_eq!(answers, [503, 200, 200, 200, 200, 200]);
    until(
        "the edge a → b counts the failure and the 2 retries",
        Duration::from_secs(30),
        || {
            let g: Value =
                serde_json::from_str(&get(m.dashboard, "/api/graph").1).unwrap_or(Value::Null);
            g["edges"].as_array().is_some_and(|es| {
                es.iter().any(|e| {
                    e["to"] == "b"
                        && e["failures"].as_u64() == Some(failed_before + 1)
                        && e["retries"]["retriable-status-codes"].as_u64()
                            == Some(retried_before + 2)
                        && e["requests"].as_u64() == Some(outbound_requests(a, "b"))
                })
            })
        },
    );
}

fn browser_tools(root: &Path) -> Result<(), String> {
    common::browser_missing(root).map_or(Ok(()), Err)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the browser tools are here; outside CI a missing one skips the test, saying so.
fn browser_ready() -> bool {
    match browser_tools(&repo()) {
        Ok(_) => true,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED the browser test: {why}; scripts/test installs what it needs");
            false
        }
        Err(why) => panic!("the browser test cannot run: {why}"),
    }
}

/// Runs `tests/browser/dashboard.mjs` with `cfg` (see the script for its fields); with
/// `screenshot`, passes `HOPWISE_SCREENSHOT` on (one test writes it, so two never race).
fn run_browser(cfg: &Value, screenshot: bool) {
    run_script(
        "dashboard.mjs",
        cfg,
        Some("HOPWISE_SCREENSHOT").filter(|_| screenshot),
    );
}

/// Runs `tests/browser/<script>` with `cfg`, passing the screenshot variable `shot` on, if any.
fn run_script(script: &str, cfg: &Value, shot: Option<&str>) {
    let root = repo();
    browser_tools(&root).unwrap();
    let mut cmd = Command::new("node");
    cmd.arg(root.join("tests/browser").join(script))
        .arg(cfg.to_string())
        .current_dir(&root);
    cmd.env_remove("HOPWISE_SCREENSHOT")
        .env_remove("HOPWISE_SCREENSHOT_CHARTS");
    if let Some((var, path)) = shot.and_then(|v| Some((v, std::env::var_os(v)?))) {
        // Relative to the repository, like the README's commands.
        cmd.env(var, root.join(path));
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the browser test failed:\n{text}");
    assert!(text.contains(" passed, 0 failed"), "{text}");
}

#[test]
fn the_dashboard_in_a_real_browser() {
    if !browser_ready() {
        return;
    }
    let m = mesh_up();
    traffic(&m, 40, 15);
    let proxies: Vec<Value> = m
        .admins
        .iter()
        .map(|(s, a)| json!({"service": s, "admin": a.to_string()}))
        .collect();
    run_browser(
        &json!({
            "url": format!("http://{}/", m.dashboard),
            "proxies": proxies,
            "edges": [["a", "b"], ["a", "c"]],
            "fault": {"service": "b", "copy": 0, "knobs": m.b_knobs.to_string()},
            "traffic": m.to_b.to_string(),
        }),
        false,
    );
    assert_eq!(get(m.to_c, "/").1, "c", "c is untouched by b's fault");
}

/// The charts over time against a's `/metrics` (`tests/browser/charts.mjs`): bursts through
/// a → c, healthy and then with c failing a quarter of its requests; between two charted
/// rounds, the points add up to what a's proxy counted. `HOPWISE_SCREENSHOT_CHARTS` saves the
/// charts (docs/dashboard-charts.png).
#[test]
fn the_charts_over_time_match_the_proxies_metrics() {
    if !browser_ready() {
        return;
    }
    let m = mesh_up();
    traffic(&m, 20, 20);
    run_script(
        "charts.mjs",
        &json!({
            "url": format!("http://{}/", m.dashboard),
            "from": "a",
            "to": "c",
            "admins": [admin_of(&m, "a").to_string()],
            "traffic": m.to_c.to_string(),
            "knobs": m.c_knobs.to_string(),
            "burst": 150,
        }),
        Some("HOPWISE_SCREENSHOT_CHARTS"),
    );
}

/// `hopwise up` runs the shop with its dashboard; the same browser test passes against it, the
/// fault set on inventory through the page.
#[test]
fn the_dashboard_of_hopwise_up_in_a_real_browser() {
    if !browser_ready() {
        return;
    }
    let root = repo();
    let cwd = tempfile::tempdir().unwrap();
    let dashboard = free();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .current_dir(cwd.path())
        .arg("up")
        .arg(root.join("examples/shop/mesh.yaml"))
        .args(["--control", &free().to_string()])
        .args(["--dashboard", &dashboard.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut up = Proc(child);
    // Its output is read to the end (so it never blocks on a full pipe); "ready" once it says so.
    let (ready_tx, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut shop = None;
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            // The one URL of the shop: its gateway's.
            if let Some(url) = line.strip_prefix("shop:") {
                shop = url.split_whitespace().next().map(str::to_owned);
            }
            if line == "Ctrl-C stops everything." {
                let _ = ready_tx.send(shop.take());
            }
        }
    });
    let shop = ready
        .recv_timeout(Duration::from_secs(120))
        .expect("hopwise up never said it was running")
        .expect("hopwise up printed no URL for the shop");
    let gateway = shop
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let run = std::fs::read_dir(cwd.path().join(".hopwise"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let samples: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("samples.json")).unwrap()).unwrap();
    let services = samples["services"].as_object().unwrap();
    let proxies: Vec<Value> = services
        .iter()
        .flat_map(|(name, s)| {
            s["copies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["admin"].is_string())
                .map(move |c| json!({"service": name, "admin": c["admin"]}))
        })
        .collect();
    let graph: Value = serde_json::from_str(&get(dashboard, "/api/graph").1).unwrap();
    let edges: Vec<Value> = graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["in_mesh"] == true)
        .map(|e| json!([e["from"], e["to"]]))
        .collect();
    assert!(edges.len() >= 3, "the shop's calls: {edges:?}");
    // The load goes in by the shop's one URL, its gateway (as up's --load does), so every edge
    // from the front door down carries it; the fault is set on inventory, at the bottom.
    run_browser(
        &json!({
            "url": format!("http://{dashboard}/"),
            "proxies": proxies,
            "edges": edges,
            "fault": {"service": "inventory", "copy": 0, "knobs": services["inventory"]["copies"][0]["knobs"]},
            "traffic": gateway,
            "warmup": 30,
            // Not the alphabet's order (checkout, frontend, pricing): the chain's.
            "chain": [["frontend", "checkout"], ["checkout", "pricing"], ["pricing", "inventory"]],
        }),
        true,
    );
    // Ctrl-C: up stops everything it started.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(up.0.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    assert!(up.0.wait().unwrap().success(), "up did not stop cleanly");
}

#[test]
fn a_dashboard_beyond_loopback_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mesh.yaml"), "services: { a: {} }\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(["control", "--config"])
        .arg(dir.path().join("mesh.yaml"))
        .arg("--state")
        .arg(dir.path().join("state"))
        .args(["--listen", &free().to_string(), "--dashboard", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback address only"));
    assert!(!dir.path().join("state").exists(), "nothing written");
}
