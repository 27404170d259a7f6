//! The interleaved runs of `hopwise bench hops`. Per run, every configuration (0 hops, then
//! each system × mode × 1..N hops) in a rotated order; per configuration: start the backend
//! and the chain (each proxy side its own process), measure latency with one request at a
//! time, then CPU per proxy at a fixed rate, then read each proxy's peak RSS, then stop
//! everything. Numbers go to [`super::report`]; this file only runs things. The client
//! phases are `hops/client.rs`'s; what `--modes captured` adds, `hops/captured.rs`'s.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hopwise_model::Mesh;
use indicatif::{ProgressBar, ProgressStyle};

use super::layout::{self, CALLEE, CALLER, HopCerts, HopPorts, Peer, Side};
use super::report::{self, Config, Plan, Report, Sample, System};
use super::stats::rotation;
use super::{HopsArgs, Mode};
use crate::error::{LabError, io};
use crate::processes::ports::free_ports;
use crate::processes::procfs;
use crate::processes::supervisor::{Proc, Supervisor, find_program};
use crate::samples::collector::Collector;

mod captured;
mod client;
mod observe;
mod plan;

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

    let bar = ProgressBar::new((configs.len() * plan.runs) as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:32}] {pos}/{len} configurations, eta {eta}  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let mut samples = Vec::new();
    for run in 0..plan.runs {
        for i in rotation(configs.len(), run, plan.runs) {
            let c = configs[i];
            bar.set_message(format!("run {}/{}: {}", run + 1, plan.runs, c.label()));
            let sample = bench.measure(&c, run);
            let sample = match sample {
                Ok(s) => s,
                Err(e) => {
                    bar.abandon();
                    return Err(match e {
                        _ if sup.interrupted() => LabError::Interrupted { who: WHO },
                        LabError::Interrupted { .. } => e,
                        LabError::Start { name, why, stderr } => LabError::Start {
                            name: format!("{} (run {}): {name}", c.label(), run + 1),
                            why,
                            stderr,
                        },
                        other => {
                            let why = with_sources(&other);
                            LabError::Failed(format!("{} (run {}): {why}", c.label(), run + 1))
                        }
                    });
                }
            };
            samples.push(sample);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(report::summarise(
        machine(&peers, load_start),
        plan,
        &configs,
        samples,
    ))
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

/// One hop being started: the configuration and its mode, the hop's number (1-based) and
/// ports, the measurement's directory.
#[derive(Clone, Copy)]
struct HopAt<'a> {
    c: &'a Config,
    mode: Mode,
    k: usize,
    ports: &'a HopPorts,
    dir: &'a Path,
}

/// Which process listens for which side of a hop (indices into `Running::procs`).
type Started = Vec<(Side, usize)>;

/// The processes of one measurement; all killed when it is dropped.
struct Running<'a> {
    sup: &'a Supervisor,
    procs: Vec<Proc>,
    /// Indices into `procs` of the proxies, in chain order (out1, in1, out2, …).
    proxies: Vec<usize>,
    /// A captured chain's copy: dropped (its namespace removed) after the processes are killed.
    captured: Option<captured::Captured>,
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

    fn spawn(
        &self,
        running: &mut Running<'_>,
        name: String,
        cmd: Command,
        log: &Path,
        proxy: bool,
    ) -> Result<usize, LabError> {
        let (p, _) = self.sup.spawn(&name, cmd, log, false)?;
        running.procs.push(p);
        let i = running.procs.len() - 1;
        if proxy {
            running.proxies.push(i);
        }
        Ok(i)
    }

    fn measure(&self, c: &Config, run: usize) -> Result<Sample, LabError> {
        let slug = match c.mode {
            None => "direct".to_owned(),
            Some(m) => format!(
                "{}-{}{}-{}",
                c.system.name(),
                m.name(),
                c.observe.slug(),
                c.hops
            ),
        };
        let cdir = self.dir.join("runs").join(&slug);
        std::fs::create_dir_all(&cdir).map_err(io(format!("cannot create {}", cdir.display())))?;
        let mut running = Running {
            sup: self.sup,
            procs: Vec::new(),
            proxies: Vec::new(),
            captured: None,
        };
        let backend = free_ports(1)?[0];
        let mut cmd = self.command(&self.exe);
        cmd.args(["bench", "backend", "--listen"])
            .arg(backend.to_string());
        let b = self.spawn(
            &mut running,
            "the bench backend".into(),
            cmd,
            &cdir.join("backend.stderr"),
            false,
        )?;
        let mut waits = vec![(b, backend)];
        let entry = if c.hops == 0 {
            backend
        } else {
            let ports = free_ports(2 * c.hops)?;
            let hops = layout::chain(&ports, backend);
            let mode = c.mode.unwrap_or(Mode::Mtls);
            for (k0, hop) in hops.iter().enumerate() {
                let k = k0 + 1;
                let at = HopAt {
                    c,
                    mode,
                    k,
                    ports: hop,
                    dir: &cdir,
                };
                for (side, i) in self.start_hop(&mut running, &at)? {
                    waits.push((
                        i,
                        match side {
                            Side::Out => hop.out,
                            Side::In => hop.inbound,
                        },
                    ));
                }
            }
            hops[0].out
        };
        for (i, addr) in waits {
            self.sup.wait_listening(&running.procs[i], addr)?;
        }
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
        let captured = match (&self.capture, &running.captured) {
            (Some(cap), Some(c)) => Some((cap.counted(c)?, c.netns().to_owned())),
            _ => None,
        };
        if captured.as_ref().is_some_and(|(n, _)| *n == 0) {
            return Err(LabError::Failed(
                "the first proxy counted no captured connection: the client's calls did not go \
                 through capture"
                    .into(),
            ));
        }
        let spans = match (&self.collector, spans_before) {
            (Some(col), Some(before)) if matches!(c.observe, Observe::Tracing { .. }) => {
                // The exporters send a batch after 100 ms: let the last one arrive.
                std::thread::sleep(Duration::from_millis(300));
                Some(col.count() - before)
            }
            _ => None,
        };
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

    /// Starts hopwise's two sides of a hop; for hop 1 of a captured chain, its captured copy
    /// first (kept in `running`), the outbound side's capture listener inside it.
    fn start_hopwise(
        &self,
        running: &mut Running<'_>,
        at: &HopAt<'_>,
    ) -> Result<Started, LabError> {
        let HopAt {
            c,
            mode,
            k,
            ports: hop,
            dir: cdir,
        } = *at;
        let certs = HopCerts::in_dir(&self.certs_dir(k));
        let mesh = cdir.join(format!("hop-{k}.yaml"));
        let mut text = layout::hop_mesh(k, hop, &certs.dir, mode == Mode::Tcp);
        let collector = self.collector.as_ref().map(|col| col.addr);
        let logs = cdir.join(format!("hop-{k}-logs"));
        text = observe::with_observe(&text, c.observe, collector, &logs);
        let capture = self
            .capture
            .as_ref()
            .filter(|_| mode == Mode::Captured && k == 1);
        if let Some(cap) = capture {
            text = captured::mesh(&text);
            running.captured = Some(cap.start(&text)?);
        }
        std::fs::create_dir_all(&logs)
            .and_then(|()| std::fs::write(&mesh, text))
            .map_err(io(format!("cannot write {}", mesh.display())))?;
        let workers = self.plan.workers.to_string();
        let mut started = Vec::new();
        for (side, service) in [(Side::Out, CALLER), (Side::In, CALLEE)] {
            let mut cmd = self.command(&self.exe);
            cmd.arg("proxy").arg("--config").arg(&mesh).args([
                "--service",
                service,
                "--workers",
                &workers,
            ]);
            if mode == Mode::Plain {
                cmd.arg("--plaintext");
            }
            let captured = running
                .captured
                .as_ref()
                .filter(|_| side == Side::Out && k == 1);
            if let Some(cap) = captured {
                cmd.args(cap.proxy_args());
            }
            let name = format!("hopwise proxy (hop {k}, {} side)", side.name());
            let log = cdir.join(format!("hop-{k}-{}.stderr", side.name()));
            let i = self.spawn(running, name, cmd, &log, true)?;
            let pid = running.procs[i].pid;
            if let Some(cap) = running
                .captured
                .as_mut()
                .filter(|_| side == Side::Out && k == 1)
            {
                cap.proxy_started(pid)?;
            }
            started.push((side, i));
        }
        Ok(started)
    }

    /// Starts both sides of a hop; returns which process listens for which side.
    fn start_hop(&self, running: &mut Running<'_>, at: &HopAt<'_>) -> Result<Started, LabError> {
        let (mode, k, hop, cdir) = (at.mode, at.k, at.ports, at.dir);
        let certs = HopCerts::in_dir(&self.certs_dir(k));
        let mut started = Vec::new();
        let system = at.c.system;
        match system {
            System::Direct => {}
            System::Hopwise => started = self.start_hopwise(running, at)?,
            System::Nginx | System::Haproxy | System::Envoy => {
                let Some((peer, program)) =
                    self.peers.iter().find(|(p, _)| peer_system(*p) == system)
                else {
                    return Err(LabError::Failed(format!(
                        "{} is not installed",
                        system.name()
                    )));
                };
                for side in [Side::Out, Side::In] {
                    let sdir = cdir.join(format!("hop-{k}-{}", side.name()));
                    std::fs::create_dir_all(&sdir)
                        .map_err(io(format!("cannot create {}", sdir.display())))?;
                    let conf = sdir.join(peer.config_file(side));
                    let text = peer.config(side, hop, mode, &certs, self.plan.workers, &sdir);
                    std::fs::write(&conf, text)
                        .map_err(io(format!("cannot write {}", conf.display())))?;
                    let mut cmd = self.command(program);
                    cmd.args(peer.args(&conf, &sdir, self.plan.workers));
                    let name = format!(
                        "{} (hop {k}, {} side; {})",
                        peer.program(),
                        side.name(),
                        conf.display()
                    );
                    let log = sdir.join("stderr");
                    started.push((side, self.spawn(running, name, cmd, &log, true)?));
                }
            }
        }
        Ok(started)
    }
}
