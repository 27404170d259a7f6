//! The interleaved runs of `hopwise bench hops`. Per run, every configuration (0 hops, then
//! each system × mode × 1..N hops) in a rotated order; per configuration: start the backend
//! and the chain (each proxy side its own process), measure latency with one request at a
//! time, then CPU per proxy at a fixed rate, then read each proxy's peak RSS, then stop
//! everything. Numbers go to [`super::report`]; this file only runs things. The client
//! phases are `hops/client.rs`'s; what `--modes captured` adds, `hops/captured.rs`'s; the
//! pairs of `--paired`, `hops/paired.rs`'s.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hopwise_model::Mesh;
use indicatif::{ProgressBar, ProgressStyle};

use super::layout::{self, HopCerts, HopPorts, Peer};
use super::report::{self, Config, Plan, Report, Sample, System};
use super::stats::rotation;
use super::{HopsArgs, Mode};
use crate::error::{LabError, io};
use crate::processes::procfs;
use crate::processes::supervisor::{Proc, Supervisor, find_program};
use crate::samples::collector::Collector;

mod captured;
mod client;
mod observe;
mod paired;
mod plan;
mod start;

pub use captured::CAPTURE_STATE;
pub use observe::Observe;
pub use plan::{configurations, plan};
use plan::{detect_peers, load_average, machine, peer_system};

/// Whose processes an interrupted run stopped.
const WHO: &str = "the bench";

/// An error and its causes on one line.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// Runs the whole benchmark.
pub fn run(a: &HopsArgs) -> Result<Report, LabError> {
    let plan = plan(a)?;
    let load_start = load_average();
    let exe = std::env::current_exe().map_err(io("cannot find the hopwise executable"))?;
    let taskset = if plan.pinned {
        Some(find_program("taskset").ok_or_else(|| {
            LabError::Failed(
                "--pin needs `taskset` (util-linux), which is not installed here: \
                 `apt-get install util-linux`, or run without --pin"
                    .into(),
            )
        })?)
    } else {
        None
    };
    let peers = if plan.peers {
        detect_peers()
    } else {
        Vec::new()
    };
    // Refused here, before anything starts, without root, `ip` or `nft`.
    let capture = if plan.modes.contains(&Mode::Captured) {
        let (c, swept) = captured::Capture::prepare(&a.state)?;
        for id in swept {
            crate::progress(&format!(
                "hopwise bench: removed what the dead bench {id} left"
            ));
        }
        Some(c)
    } else {
        None
    };
    // Kept to the end of the run: its runtime serves the proxies' span exports.
    let receiver = observe::receiver(&plan.observe)?;
    let sup = Supervisor::new(WHO)?;
    let dir = tempfile::Builder::new()
        .prefix("hopwise-bench-")
        .tempdir()
        .map_err(io("cannot create a temporary directory"))?;
    let bench = Bench {
        sup: &sup,
        exe,
        taskset,
        dir: dir.path().to_owned(),
        plan: plan.clone(),
        clk_tck: procfs::clock_ticks(),
        peers: peers
            .iter()
            .map(|(p, path, _)| (*p, path.clone()))
            .collect(),
        collector: receiver.as_ref().map(|r| r.collector.clone()),
        capture,
    };
    for hop in 1..=plan.max_hops {
        bench.write_certs(hop)?;
    }
    let mut systems = vec![System::Hopwise];
    systems.extend(peers.iter().map(|(p, _, _)| peer_system(*p)));
    let configs = configurations(&systems, &plan.modes, plan.max_hops, &plan.observe);

    if plan.paired {
        return paired::run(&bench, &configs, machine(&peers, load_start));
    }
    let samples = each_run(&sup, plan.runs, &configs, Config::label, |c, run| {
        bench.measure(c, run)
    })?;
    Ok(report::summarise(
        machine(&peers, load_start),
        plan,
        &configs,
        samples,
    ))
}

