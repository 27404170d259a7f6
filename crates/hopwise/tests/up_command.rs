//! `hopwise up` running users' own commands (`services.<name>.run`; docs/up.md, "Your own
//! command"), for real.
//!
//! Without capture: a small Python server (two copies) is told its port (`PORT`, `HOPWISE_APP`,
//! `{port}`) and where its callee is (`HOPWISE_UPSTREAM_STORE`, the proxy's local port), and
//! calls a `leaf` sample through its proxy: a request to its port answers with the leaf's
//! answer, and its proxy counted the call. Ctrl-C stops it; a copy that exits is reported and
//! the rest keep running; a SIGKILLed `up` takes its commands with it (`PR_SET_PDEATHSIG`).
//!
//! Captured, as root: the seed's loan-thin (`examples/library/loan-thin.mjs`, node) calls
//! `http://fee/…` by name from its own namespace, through loan's proxy to the fee sample, and
//! nothing of the run is left afterwards. As in `up_captured.rs`, everything runs inside a
//! namespace the test made, with a run directory and `--state` of its own.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;
use common::captured::{assert_nothing_left, captured_to_services, get, recorded, start_up};
use common::free;
use common::netns::Host;
use common::up::{Up, addr, samples, until_gone};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The caller: answers `GET /x` with what `GET /x` at its upstream answered; `/exit` ends it
/// with status 3. It checks what `up` told it, and exits 9 if anything is missing.
const WEB: &str = r#"
import http.server, os, sys, urllib.request
store = os.environ["HOPWISE_UPSTREAM_STORE"]
host, port = os.environ["HOPWISE_APP"].rsplit(":", 1)
if sys.argv[1:] != [os.environ["PORT"]] or port != os.environ["PORT"]:
    sys.exit(9)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/exit":
            os._exit(3)
        with urllib.request.urlopen(f"http://{store}{self.path}", timeout=10) as r:
            body = r.read()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("x-greeting", os.environ["GREETING"])
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print(f"web listening on {host}:{port}", flush=True)
http.server.ThreadingHTTPServer((host, int(port)), H).serve_forever()
"#;

const MESH: &str = "mesh: { name: cmd }\nservices:\n  web:\n    run:\n      command: [python3, web.py, '{port}']\n      env: { GREETING: hello }\n    copies: 2\n    calls: { store: {} }\n  store: { sample: leaf }\n";

