//! A captured `hopwise up` seen from the tests that run one as root (`up_captured.rs`,
//! `up_command.rs`): started inside the test's [`Host`] namespace, asked over connections made
//! there, and checked for what it recorded and what it left behind.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::free;
use super::netns::Host;
use super::up::Up;

/// `hopwise up FILE EXTRA…` inside `host`, in `cwd`, its records under `state` and its
/// stderr in `cwd/log`; once it is ready.
pub fn start_up(
    host: &Host,
    cwd: &Path,
    state: &Path,
    log: &str,
    file: &Path,
    extra: &[&str],
) -> Up {
    let (control, dashboard) = (free().to_string(), free().to_string());
    let state = state.display().to_string();
    let child = host
        .hopwise(&["up", file.to_str().unwrap()])
        .args(extra)
        .args(["--control", &control, "--dashboard", &dashboard])
        .args(["--state", &state])
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(cwd.join(log)).unwrap())
        .spawn()
        .unwrap();
    Up::ready_logged(child, Some(cwd.join(log)))
}

/// `GET path` at `addr`, connected from inside `host`; the whole answer.
pub fn get(host: &Host, addr: SocketAddr, path: &str) -> String {
    let netns = PathBuf::from(format!("/run/netns/{}", host.name));
    let mut s: TcpStream = hopwise_proxy::capture::in_netns(Some(&netns), || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(5))
    })
    .unwrap()
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Captured connections a proxy sent to a service (its `/metrics`).
pub fn captured_to_services(host: &Host, admin: SocketAddr) -> u64 {
    captured(host, admin, "service")
}

/// Captured connections of one `outcome` at the proxy whose admin port is `admin`.
pub fn captured(host: &Host, admin: SocketAddr, outcome: &str) -> u64 {
    let label = format!("outcome=\"{outcome}\"");
    get(host, admin, "/metrics")
        .lines()
        .filter(|l| l.starts_with("hopwise_captured_connections_total"))
        .filter(|l| l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The ids of the captured copies recorded under `state` now.
pub fn recorded(state: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(state.join("runs"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_suffix(".json").map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// What of run `id` is still there: its namespace, hosts directory, record, and the host's end
/// of its link (in the test's host namespace or the machine's).
pub fn left_of(host: &Host, state: &Path, id: &str) -> Vec<String> {
    let mut left = Vec::new();
    for p in [
        format!("/run/netns/hopwise-{id}"),
        format!("/etc/netns/hopwise-{id}"),
        state.join(format!("runs/{id}.json")).display().to_string(),
        // `hopwise run`'s proxy log (docs/capture.md: a run's files are removed).
        state
            .join(format!("runs/{id}.proxy.stderr"))
            .display()
            .to_string(),
    ] {
        if Path::new(&p).exists() {
            left.push(p);
        }
    }
    let link = format!("hw{id}h");
    if host.links().contains(&link) || Path::new("/sys/class/net").join(&link).exists() {
        left.push(format!("link {link}"));
    }
    left
}

/// Nothing of any of `ids` is left (namespaces go a moment after their last process: polled).
pub fn assert_nothing_left(host: &Host, state: &Path, ids: &[String]) {
    let all = || -> Vec<String> { ids.iter().flat_map(|id| left_of(host, state, id)).collect() };
    let start = Instant::now();
    while !all().is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(all(), Vec::<String>::new(), "left behind");
}
