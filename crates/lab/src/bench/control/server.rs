//! The control plane under test: by default the real `hopwise control` (this same executable)
//! as a child process, so its memory is its own; with `--in-process` on its own runtime inside
//! this process. Either way: its address, its `ca.pem` and admin token, each service's join
//! token, and what `/proc` says of it (memory, CPU time).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use hopwise_control::api;
use hopwise_control::client;
use hopwise_control::conn::Limits;
use hopwise_control::plane::{ConfigFile, Options, Plane};
use hopwise_control::store::{Store, TOKENS_DIR};

use super::BenchArgs;
use super::mesh::{SHARED, service_name};
use super::report::Machine;
use crate::error::{LabError, io};
use crate::processes::procfs;

/// The bench's connection deadlines (see [`bench_limits`]).
const BENCH_IDLE: Duration = Duration::from_secs(3600);

/// Each service with its join token.
pub(super) type Tokens = Vec<(String, String)>;

/// The control plane, how to reach it, each service's join token.
pub(super) type Started = (Server, client::Server, Tokens);

/// A child process that is stopped however the benchmark ends.
pub(super) struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The control plane under test.
pub(super) enum Server {
    Child {
        child: ChildGuard,
        /// Where its stderr goes.
        stderr: PathBuf,
        _dir: tempfile::TempDir,
    },
    InProcess {
        running: Option<api::Running>,
        runtime: tokio::runtime::Runtime,
        _dir: tempfile::TempDir,
    },
}

/// The control plane could not start, for this reason.
pub(super) fn start_err(e: &dyn std::fmt::Display) -> LabError {
    LabError::Failed(format!("cannot start the control plane: {e}"))
}

impl Server {
    /// The control plane's process (this one when it runs in-process).
    fn pid(&self) -> u32 {
        match self {
            Server::Child { child, .. } => child.0.id(),
            Server::InProcess { .. } => std::process::id(),
        }
    }

    pub(super) fn in_process(&self) -> bool {
        matches!(self, Server::InProcess { .. })
    }

    pub(super) fn rss(&self) -> u64 {
        procfs::vm_rss_kib(self.pid()).unwrap_or(0)
    }

    pub(super) fn hwm(&self) -> u64 {
        procfs::vm_hwm_kib(self.pid()).unwrap_or(0)
    }

    /// CPU time used so far (user + system, every thread), in clock ticks.
    pub(super) fn cpu_ticks(&self) -> u64 {
        procfs::cpu_ticks(self.pid()).map_or(0, procfs::Ticks::total)
    }

    /// If the child has exited: how, and the last lines of its stderr (its own message).
    pub(super) fn exited(&mut self) -> Option<String> {
        let Server::Child { child, stderr, .. } = self else {
            return None;
        };
        let status = child.0.try_wait().ok().flatten()?;
        Some(format!(
            "the control plane (pid {}) exited mid-run ({status}){}",
            child.0.id(),
            said(stderr).map_or_else(String::new, |s| format!("; it said:\n{s}"))
        ))
    }

    pub(super) fn stop(self) {
        match self {
            Server::Child { child, .. } => drop(child),
            Server::InProcess {
                mut running,
                runtime,
                ..
            } => {
                if let Some(r) = running.take() {
                    let _ = runtime.block_on(r.shutdown());
                }
                runtime.shutdown_background();
            }
        }
    }
}

/// Every simulated proxy connects from 127.0.0.1: the caps on connections make room for all of
/// them (and the admin's), and they connect all at once before their first call, which may come
/// minutes later with many proxies.
fn bench_limits(args: &BenchArgs) -> Limits {
    let defaults = Limits::default();
    let room = args.proxies.div_ceil(args.per_connection) + 16;
    Limits {
        connections_per_address: defaults.connections_per_address.max(room),
        connections: defaults.connections.max(room),
        first_request: BENCH_IDLE,
        idle: BENCH_IDLE,
        ..defaults
    }
}

/// Starts the control plane; returns it, how to reach it (its address, its `ca.pem` and admin
/// token), and each service's join token.
pub(super) fn start(args: &BenchArgs, mesh: &str) -> Result<Started, LabError> {
    let dir = tempfile::tempdir().map_err(|e| start_err(&e))?;
    let services: Vec<String> = std::iter::once(SHARED.to_owned())
        .chain((0..args.services).map(service_name))
        .collect();
    if args.in_process {
        start_in_process(args, mesh, dir, &services)
    } else {
        start_child(args, mesh, dir, &services)
    }
}

