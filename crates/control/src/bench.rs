//! `hopwise control bench`: one control plane against many simulated proxies (issue #5's scale
//! benchmark). Every simulated proxy lives in this process with its own gRPC connection and does
//! what a real proxy does, in order: `Issue` (a CSR made beforehand, so the figure is the
//! control plane's signing rate, not this process's key generation), `Subscribe` (and `Ack`s
//! every snapshot, as `hopwise proxy` does), `Register` its share of the copies, `SetHealth`.
//! Then it measures, over several rounds, how long a configuration change (`Apply`) and a
//! registry change (a new copy of a service every other service calls turns healthy) take to
//! reach every subscriber: from the call to each subscriber's receipt of the snapshot that
//! carries it (p50, p99, max — the max being the last subscriber). Last, the sustainable rate
//! of health changes: the copies of `svc-001` (called by `svc-000` only) turn unhealthy and
//! healthy again, `--rounds` times, as fast as the calls go; the time runs until every caller
//! has the final state, and the control plane's CPU time is divided by the changes.
//!
//! Subscribers ask for deltas, as `hopwise proxy` does, and merge them (`plane::delta`); with
//! `--whole` they ask for whole snapshots every time, the protocol before deltas. Each change
//! reports the bytes of the snapshots subscribers received (protobuf, as sent) and the control
//! plane's CPU time.
//!
//! The control plane is, by default, a child process — the real `hopwise control` (this same
//! executable) — so its memory is its own: VmRSS and VmHWM from `/proc/<pid>/status`. With
//! `--in-process` it runs on its own runtime inside this process and the memory figures are
//! this process's, simulated proxies included.
//!
//! The mesh: `--services` services `svc-000`, `svc-001`, … each calling `shared` (so a copy of
//! `shared` joining changes every subscriber's snapshot), and each even-numbered service also
//! calling the next one (so the registered copies appear in snapshots too). Proxy `i` belongs to
//! service `i mod services`.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prost::Message;
use serde::Serialize;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::api;
use crate::client::{self, Client, ClientError};
use crate::pb;
use crate::plane::{ConfigFile, Options, Plane, delta};
use crate::store::{Store, TOKENS_DIR};

/// The service every other one calls.
const SHARED: &str = "shared";
/// The service whose copies flip health (`svc-001`: only `svc-000` calls it).
const PROBE: usize = 1;
/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;
/// Leases long enough that no renewal is needed while the benchmark runs.
const TTL_MS: u64 = 600_000;
/// How long any phase may take before the benchmark gives up.
const PHASE_LIMIT: Duration = Duration::from_secs(600);

/// `hopwise control bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Simulated proxies, each with its own connection, certificate and snapshot stream.
    #[arg(long, default_value_t = 1000)]
    pub proxies: usize,
    /// Copies registered in total, spread evenly over the proxies (and so over the services).
    #[arg(long, default_value_t = 10_000)]
    pub copies: usize,
    /// Services the proxies belong to (at most --proxies: every service has a proxy).
    #[arg(long, default_value_t = 100)]
    pub services: usize,
    /// Changes of each kind measured.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Calls in flight at once while issuing, registering and reporting health.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Run the control plane inside this process instead of as a child `hopwise control`
    /// (memory is then this process's, simulated proxies included).
    #[arg(long)]
    pub in_process: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Subscribers ask for whole snapshots every time, as proxies did before deltas (to compare
    /// the bytes sent).
    #[arg(long)]
    pub whole: bool,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot start the control plane: {0}")]
    Start(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{what} failed: {message}")]
    Call { what: &'static str, message: String },
    #[error("{0}")]
    Timeout(String),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

fn call(what: &'static str) -> impl Fn(tonic::Status) -> BenchError {
    move |s| BenchError::Call {
        what,
        message: format!("{:?}: {}", s.code(), s.message()),
    }
}

/// Milliseconds at three points of a distribution (nearest rank).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(samples: &[Duration]) -> Percentiles {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| -> f64 {
            if ms.is_empty() {
                return 0.0;
            }
            let rank = ((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len());
            round3(ms[rank - 1])
        };
        Percentiles {
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A batch of calls: how many, how long in all, the rate, and each call's latency.
#[derive(Debug, Clone, Serialize)]
pub struct Rate {
    pub count: usize,
    pub seconds: f64,
    pub per_second: f64,
    pub in_flight: usize,
    pub latency_ms: Percentiles,
}

impl Rate {
    fn of(count: usize, wall: Duration, in_flight: usize, latencies: &[Duration]) -> Rate {
        let seconds = wall.as_secs_f64();
        Rate {
            count,
            seconds: round3(seconds),
            per_second: if seconds > 0.0 {
                (count as f64 / seconds).round()
            } else {
                0.0
            },
            in_flight: in_flight.min(count),
            latency_ms: Percentiles::of(latencies),
        }
    }
}

/// How long one kind of change took to reach every subscriber.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    /// What was changed, and from which call the time is counted.
    pub change: String,
    pub rounds: usize,
    pub subscribers: usize,
    /// Every subscriber's receipt in every round, from the call.
    pub latency_ms: Percentiles,
    /// The last subscriber's receipt, per round.
    pub last_receipt_ms: Vec<f64>,
    /// Bytes of snapshots (protobuf, as sent) all subscribers received per change, on average.
    pub bytes_per_change: f64,
    /// The same, per subscriber.
    pub bytes_per_subscriber: f64,
    /// The control plane's CPU time (user + system) per change, from the call until 200 ms
    /// after the last subscriber had it (their acknowledgements included).
    pub cpu_ms_per_change: f64,
}

/// Health flips of one service's copies, as fast as they go: how many the plane sustains.
#[derive(Debug, Clone, Serialize)]
pub struct Flips {
    /// What was changed, and whom it concerns.
    pub change: String,
    /// SetHealth calls, each one changing an endpoint set.
    pub changes: usize,
    /// Subscribers whose snapshot holds the copies (they must see the final state).
    pub callers: usize,
    /// From the first call until every caller had the final state of the last pass.
    pub seconds: f64,
    pub per_second: f64,
    /// The control plane's CPU time (user + system) per change.
    pub cpu_ms_per_change: f64,
    /// Snapshots the callers received meanwhile (intermediate states coalesce).
    pub snapshots_to_callers: usize,
    /// Snapshots every other subscriber received meanwhile (their content never changed).
    pub snapshots_to_others: usize,
    /// Bytes of snapshots (as sent) received meanwhile, by everyone, per change.
    pub bytes_per_change: f64,
}

/// The control plane's memory, in KiB.
#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    /// Whose memory and where it was read.
    pub method: String,
    /// Serving, before any proxy connected.
    pub rss_before_kib: u64,
    /// Every proxy connected and subscribed, every copy registered and healthy.
    pub rss_loaded_kib: u64,
    /// After the measured changes.
    pub rss_end_kib: u64,
    /// The peak (VmHWM).
    pub hwm_kib: u64,
}

/// Where the figures were taken.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    /// `release` or `debug`: figures from a debug build are not figures.
    pub build: &'static str,
}

/// Everything measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    pub machine: Machine,
    /// `child process` or `in-process`.
    pub control_plane: String,
    pub proxies: usize,
    pub services: usize,
    pub copies: usize,
    /// Bytes of one snapshot as sent (protobuf), smallest and largest first snapshot.
    pub snapshot_bytes: [usize; 2],
    /// `deltas` (after each stream's first, whole, snapshot) or `whole` (`--whole`).
    pub snapshots: &'static str,
    /// CSRs signed.
    pub issue: Rate,
    /// Streams opened until every first snapshot arrived.
    pub subscribe: Rate,
    pub register: Rate,
    pub set_health: Rate,
    pub renew: Rate,
    pub memory: Memory,
    pub config_change: Spread,
    pub registry_change: Spread,
    /// `None` when `svc-001` holds no copy (one service, or fewer copies than proxies).
    pub health_flips: Option<Flips>,
    pub notes: Vec<String>,
}