fn http(addr: SocketAddr, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return "no connection".into();
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The sum of the series of `name` whose labels contain every one of `labels`.
fn metric(text: &str, name: &str, labels: &[&str]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The pids `up` recorded whose command line names `word` (the users' commands), sorted.
fn commands(run: &Path, word: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(run.join("pids")).unwrap();
    let mut pids: Vec<u32> = text
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(word))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// `hopwise up FILE` in `cwd`, its stderr in `cwd/log`, once it is ready.
fn start(cwd: &Path, file: &Path, log: &str) -> Up {
    let child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .current_dir(cwd)
        .arg("up")
        .arg(file)
        .args(["--control", &free().to_string()])
        .args(["--dashboard", &free().to_string()])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(cwd.join(log)).unwrap())
        .spawn()
        .unwrap();
    Up::ready_logged(child, Some(cwd.join(log)))
}

#[test]
fn a_command_calls_its_callee_through_its_proxy_and_goes_with_up() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    // The mesh file and its command side by side, `up` started elsewhere: the command runs in
    // the file's directory.
    let files = cwd.join("mesh");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("web.py"), WEB).unwrap();
    let file = files.join("mesh.yaml");
    std::fs::write(&file, MESH).unwrap();
    let run = cwd.join(".hopwise/cmd");

    let mut up = start(cwd, &file, "up1.stderr");
    assert!(
        up.lines.lock().unwrap().iter().any(|l| l.contains(" run ")),
        "the table shows the command's kind"
    );
    let s = samples(&run);
    let web = |copy: usize, what: &str| addr(&s["services"]["web"]["copies"][copy][what]);
    for copy in 0..2 {
        let answer = http(web(copy, "app"), "/asked");
        assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
        assert!(answer.contains("x-greeting: hello"), "{answer}");
        assert!(answer.contains(r#""service":"store""#), "{answer}");
        let seen = http(web(copy, "admin"), "/metrics");
        let calls = metric(
            &seen,
            "hopwise_requests_total",
            &["direction=\"outbound\"", "service=\"store\""],
        );
        assert!(
            calls >= 1,
            "web copy {copy}'s proxy carried its call:\n{seen}"
        );
    }
    let out = std::fs::read_to_string(run.join("logs/web-0.run.stdout")).unwrap();
    assert!(out.starts_with("web listening on 127.0.0.1:"), "{out}");
    let pids = commands(&run, "web.py");
    assert_eq!(pids.len(), 2, "a process per copy");
    let status = up.sigint();
    assert!(status.success(), "up after Ctrl-C: {status}");
    assert_eq!(
        until_gone(&pids),
        Vec::<u32>::new(),
        "commands left running"
    );

    // A copy whose command ends is reported; the other keeps serving.
    let mut up = start(cwd, &file, "up2.stderr");
    let s = samples(&run);
    let web = |copy: usize| addr(&s["services"]["web"]["copies"][copy]["app"]);
    let pids = commands(&run, "web.py");
    assert_eq!(pids.len(), 2);
    let _ = http(web(0), "/exit");
    let start = Instant::now();
    let log = loop {
        let log = std::fs::read_to_string(cwd.join("up2.stderr")).unwrap();
        if log.contains("web-0.run exited (exit status: 3)") {
            break log;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(log.contains("the rest keeps running"), "{log}");
    assert!(http(web(1), "/again").contains(r#""service":"store""#));
    // SIGKILL: `up` cannot stop anything, yet its commands go with it.
    let _ = up.signal(nix::sys::signal::Signal::SIGKILL);
    assert_eq!(
        until_gone(&pids),
        Vec::<u32>::new(),
        "a command outlived up"
    );
}

/// `hopwise fault` on a service whose app is the user's own (no knobs): the fault goes into the
/// mesh file the run's control plane serves, and web's proxies inject it into what reaches web
/// through the gateway; `--clear` takes it out; a knob only a sample has is refused, saying so.
#[test]
fn a_users_own_app_gets_a_mesh_fault_and_loses_it() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::write(cwd.join("web.py"), WEB).unwrap();
    let file = cwd.join("mesh.yaml");
    std::fs::write(&file, MESH).unwrap();
    let run = cwd.join(".hopwise/cmd");
    let mut up = start(cwd, &file, "up.stderr");
    let log = std::fs::read_to_string(cwd.join("up.stderr")).unwrap();
    let gateway: SocketAddr = (log.split("on http://").nth(1))
        .and_then(|rest| rest.split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no gateway announced:\n{log}"));
    let through = |want: &str| {
        let t = Instant::now();
        loop {
            let answer = http(gateway, "/asked");
            if answer.starts_with(want) {
                return answer;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "never {want}: {answer}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    through("HTTP/1.1 200");
    let fault = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
            .current_dir(cwd)
            .arg("fault")
            .args(args)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, out, err) = fault(&["web", "--error-rate", "1.0"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(r#"web: fault {"abort":{"status":503,"percent":100}}"#),
        "{out}"
    );
    let refused = through("HTTP/1.1 503");
    assert!(refused.contains("x-hopwise-error: fault"), "{refused}");
    let served = std::fs::read_to_string(run.join("mesh.yaml")).unwrap();
    assert!(
        served.contains(r#""fault":{"abort""#),
        "the watched copy agrees: {served}"
    );
    let (code, out, err) = fault(&["web", "--clear"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("web: fault none"), "{out}");
    through("HTTP/1.1 200");
    let (code, _, err) = fault(&["web", "--down"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("`web` is your own app") && err.contains("not --down"),
        "{err}"
    );
    assert!(up.sigint().success());
}

#[test]
fn the_seeds_loan_thin_calls_the_fee_by_name_captured_and_leaves_nothing() {
    let host = Host::new();
    let dir = tempfile::tempdir().unwrap();
    let (cwd, state) = (dir.path(), dir.path().join("state"));
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/library/loan-thin.yaml");
    // Captured by the file's own switch (`mesh.capture.up: true`).
    let mut up = start_up(&host, cwd, &state, "up.stderr", &file, &[]);
    let ids = recorded(&state);
    assert_eq!(ids.len(), 1, "a namespace for loan's one copy: {ids:?}");
    let run = cwd.join(".hopwise/library");
    let s = samples(&run);
    let loan = |what: &str| addr(&s["services"]["loan"]["copies"][0][what]);
    assert!(!loan("app").ip().is_loopback(), "{}", loan("app"));
    let pids = commands(&run, "loan-thin.mjs");
    assert_eq!(pids.len(), 1);

    // The seed's measurement asks `/balance/U-41`; loan-thin asks the fee `GET /penalty/U-41`.
    let answer = get(&host, loan("app"), "/balance/U-41");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""action":"balance""#), "{answer}");
    assert!(
        answer.contains(r#"\"balance\":12.5"#),
        "the fee's answer: {answer}"
    );
    assert!(
        captured_to_services(&host, loan("admin")) > 0,
        "loan-thin reached the fee by name, through its proxy's capture listener"
    );
    let seen = get(&host, loan("admin"), "/metrics");
    let balance = metric(
        &seen,
        "hopwise_requests_total",
        &[
            "direction=\"outbound\"",
            "service=\"fee\"",
            "route=\"balance\"",
        ],
    );
    assert!(
        balance >= 1,
        "loan's proxy routed it as a balance read:\n{seen}"
    );

    let status = up.signal(nix::sys::signal::Signal::SIGINT);
    assert!(status.success(), "up after Ctrl-C: {status}");
    assert_nothing_left(&host, &state, &ids);
    assert_eq!(until_gone(&pids), Vec::<u32>::new());
}