fn start_in_process(
    args: &BenchArgs,
    mesh: &str,
    dir: tempfile::TempDir,
    services: &[String],
) -> Result<Started, LabError> {
    let state = dir.path().join("state");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("control-plane")
        .build()
        .map_err(io("cannot start the runtime"))?;
    let store = Store::open(&state).map_err(|e| start_err(&e))?;
    let options = Options {
        config: Some(ConfigFile {
            name: "bench.yaml".into(),
            text: mesh.to_owned(),
        }),
        ca_files: None,
        cert_lifetime: hopwise_control::ca::DEFAULT_LIFETIME,
    };
    let started = Plane::start(store, options, SystemTime::now()).map_err(|e| start_err(&e))?;
    let tokens = services
        .iter()
        .map(|s| {
            let t = started.plane.token(s).unwrap_or_default().to_owned();
            (s.clone(), t)
        })
        .collect();
    let running = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| start_err(&e))?;
        api::spawn_with(started.plane, listener, bench_limits(args)).map_err(|e| start_err(&e))
    })?;
    let access = client::Server::from_state(&running.addr.to_string(), &state)?;
    let server = Server::InProcess {
        running: Some(running),
        runtime,
        _dir: dir,
    };
    Ok((server, access, tokens))
}

fn start_child(
    args: &BenchArgs,
    mesh: &str,
    dir: tempfile::TempDir,
    services: &[String],
) -> Result<Started, LabError> {
    let state = dir.path().join("state");
    let exe = std::env::current_exe().map_err(|e| start_err(&e))?;
    let config = dir.path().join("bench.yaml");
    std::fs::write(&config, mesh).map_err(|e| start_err(&e))?;
    let limits = bench_limits(args);
    // Its stderr goes to a file, so a child that fails before it listens is heard (its own
    // message, not "did not say where it listens").
    let stderr = dir.path().join("control.stderr");
    let stderr_file = std::fs::File::create(&stderr).map_err(|e| start_err(&e))?;
    let child = Command::new(&exe)
        .arg("control")
        .arg("--config")
        .arg(&config)
        .arg("--state")
        .arg(&state)
        .args(["--listen", "127.0.0.1:0"])
        .arg("--max-connections-per-address")
        .arg(limits.connections_per_address.to_string())
        .arg("--max-connections")
        .arg(limits.connections.to_string())
        .args(["--first-request-timeout", "1h", "--idle-timeout", "1h"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr_file)
        .spawn()
        .map_err(|e| start_err(&format!("{}: {e}", exe.display())))?;
    let mut child = ChildGuard(child);
    let addr = listening_on(&mut child, &exe, &stderr)?;
    let tokens = services
        .iter()
        .map(|s| (s.clone(), read_token(&state, s)))
        .collect();
    let access = client::Server::from_state(&addr.to_string(), &state)?;
    let server = Server::Child {
        child,
        stderr,
        _dir: dir,
    };
    Ok((server, access, tokens))
}

/// Where the child listens, from its first line: `hopwise control: listening on
/// 127.0.0.1:PORT (…)`. If it says nothing of the kind, its own words (the last lines of its
/// stderr, in `stderr`) are the error.
fn listening_on(child: &mut ChildGuard, exe: &Path, stderr: &Path) -> Result<SocketAddr, LabError> {
    let mut line = String::new();
    if let Some(out) = child.0.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse::<SocketAddr>().ok());
    if let Some(a) = addr {
        return Ok(a);
    }
    // It has exited, or is about to (its stderr is complete then): a moment, not forever.
    for _ in 0..40 {
        if !matches!(child.0.try_wait(), Ok(None)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err(start_err(&match said(stderr) {
        None => format!(
            "{} control did not say where it listens (it printed {line:?}); run the benchmark \
             from the hopwise binary, or pass --in-process",
            exe.display()
        ),
        Some(tail) => format!("it said:\n{tail}"),
    }))
}

/// The last 20 lines the child wrote to its stderr (`None` when it wrote nothing).
fn said(stderr: &Path) -> Option<String> {
    let said = std::fs::read_to_string(stderr).unwrap_or_default();
    let tail: Vec<&str> = said.lines().rev().take(20).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    (!tail.is_empty()).then(|| tail.join("\n"))
}

/// The join token the child wrote for `service` (empty when it wrote none).
fn read_token(state: &Path, service: &str) -> String {
    let path: PathBuf = state.join(TOKENS_DIR).join(service);
    std::fs::read_to_string(&path)
        .map(|t| t.trim().to_owned())
        .unwrap_or_default()
}

/// Where the figures were taken.
pub(super) fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "unknown".to_owned(), |m| m.trim().to_owned());
    let memory_kib = procfs::mem_total_kib().unwrap_or(0);
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        memory_gib: (memory_kib as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| std::env::consts::OS.to_owned(), |k| k.trim().to_owned()),
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A child that dies says so in its own words, with how it ended.
    #[test]
    fn a_child_that_exits_is_reported_with_its_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("control.stderr");
        let child = Command::new("sh")
            .args(["-c", "echo 'cannot allocate: out of memory' >&2; exit 3"])
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut server = Server::Child {
            child: ChildGuard(child),
            stderr,
            _dir: dir,
        };
        let why = loop {
            if let Some(why) = server.exited() {
                break why;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(why.contains("exited mid-run (exit status: 3)"), "{why}");
        assert!(
            why.ends_with("it said:\ncannot allocate: out of memory"),
            "{why}"
        );
    }
}