/// The mesh file: `services` services calling `shared`; even ones also call the next one.
/// `variant` changes the timeout of every call to `shared` (a configuration change).
pub fn mesh_text(services: usize, variant: usize) -> String {
    let timeout = if variant.is_multiple_of(2) {
        "500ms"
    } else {
        "400ms"
    };
    let mut out = String::from(
        "# hopwise control bench: every service calls `shared`; even ones call the next one too\n\
         mesh: { name: bench, trust_domain: bench.local }\nservices:\n  shared: {}\n",
    );
    for i in 0..services {
        let next = if i.is_multiple_of(2) && i + 1 < services {
            format!(", {}: {{ timeout: 2s }}", service_name(i + 1))
        } else {
            String::new()
        };
        out.push_str(&format!(
            "  {}: {{ calls: {{ {SHARED}: {{ timeout: {timeout} }}{next} }} }}\n",
            service_name(i)
        ));
    }
    out
}

fn service_name(i: usize) -> String {
    format!("svc-{i:03}")
}

/// The address of registered copy `c` (never reached: the registry only records it).
fn copy_addr(c: usize) -> String {
    format!("10.{}.{}.{}:7001", (c >> 16) & 255, (c >> 8) & 255, c & 255)
}

fn status_kib(path: &str, field: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "unknown".to_owned(), |m| m.trim().to_owned());
    let memory_kib = status_kib("/proc/meminfo", "MemTotal:");
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

/// A child process that is stopped however the benchmark ends.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The control plane under test.
enum Server {
    Child {
        child: ChildGuard,
        _dir: tempfile::TempDir,
    },
    InProcess {
        running: Option<api::Running>,
        runtime: tokio::runtime::Runtime,
        _dir: tempfile::TempDir,
    },
}

impl Server {
    /// `/proc/<pid>/status` of the control plane.
    fn status_file(&self) -> String {
        match self {
            Server::Child { child, .. } => format!("/proc/{}/status", child.0.id()),
            Server::InProcess { .. } => "/proc/self/status".to_owned(),
        }
    }

    fn rss(&self) -> u64 {
        status_kib(&self.status_file(), "VmRSS:")
    }

    fn hwm(&self) -> u64 {
        status_kib(&self.status_file(), "VmHWM:")
    }