/// `measure(item, run)` for each of `items` once per run, in rotated orders, behind a progress
/// bar; the first error ends it, naming the item (`label`) and the run.
fn each_run<T, S>(
    sup: &Supervisor,
    runs: usize,
    items: &[T],
    label: impl Fn(&T) -> String,
    mut measure: impl FnMut(&T, usize) -> Result<S, LabError>,
) -> Result<Vec<S>, LabError> {
    let bar = ProgressBar::new((items.len() * runs) as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:32}] {pos}/{len} configurations, eta {eta}  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let mut samples = Vec::new();
    for run in 0..runs {
        for i in rotation(items.len(), run, runs) {
            let item = &items[i];
            bar.set_message(format!("run {}/{runs}: {}", run + 1, label(item)));
            match measure(item, run) {
                Ok(s) => samples.push(s),
                Err(e) => {
                    bar.abandon();
                    return Err(failed(sup, e, &label(item), run));
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(samples)
}

/// A measurement's error, naming what was measured (`label`) and the run.
fn failed(sup: &Supervisor, e: LabError, label: &str, run: usize) -> LabError {
    match e {
        _ if sup.interrupted() => LabError::Interrupted { who: WHO },
        LabError::Interrupted { .. } => e,
        LabError::Start { name, why, stderr } => LabError::Start {
            name: format!("{label} (run {}): {name}", run + 1),
            why,
            stderr,
        },
        other => {
            let why = with_sources(&other);
            LabError::Failed(format!("{label} (run {}): {why}", run + 1))
        }
    }
}

/// A configuration's directory name: `direct`, `hopwise-mtls-trace-10000-2`.
fn slug(c: &Config) -> String {
    match c.mode {
        None => "direct".to_owned(),
        Some(m) => format!(
            "{}-{}{}-{}",
            c.system.name(),
            m.name(),
            c.observe.slug(),
            c.hops
        ),
    }
}

struct Bench<'a> {
    sup: &'a Supervisor,
    exe: PathBuf,
    taskset: Option<PathBuf>,
    dir: PathBuf,
    plan: Plan,
    clk_tck: f64,
    peers: Vec<(Peer, PathBuf)>,
    /// The collector spans are exported to, when a configuration traces.
    collector: Option<Collector>,
    /// `--modes captured`'s tools and state.
    capture: Option<captured::Capture>,
}

/// The processes of one measurement; all killed when it is dropped.
struct Running<'a> {
    sup: &'a Supervisor,
    procs: Vec<Proc>,
    /// Indices into `procs` of the proxies, in chain order (out1, in1, out2, …).
    proxies: Vec<usize>,
    /// A captured chain's copy: dropped (its namespace removed) after the processes are killed.
    captured: Option<captured::Captured>,
    /// The chain's ports, held while its processes run ([`crate::processes::ports`]).
    held: Vec<crate::processes::ports::Held>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        for p in &self.procs {
            self.sup.kill(p.pid);
        }
        self.captured.take();
    }
}

impl Running<'_> {
    fn proxy_stderr(&self) -> String {
        let mut s = String::new();
        for &i in &self.proxies {
            let p = &self.procs[i];
            let tail = p.stderr_tail(8);
            if !tail.trim().is_empty() {
                s.push_str(&format!("\n--- {} (stderr) ---\n{tail}", p.name));
            }
        }
        s
    }
}