    /// CPU time used so far (user + system, every thread), in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let path = self.status_file().replace("/status", "/stat");
        let stat = std::fs::read_to_string(path).unwrap_or_default();
        // After the command's name in parentheses: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let field = |i: usize| -> u64 { fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0) };
        field(11) + field(12)
    }

    fn stop(self) {
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
fn bench_limits(args: &BenchArgs) -> crate::conn::Limits {
    let defaults = crate::conn::Limits::default();
    let room = args.proxies + 16;
    crate::conn::Limits {
        connections_per_address: defaults.connections_per_address.max(room),
        connections: defaults.connections.max(room),
        first_request: BENCH_IDLE,
        idle: BENCH_IDLE,
        ..defaults
    }
}

/// The bench's connection deadlines (see [`bench_limits`]).
const BENCH_IDLE: Duration = Duration::from_secs(3600);

/// Each service with its join token.
type Tokens = Vec<(String, String)>;

/// Starts the control plane; returns it, how to reach it (its address, its `ca.pem` and admin
/// token), and each service's join token.
fn start_server(
    args: &BenchArgs,
    mesh: &str,
) -> Result<(Server, client::Server, Tokens), BenchError> {
    let start_err = |e: &dyn std::fmt::Display| BenchError::Start(e.to_string());
    let dir = tempfile::tempdir().map_err(|e| start_err(&e))?;
    let state = dir.path().join("state");
    let services: Vec<String> = std::iter::once(SHARED.to_owned())
        .chain((0..args.services).map(service_name))
        .collect();
    if args.in_process {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("control-plane")
            .build()
            .map_err(BenchError::Runtime)?;
        let store = Store::open(&state).map_err(|e| start_err(&e))?;
        let started = Plane::start(
            store,
            Options {
                config: Some(ConfigFile {
                    name: "bench.yaml".into(),
                    text: mesh.to_owned(),
                }),
                ca_files: None,
                cert_lifetime: crate::ca::DEFAULT_LIFETIME,
            },
            SystemTime::now(),
        )
        .map_err(|e| start_err(&e))?;
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
        return Ok((
            Server::InProcess {
                running: Some(running),
                runtime,
                _dir: dir,
            },
            access,
            tokens,
        ));
    }
    let exe = std::env::current_exe().map_err(|e| start_err(&e))?;
    let config = dir.path().join("bench.yaml");
    std::fs::write(&config, mesh).map_err(|e| start_err(&e))?;
    let child = Command::new(&exe)
        .arg("control")
        .arg("--config")
        .arg(&config)
        .arg("--state")
        .arg(&state)
        .args(["--listen", "127.0.0.1:0"])
        .arg("--max-connections-per-address")
        .arg(bench_limits(args).connections_per_address.to_string())
        .arg("--max-connections")
        .arg(bench_limits(args).connections.to_string())
        .args(["--first-request-timeout", "1h", "--idle-timeout", "1h"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::Start(format!("{}: {e}", exe.display())))?;
    let mut child = ChildGuard(child);
    // `hopwise control: listening on 127.0.0.1:PORT (…)`
    let mut line = String::new();
    if let Some(out) = child.0.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse::<SocketAddr>().ok());
    let Some(addr) = addr else {
        return Err(BenchError::Start(format!(
            "{} control did not say where it listens (it printed {line:?}); run the benchmark \
             from the hopwise binary, or pass --in-process",
            exe.display()
        )));
    };
    let tokens = services
        .iter()
        .map(|s| {
            let path: PathBuf = state.join(TOKENS_DIR).join(s);
            let t = std::fs::read_to_string(&path)
                .map(|t| t.trim().to_owned())
                .unwrap_or_default();
            (s.clone(), t)
        })
        .collect();
    let access = client::Server::from_state(&addr.to_string(), &state)?;
    Ok((Server::Child { child, _dir: dir }, access, tokens))
}

/// Runs `f` on every item with at most `in_flight` at once. Returns each result (in the
/// items' order) with its latency, and the wall time of the whole batch.
async fn batch<T, O, F, Fut>(
    items: Vec<T>,
    in_flight: usize,
    f: F,
) -> Result<(Vec<O>, Vec<Duration>, Duration), BenchError>
where
    T: Send + 'static,
    O: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<O, BenchError>> + Send + 'static,
{
    let limit = Arc::new(Semaphore::new(in_flight.max(1)));
    let f = Arc::new(f);
    let started = Instant::now();
    let mut set = JoinSet::new();
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let permit = limit
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| BenchError::Start(e.to_string()))?;
        let f = f.clone();
        set.spawn(async move {
            let t = Instant::now();
            let out = f(item).await;
            drop(permit);
            out.map(|o| (i, o, t.elapsed()))
        });
    }
    let mut results: Vec<Option<(O, Duration)>> = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (i, o, d) = joined.map_err(|e| BenchError::Start(e.to_string()))??;
        results[i] = Some((o, d));
    }
    let wall = started.elapsed();
    let mut outs = Vec::with_capacity(n);
    let mut latencies = Vec::with_capacity(n);
    for (o, d) in results.into_iter().flatten() {
        outs.push(o);
        latencies.push(d);
    }
    Ok((outs, latencies, wall))
}

/// A simulated proxy.
#[derive(Clone)]
struct Sim {
    service: String,
    token: String,
    name: String,
    client: Client,
}

/// What a subscriber saw.
#[derive(Debug, Clone, Copy)]
struct Seen {
    proxy: usize,
    at: Instant,
    config_version: u64,
    /// Endpoints of `shared` in the snapshot.
    shared: usize,
    /// Endpoints of the flipping service (`svc-001`) in the snapshot.
    probe: usize,
    bytes: usize,
}

/// Opens `sim`'s stream (asking for deltas unless `whole`); every snapshot is merged onto the
/// last one received, as `hopwise proxy` does, reported on `seen` and acknowledged.
fn subscribe(idx: usize, sim: Sim, whole: bool, seen: mpsc::UnboundedSender<Result<Seen, String>>) {
    tokio::spawn(async move {
        let mut client = sim.client.clone();
        let stream = client
            .subscribe(pb::SubscribeRequest {
                service: sim.service.clone(),
                token: sim.token.clone(),
                proxy: sim.name.clone(),
                admin_addr: String::new(),
                deltas: !whole,
            })
            .await;
        let mut stream = match stream {
            Ok(s) => s.into_inner(),
            Err(e) => {
                let _ = seen.send(Err(format!("{}: {}", sim.name, e.message())));
                return;
            }
        };
        let mut received: Option<pb::Snapshot> = None;
        loop {
            let message = match stream.message().await {
                Ok(Some(s)) => s,
                Ok(None) => return,
                Err(e) => {
                    let _ = seen.send(Err(format!("{}: {}", sim.name, e.message())));
                    return;
                }
            };
            let at = Instant::now();
            let bytes = message.encoded_len();
            let merged = match (&received, message.base_version) {
                (_, 0) => Ok(message),
                (Some(base), v) if base.version == v => delta::apply(base, message),
                (base, v) => {
                    let have = base.as_ref().map_or(0, |b| b.version);
                    let _ = seen.send(Err(format!(
                        "{}: a delta on version {v}, but the last received is {have}",
                        sim.name
                    )));
                    return;
                }
            };
            let snapshot = match merged {
                Ok(s) => s,
                Err(e) => {
                    let _ = seen.send(Err(format!(
                        "{}: a delta that does not apply: {e}",
                        sim.name
                    )));
                    return;
                }
            };
            let endpoints = |service: &str| {
                snapshot
                    .upstreams
                    .iter()
                    .find(|u| u.service == service)
                    .map_or(0, |u| u.endpoints.len())
            };
            let shared = endpoints(SHARED);
            let probe = endpoints(&service_name(PROBE));
            if seen
                .send(Ok(Seen {
                    proxy: idx,
                    at,
                    config_version: snapshot.config_version,
                    shared,
                    probe,
                    bytes,
                }))
                .is_err()
            {
                return;
            }
            // As `hopwise proxy` does: acknowledge every snapshot.
            let _ = client
                .ack(pb::AckRequest {
                    service: sim.service.clone(),
                    version: snapshot.version,
                    accepted: true,
                    token: sim.token.clone(),
                    proxy: sim.name.clone(),
                    cert_ca_generation: snapshot.ca_generation,
                    trust_bundle_applied: true,
                    ..Default::default()
                })
                .await;
            received = Some(snapshot);
        }
    });
}

/// Snapshots received while waiting: by the subscribers waited for, and by the others.
#[derive(Debug, Clone, Copy, Default)]
struct Received {
    wanted: usize,
    others: usize,
    /// Bytes of all of them.
    bytes: usize,
}

/// Waits until every one of `proxies` subscribers has seen a snapshot for which `reached`
/// holds; returns each one's time from `t0`, and what they received meanwhile.
async fn until_all(
    seen: &mut mpsc::UnboundedReceiver<Result<Seen, String>>,
    proxies: usize,
    t0: Instant,
    what: &str,
    reached: impl Fn(&Seen) -> bool,
) -> Result<(Vec<Duration>, Vec<Seen>, Received), BenchError> {
    let wanted = vec![true; proxies];
    until_these(seen, &wanted, t0, what, reached).await
}

/// Waits until every subscriber `i` with `wanted[i]` has seen a snapshot for which `reached`
/// holds; returns each one's time from `t0`, and what every subscriber received meanwhile.
async fn until_these(
    seen: &mut mpsc::UnboundedReceiver<Result<Seen, String>>,
    wanted: &[bool],
    t0: Instant,
    what: &str,
    reached: impl Fn(&Seen) -> bool,
) -> Result<(Vec<Duration>, Vec<Seen>, Received), BenchError> {
    let proxies = wanted.iter().filter(|w| **w).count();
    let mut first: Vec<Option<Seen>> = vec![None; wanted.len()];
    let mut received = Received::default();
    let mut missing = proxies;
    let deadline = tokio::time::Instant::now() + PHASE_LIMIT;
    while missing > 0 {
        let next = tokio::time::timeout_at(deadline, seen.recv()).await;
        let s = match next {
            Ok(Some(Ok(s))) => s,
            Ok(Some(Err(e))) => {
                return Err(BenchError::Call {
                    what: "a snapshot stream",
                    message: e,
                });
            }
            Ok(None) => {
                return Err(BenchError::Timeout(format!(
                    "every snapshot stream ended before {what}"
                )));
            }
            Err(_) => {
                return Err(BenchError::Timeout(format!(
                    "{missing} of {proxies} subscribers never saw {what} within {PHASE_LIMIT:?}"
                )));
            }
        };
        received.bytes += s.bytes;
        if !wanted.get(s.proxy).copied().unwrap_or(false) {
            received.others += 1;
            continue;
        }
        received.wanted += 1;
        if let Some(slot) = first.get_mut(s.proxy)
            && slot.is_none()
            && reached(&s)
        {
            *slot = Some(s);
            missing -= 1;
        }
    }
    let firsts: Vec<Seen> = first.into_iter().flatten().collect();
    let times = firsts
        .iter()
        .map(|s| s.at.saturating_duration_since(t0))
        .collect();
    Ok((times, firsts, received))
}