impl Bench<'_> {
    fn certs_dir(&self, hop: usize) -> PathBuf {
        self.dir.join("certs").join(format!("hop-{hop}"))
    }

    /// The hop's CA and certificates (as `hopwise certs` writes them) and HAProxy's bundles.
    fn write_certs(&self, hop: usize) -> Result<(), LabError> {
        let any = SocketAddr::from(([127, 0, 0, 1], 1));
        let ports = HopPorts {
            out: any,
            inbound: SocketAddr::from(([127, 0, 0, 1], 2)),
            app: SocketAddr::from(([127, 0, 0, 1], 3)),
        };
        let dir = self.certs_dir(hop);
        let mesh = Mesh::from_yaml(&layout::hop_mesh(hop, &ports, &dir, false)).map_err(|d| {
            LabError::Failed(format!(
                "the bench wrote an invalid mesh file (a bug): {}",
                d.render("hop.yaml")
            ))
        })?;
        hopwise_proxy::certs::write_dev_certs(&mesh, &dir)
            .map_err(|e| LabError::Failed(format!("cannot write the hop certificates: {e}")))?;
        let c = HopCerts::in_dir(&dir);
        for (bundle, cert, key) in [
            (&c.caller_bundle, &c.caller_cert, &c.caller_key),
            (&c.callee_bundle, &c.callee_cert, &c.callee_key),
        ] {
            let read = |p: &Path| {
                std::fs::read_to_string(p).map_err(io(format!("cannot read {}", p.display())))
            };
            let text = read(cert)? + &read(key)?;
            std::fs::write(bundle, text)
                .map_err(io(format!("cannot write {}", bundle.display())))?;
        }
        Ok(())
    }

    /// A command for `program`, under `taskset -c 0` when pinned.
    fn command(&self, program: &Path) -> Command {
        match &self.taskset {
            Some(t) => {
                let mut c = Command::new(t);
                c.arg("-c").arg("0").arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    /// A captured chain's count of captured connections and its namespace; an error when the
    /// first proxy counted none (the client's calls did not go through capture).
    fn captured_count(&self, running: &Running<'_>) -> Result<Option<(u64, String)>, LabError> {
        let (Some(cap), Some(c)) = (&self.capture, &running.captured) else {
            return Ok(None);
        };
        let n = cap.counted(c)?;
        if n == 0 {
            return Err(LabError::Failed(
                "the first proxy counted no captured connection: the client's calls did not go \
                 through capture"
                    .into(),
            ));
        }
        Ok(Some((n, c.netns().to_owned())))
    }

    /// With tracing: the spans the collector received since it counted `before`.
    fn spans_since(&self, observe: Observe, before: Option<u64>) -> Option<u64> {
        match (&self.collector, before) {
            (Some(col), Some(before)) if matches!(observe, Observe::Tracing { .. }) => {
                // The exporters send a batch after 100 ms: let the last one arrive.
                std::thread::sleep(Duration::from_millis(300));
                Some(col.count() - before)
            }
            _ => None,
        }
    }

    fn measure(&self, c: &Config, run: usize) -> Result<Sample, LabError> {
        let cdir = self.dir.join("runs").join(slug(c));
        let (running, entry, _) = self.start_chain(c, &cdir)?;
        let spans_before = self.collector.as_ref().map(Collector::count);
        let latency = self.client_latency(&running, entry, &cdir)?;
        let (cpu, rate_errors) = if c.hops > 0 {
            let (cpu, r) = self.client_rate(&running, entry, &cdir)?;
            (Some(cpu), Some(r))
        } else {
            (None, None)
        };
        let rss_kib = running
            .proxies
            .iter()
            .map(|&i| {
                procfs::tree(running.procs[i].pid)
                    .iter()
                    .filter_map(|p| procfs::vm_hwm_kib(*p))
                    .sum()
            })
            .collect();
        let captured = self.captured_count(&running)?;
        let spans = self.spans_since(c.observe, spans_before);
        let us = |ns: u64| ns as f64 / 1000.0;
        Ok(Sample {
            run,
            config: *c,
            requests: latency.requests,
            p50_us: us(latency.p50_ns),
            p90_us: us(latency.p90_ns),
            p99_us: us(latency.p99_ns),
            mean_us: latency.mean_ns / 1000.0,
            max_us: us(latency.max_ns),
            cpu,
            rss_kib,
            reconnects: latency.reconnects,
            errors: latency.errors + rate_errors.as_ref().map_or(0, |r| r.errors),
            first_error: latency
                .first_error
                .clone()
                .or_else(|| rate_errors.and_then(|r| r.first_error)),
            spans,
            captured: captured.as_ref().map(|(n, _)| *n),
            netns: captured.map(|(_, ns)| ns),
        })
    }
}