/// Drops what subscribers reported so far (before a measured change).
fn drain(seen: &mut mpsc::UnboundedReceiver<Result<Seen, String>>) -> Result<(), BenchError> {
    while let Ok(s) = seen.try_recv() {
        if let Err(e) = s {
            return Err(BenchError::Call {
                what: "a snapshot stream",
                message: e,
            });
        }
    }
    Ok(())
}

/// Runs the benchmark and returns its report.
pub fn measure(args: &BenchArgs) -> Result<Report, BenchError> {
    if args.proxies == 0 || args.services == 0 || args.rounds == 0 {
        return Err(BenchError::Usage(
            "--proxies, --services and --rounds must be at least 1".into(),
        ));
    }
    if args.copies > 1 << 24 || args.rounds > 1000 {
        return Err(BenchError::Usage(
            "at most 16,777,216 copies and 1,000 rounds".into(),
        ));
    }
    let mut args = args.clone();
    let mut notes = Vec::new();
    if args.services > args.proxies {
        notes.push(format!(
            "--services {} capped at --proxies {}: every service has a proxy",
            args.services, args.proxies
        ));
        args.services = args.proxies;
    }
    let mesh = mesh_text(args.services, 0);
    let (server, access, tokens) = start_server(&args, &mesh)?;
    let result = drive(&args, &server, &access, &tokens, notes);
    server.stop();
    result
}

fn drive(
    args: &BenchArgs,
    server: &Server,
    access: &client::Server,
    tokens: &[(String, String)],
    mut notes: Vec<String>,
) -> Result<Report, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("simulated-proxies")
        .build()
        .map_err(BenchError::Runtime)?;
    let token_of = |service: &str| {
        tokens
            .iter()
            .find(|(s, _)| s == service)
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    };
    let rss_before = server.rss();
    runtime.block_on(async move {
        // --- connect: one connection per simulated proxy -----------------------------------------
        let mut sims = Vec::with_capacity(args.proxies);
        for i in 0..args.proxies {
            let service = service_name(i % args.services);
            sims.push(Sim {
                token: token_of(&service),
                name: format!("{service}-{}", i / args.services),
                service,
                client: client::connect(access).await?,
            });
        }

        // --- Issue: CSRs made beforehand; the time is the control plane's -----------------------
        let mut csrs = Vec::with_capacity(args.proxies);
        for _ in 0..args.proxies {
            let key = rcgen::KeyPair::generate().map_err(|e| BenchError::Start(e.to_string()))?;
            let csr = rcgen::CertificateParams::default()
                .serialize_request(&key)
                .and_then(|c| c.pem())
                .map_err(|e| BenchError::Start(e.to_string()))?;
            csrs.push(csr);
        }
        let items: Vec<(Sim, String)> = sims.iter().cloned().zip(csrs).collect();
        let (_, lat, wall) = batch(items, args.concurrency, |(sim, csr)| async move {
            let mut c = sim.client.clone();
            c.issue(pb::IssueRequest {
                csr_pem: csr,
                token: sim.token.clone(),
                proxy: sim.name.clone(),
            })
            .await
            .map_err(call("Issue"))?;
            Ok(())
        })
        .await?;
        let issue = Rate::of(args.proxies, wall, args.concurrency, &lat);

        // --- Subscribe: every stream's first snapshot --------------------------------------------
        let (tx, mut seen) = mpsc::unbounded_channel();
        let t0 = Instant::now();
        for (i, sim) in sims.iter().enumerate() {
            subscribe(i, sim.clone(), args.whole, tx.clone());
        }
        drop(tx);
        let (lat, firsts, _) = until_all(&mut seen, args.proxies, t0, "a first snapshot", |_| true).await?;
        let subscribe_wall = t0.elapsed();
        let subscribe = Rate::of(args.proxies, subscribe_wall, args.proxies, &lat);
        let snapshot_bytes = [
            firsts.iter().map(|s| s.bytes).min().unwrap_or(0),
            firsts.iter().map(|s| s.bytes).max().unwrap_or(0),
        ];

        // --- Register: the copies, spread evenly over the proxies --------------------------------
        let items: Vec<(Sim, String)> = (0..args.copies)
            .map(|c| (sims[c % args.proxies].clone(), copy_addr(c)))
            .collect();
        let (leases, lat, wall) = batch(items, args.concurrency, |(sim, addr)| async move {
            let mut c = sim.client.clone();
            let lease = c
                .register(pb::RegisterRequest {
                    token: sim.token.clone(),
                    inbound_addr: addr,
                    ttl_ms: TTL_MS,
                    admin_addr: String::new(),
                })
                .await
                .map_err(call("Register"))?
                .into_inner()
                .lease_id;
            Ok((sim, lease))
        })
        .await?;
        let register = Rate::of(args.copies, wall, args.concurrency, &lat);

        // --- SetHealth: every copy healthy (each one changes an endpoint set) --------------------
        let (_, lat, wall) = batch(leases.clone(), args.concurrency, |(sim, lease)| async move {
            let mut c = sim.client.clone();
            c.set_health(pb::SetHealthRequest {
                lease_id: lease,
                healthy: true,
                token: sim.token.clone(),
            })
            .await
            .map_err(call("SetHealth"))?;
            Ok(())
        })
        .await?;
        let set_health = Rate::of(args.copies, wall, args.concurrency, &lat);

        // --- Renew: what keeping 10,000 leases alive costs, once round ---------------------------
        let (_, lat, wall) = batch(leases.clone(), args.concurrency, |(sim, lease)| async move {
            let mut c = sim.client.clone();
            c.renew(pb::LeaseRequest {
                lease_id: lease,
                token: sim.token.clone(),
            })
            .await
            .map_err(call("Renew"))?;
            Ok(())
        })
        .await?;
        let renew = Rate::of(args.copies, wall, args.concurrency, &lat);

        // Let the snapshots the health changes caused settle before the memory is read.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss_loaded = server.rss();

        // --- the measured changes ----------------------------------------------------------------
        let mut admin = client::connect(access).await?;
        let shared_token = token_of(SHARED);
        let mut config_times = Vec::new();
        let mut config_last = Vec::new();
        let mut registry_times = Vec::new();
        let mut registry_last = Vec::new();
        let (mut config_bytes, mut registry_bytes) = (0usize, 0usize);
        // The plane's CPU ticks from each call until the acknowledgements settled (200 ms on).
        let (mut config_ticks, mut registry_ticks) = (0u64, 0u64);
        for round in 1..=args.rounds {
            // A registry change: a new copy of `shared` turns healthy; every subscriber calls it.
            let lease = admin
                .register(pb::RegisterRequest {
                    token: shared_token.clone(),
                    inbound_addr: format!("192.168.{}.{}:7001", round >> 8, round & 255),
                    ttl_ms: TTL_MS,
                    admin_addr: String::new(),
                })
                .await
                .map_err(call("Register"))?
                .into_inner()
                .lease_id;
            tokio::time::sleep(Duration::from_millis(200)).await;
            drain(&mut seen)?;
            let cpu0 = server.cpu_ticks();
            let t0 = Instant::now();
            admin
                .set_health(pb::SetHealthRequest {
                    lease_id: lease,
                    healthy: true,
                    token: shared_token.clone(),
                })
                .await
                .map_err(call("SetHealth"))?;
            let (times, _, r) = until_all(&mut seen, args.proxies, t0, "the new copy", |s| {
                s.shared >= round
            })
            .await?;
            registry_bytes += r.bytes;
            registry_last.push(times.iter().max().copied().unwrap_or_default());
            registry_times.extend(times);

            // A configuration change: every call to `shared` gets another timeout.
            tokio::time::sleep(Duration::from_millis(200)).await;
            registry_ticks += server.cpu_ticks().saturating_sub(cpu0);
            drain(&mut seen)?;
            let cpu0 = server.cpu_ticks();
            let t0 = Instant::now();
            let applied = admin
                .apply(pb::ApplyRequest {
                    mesh_yaml: mesh_text(args.services, round),
                    file_name: format!("bench-{round}.yaml"),
                })
                .await
                .map_err(call("Apply"))?
                .into_inner();
            if !applied.applied || applied.unchanged {
                return Err(BenchError::Call {
                    what: "Apply",
                    message: applied.message,
                });
            }
            let target = applied.config_version;
            let (times, _, r) = until_all(&mut seen, args.proxies, t0, "the new configuration", |s| {
                s.config_version >= target
            })
            .await?;
            config_bytes += r.bytes;
            config_last.push(times.iter().max().copied().unwrap_or_default());
            config_times.extend(times);
            tokio::time::sleep(Duration::from_millis(200)).await;
            config_ticks += server.cpu_ticks().saturating_sub(cpu0);
        }

        // --- health flips: the copies of `svc-001` down and up again, `rounds` times -------------
        let probe = service_name(PROBE);
        let copies: Vec<(Sim, u64)> =
            leases.into_iter().filter(|(s, _)| s.service == probe).collect();
        // Without copies of `svc-001` (one service, or fewer copies than proxies) nothing flips.
        let health_flips = if !copies.is_empty() {
            let callers: Vec<bool> = (0..args.proxies).map(|i| i % args.services == 0).collect();
            tokio::time::sleep(Duration::from_millis(200)).await;
            drain(&mut seen)?;
            let mut received = Received::default();
            let cpu0 = server.cpu_ticks();
            let t0 = Instant::now();
            for pass in 0..2 * args.rounds {
                let healthy = pass % 2 == 1;
                batch(copies.clone(), args.concurrency, move |(sim, lease)| async move {
                    let mut c = sim.client.clone();
                    c.set_health(pb::SetHealthRequest {
                        lease_id: lease,
                        healthy,
                        token: sim.token.clone(),
                    })
                    .await
                    .map_err(call("SetHealth"))?;
                    Ok(())
                })
                .await?;
                let want = if healthy { copies.len() } else { 0 };
                let (_, _, r) = until_these(&mut seen, &callers, t0, "the flipped copies", |s| {
                    s.probe == want
                })
                .await?;
                received.wanted += r.wanted;
                received.others += r.others;
                received.bytes += r.bytes;
            }
            let wall = t0.elapsed().as_secs_f64();
            let cpu = server.cpu_ticks().saturating_sub(cpu0) as f64 / USER_HZ;
            // Whatever else arrived by now (nothing should: no other snapshot changed).
            tokio::time::sleep(Duration::from_millis(200)).await;
            while let Ok(s) = seen.try_recv() {
                match s {
                    Ok(s) => {
                        received.bytes += s.bytes;
                        if callers.get(s.proxy).copied().unwrap_or(false) {
                            received.wanted += 1;
                        } else {
                            received.others += 1;
                        }
                    }
                    Err(e) => {
                        return Err(BenchError::Call {
                            what: "a snapshot stream",
                            message: e,
                        });
                    }
                }
            }
            let changes = 2 * args.rounds * copies.len();
            Some(Flips {
                change: format!(
                    "SetHealth of the {} copies of `{probe}` (only `{}` calls it): down, then up, \
                     {} times, {} in flight; until every caller has the final state",
                    copies.len(),
                    service_name(0),
                    args.rounds,
                    args.concurrency.min(copies.len().max(1)),
                ),
                changes,
                callers: callers.iter().filter(|c| **c).count(),
                seconds: round3(wall),
                per_second: if wall > 0.0 {
                    (changes as f64 / wall).round()
                } else {
                    0.0
                },
                cpu_ms_per_change: if changes > 0 {
                    round3(cpu * 1e3 / changes as f64)
                } else {
                    0.0
                },
                snapshots_to_callers: received.wanted,
                snapshots_to_others: received.others,
                bytes_per_change: if changes > 0 {
                    (received.bytes as f64 / changes as f64).round()
                } else {
                    0.0
                },
            })
        } else {
            None
        };

        let rss_end = server.rss();
        let ms = |ds: &[Duration]| -> Vec<f64> {
            ds.iter().map(|d| round3(d.as_secs_f64() * 1e3)).collect()
        };
        let per_change = |bytes: usize| (bytes as f64 / args.rounds as f64).round();
        let cpu_ms = |ticks: u64| round3(ticks as f64 / USER_HZ * 1e3 / args.rounds as f64);
        let in_process = matches!(server, Server::InProcess { .. });
        if in_process {
            notes.push(
                "memory and CPU time are this process's: the control plane and the simulated \
                 proxies together"
                    .into(),
            );
        }
        if cfg!(debug_assertions) {
            notes.push("a debug build: run `cargo run --release` for figures".into());
        }
        Ok(Report {
            command: format!(
                "hopwise control bench --proxies {} --copies {} --services {} --rounds {} --concurrency {}{}{}",
                args.proxies,
                args.copies,
                args.services,
                args.rounds,
                args.concurrency,
                if in_process { " --in-process" } else { "" },
                if args.whole { " --whole" } else { "" }
            ),
            machine: machine(),
            control_plane: if in_process {
                "in-process".into()
            } else {
                "child process".into()
            },
            proxies: args.proxies,
            services: args.services,
            copies: args.copies,
            snapshot_bytes,
            snapshots: if args.whole { "whole" } else { "deltas" },
            issue,
            subscribe,
            register,
            set_health,
            renew,
            memory: Memory {
                method: if in_process {
                    "VmRSS/VmHWM of /proc/self/status (this process)".into()
                } else {
                    "VmRSS/VmHWM of /proc/<pid>/status of the child `hopwise control`".into()
                },
                rss_before_kib: rss_before,
                rss_loaded_kib: rss_loaded,
                rss_end_kib: rss_end,
                hwm_kib: server.hwm(),
            },
            config_change: Spread {
                change: "Apply of a mesh file that changes every call to `shared`; from the call"
                    .into(),
                rounds: args.rounds,
                subscribers: args.proxies,
                latency_ms: Percentiles::of(&config_times),
                last_receipt_ms: ms(&config_last),
                bytes_per_change: per_change(config_bytes),
                bytes_per_subscriber: per_change(config_bytes) / args.proxies as f64,
                cpu_ms_per_change: cpu_ms(config_ticks),
            },
            registry_change: Spread {
                change: "SetHealth(true) of a new copy of `shared`, which every service calls; \
                         from the call"
                    .into(),
                rounds: args.rounds,
                subscribers: args.proxies,
                latency_ms: Percentiles::of(&registry_times),
                last_receipt_ms: ms(&registry_last),
                bytes_per_change: per_change(registry_bytes),
                bytes_per_subscriber: per_change(registry_bytes) / args.proxies as f64,
                cpu_ms_per_change: cpu_ms(registry_ticks),
            },
            health_flips,
            notes,
        })
    })
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let rate = |what: &str, x: &Rate, unit: &str| {
        format!(
            "{what:<10} {:>6} in {:>7.3} s  {:>7} {unit}/s   latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} in flight)\n",
            x.count,
            x.seconds,
            x.per_second,
            x.latency_ms.p50,
            x.latency_ms.p99,
            x.latency_ms.max,
            x.in_flight
        )
    };
    let spread = |what: &str, s: &Spread| {
        format!(
            "{what}: {}\n  to all {} subscribers, {} rounds: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; last subscriber per round: {} ms\n  \
             sent {:.0} bytes a change, {:.0} a subscriber; control plane CPU {:.1} ms a change\n",
            s.change,
            s.subscribers,
            s.rounds,
            s.latency_ms.p50,
            s.latency_ms.p99,
            s.latency_ms.max,
            s.last_receipt_ms
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            s.bytes_per_change,
            s.bytes_per_subscriber,
            s.cpu_ms_per_change,
        )
    };
    let m = &r.machine;
    let mut out = format!(
        "{}\nmachine: {} CPU(s), {}, {} GiB, Linux {}; {} build; control plane: {}\n\
         {} proxies, {} services, {} copies; a first snapshot is {}–{} bytes; then {}\n\n",
        r.command,
        m.cpus,
        m.cpu_model,
        m.memory_gib,
        m.kernel,
        m.build,
        r.control_plane,
        r.proxies,
        r.services,
        r.copies,
        r.snapshot_bytes[0],
        r.snapshot_bytes[1],
        r.snapshots,
    );
    out.push_str(&rate("issue", &r.issue, "CSRs"));
    out.push_str(&rate("subscribe", &r.subscribe, "streams"));
    out.push_str(&rate("register", &r.register, "copies"));
    out.push_str(&rate("set-health", &r.set_health, "copies"));
    out.push_str(&rate("renew", &r.renew, "leases"));
    out.push_str(&format!(
        "memory     {} serving, {} loaded, {} at the end, peak {} ({})\n\n",
        mib(r.memory.rss_before_kib),
        mib(r.memory.rss_loaded_kib),
        mib(r.memory.rss_end_kib),
        mib(r.memory.hwm_kib),
        r.memory.method
    ));
    out.push_str(&spread("configuration change", &r.config_change));
    out.push_str(&spread("registry change", &r.registry_change));
    if let Some(f) = &r.health_flips {
        out.push_str(&format!(
            "health flips: {}\n  {} changes in {:.3} s: {} changes/s; control plane CPU {:.3} ms a change; \
             snapshots: {} to the {} callers, {} to the others; {:.0} bytes a change\n",
            f.change,
            f.changes,
            f.seconds,
            f.per_second,
            f.cpu_ms_per_change,
            f.snapshots_to_callers,
            f.callers,
            f.snapshots_to_others,
            f.bytes_per_change
        ));
    }
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// `hopwise control bench`: runs it and writes the report (text or JSON) to `out`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<(), BenchError> {
    let report = measure(args)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&report)
            .map_err(|e| BenchError::Output(std::io::Error::other(e)))?;
        s.push('\n');
        s
    } else {
        render(&report)
    };
    out.write_all(text.as_bytes()).map_err(BenchError::Output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_benchmarks_mesh_passes_check_and_its_variants_differ() {
        for services in [1, 2, 7, 100] {
            let text = mesh_text(services, 0);
            let mesh = hopwise_model::Mesh::from_yaml(&text).unwrap();
            assert_eq!(mesh.services.len(), services + 1);
            let report = hopwise_analyze::check(&mesh, &hopwise_analyze::Options::default());
            assert!(!report.has_errors(), "{services}: {:?}", report.findings);
            assert_ne!(text, mesh_text(services, 1));
            assert_eq!(text, mesh_text(services, 2));
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ds: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let p = Percentiles::of(&ds);
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        let p = Percentiles::of(&[Duration::from_millis(3)]);
        assert_eq!((p.p50, p.p99, p.max), (3.0, 3.0, 3.0));
        assert_eq!(Percentiles::of(&[]).max, 0.0);
    }

    #[test]
    fn copy_addresses_are_distinct() {
        let mut all: Vec<String> = (0..70_000).map(copy_addr).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 70_000);
    }

    /// The whole benchmark, small, with the control plane in this process (a test binary
    /// cannot start `hopwise control`; crates/hopwise/tests runs the child-process form).
    #[test]
    fn a_small_run_in_process_reports_every_figure() {
        let args = BenchArgs {
            proxies: 6,
            copies: 12,
            services: 3,
            rounds: 2,
            concurrency: 4,
            in_process: true,
            json: true,
            whole: false,
        };
        let r = measure(&args).unwrap();
        assert_eq!(r.issue.count, 6);
        assert_eq!(r.register.count, 12);
        assert_eq!(r.config_change.last_receipt_ms.len(), 2);
        assert_eq!(r.registry_change.subscribers, 6);
        assert!(r.memory.hwm_kib > 0);
        assert!(r.snapshot_bytes[0] > 0);
        let flips = r.health_flips.as_ref().unwrap();
        // 12 copies over 6 proxies of 3 services: `svc-001` holds 4, flipped down and up twice.
        assert_eq!(flips.changes, 16);
        assert_eq!(flips.callers, 2);
        let text = render(&r);
        assert!(text.contains("registry change"), "{text}");
        assert!(text.contains("health flips"), "{text}");
        // Whole snapshots, as before deltas: a copy joining costs every subscriber more bytes.
        let whole = measure(&BenchArgs {
            whole: true,
            ..args
        })
        .unwrap();
        assert_eq!(whole.snapshots, "whole");
        assert!(r.registry_change.bytes_per_subscriber > 0.0);
        assert!(
            r.registry_change.bytes_per_subscriber < whole.registry_change.bytes_per_subscriber,
            "{} vs {}",
            r.registry_change.bytes_per_subscriber,
            whole.registry_change.bytes_per_subscriber
        );
        assert!(r.config_change.bytes_per_change < whole.config_change.bytes_per_change);
    }
}
