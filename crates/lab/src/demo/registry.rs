//! `hopwise demo registry`: the seed "Service Mesh"'s next step, measured. a calls b through
//! its proxy under a steady load; a copy of b is added, then another is SIGKILLed (no goodbye),
//! once with every address fixed in the mesh file and once through the control plane (copies
//! registered on leases, callers following its snapshots). Per layout: the files touched to
//! add the copy (read before and after, [`files`]), the requests a's proxy sent to the dead
//! address after the kill, and the requests that failed. Real processes (`hopwise control`,
//! `hopwise proxy`), b's apps and the load in this process.
//!
//! Requests to the dead address are counted by the processes, not inferred: a's proxy's tries
//! toward b (`hopwise_tries_total`, from its `/metrics`) less the requests b's apps received,
//! over the same phase (the load stopped and drained at both ends, so nothing is in flight when
//! either is read).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hopwise_api::names::metric;
use serde::Serialize;

use super::{RegistryArgs, json_text};
use crate::error::{LabError, io};
use crate::processes::ports::{Held, hold};
use crate::processes::proxies::{PORT_ATTEMPTS, Proxies, port_taken, scrape};
use crate::progress;

mod files;
mod layouts;
mod load;
mod text;

use layouts::Ports;
pub use load::Tally;
use load::{Apps, Load};
pub use text::text;

/// Copies of b: two at the start, a third added.
const COPIES: usize = 3;
/// Answers the added copy must give before the copy is called added.
const SERVED: u64 = 5;
/// How long a phase may wait for the copies it expects to answer.
const WAIT: Duration = Duration::from_secs(30);
/// How long a's proxy may drain when the fixed layout restarts it.
const DRAIN: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Fixed,
    Registry,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Fixed => "fixed",
            Layout::Registry => "registry",
        }
    }
}

/// Everything the demo measured.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Requests per second into a's proxy.
    pub rate: u32,
    /// How long the load ran after the kill.
    pub after_kill_ms: u64,
    /// The copies' lease in the registry layout.
    pub lease_ttl_ms: u64,
    pub layouts: Vec<LayoutRun>,
    /// Every process the demo started (all stopped when it ends).
    pub proxy_pids: Vec<u32>,
    /// Where the files and the processes' stderr were written (removed at the end).
    pub workdir: PathBuf,
}

/// One layout's run.
#[derive(Debug, Serialize)]
pub struct LayoutRun {
    pub layout: Layout,
    /// Configuration files created, changed or removed to add the copy.
    pub files_touched: Vec<String>,
    /// Proxies restarted to add it (they read their file only at start).
    pub restarted: Vec<String>,
    /// The load from its start until the added copy had answered.
    pub add: Tally,
    /// The load from the SIGKILL to the end.
    pub kill: Tally,
    /// a's proxy's tries toward b after the kill.
    pub tries: u64,
    /// Requests from a that b's apps received after the kill.
    pub app_requests: u64,
    /// `tries − app_requests`: the tries sent to the dead copy's address.
    pub sent_to_dead: u64,
    /// a's proxy's retries after a refused connection, after the kill.
    pub connect_failure_retries: u64,
    /// The mesh file in force at the end.
    pub mesh: String,
}

/// Runs the demo and renders its report (text or JSON).
pub async fn run(args: &RegistryArgs, hopwise: &Path) -> Result<String, LabError> {
    let tmp = tempfile::Builder::new()
        .prefix("hopwise-demo-registry-")
        .tempdir()
        .map_err(io("cannot create a temporary directory"))?;
    let mut pids = Vec::new();
    let mut runs = Vec::new();
    for layout in [Layout::Fixed, Layout::Registry] {
        let mut attempt = 1;
        loop {
            progress(&format!(
                "registry: {} layout, {} requests/s",
                layout.name(),
                args.rate
            ));
            let dir = tmp.path().join(format!("{}-{attempt}", layout.name()));
            match run_layout(layout, args, hopwise, &dir, &mut pids).await {
                Ok(r) => {
                    runs.push(r);
                    break;
                }
                Err(e) if port_taken(&e) && attempt < PORT_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }
    let report = Report {
        rate: args.rate,
        after_kill_ms: millis(args.after_kill.get()),
        lease_ttl_ms: millis(args.lease_ttl.get()),
        layouts: runs,
        proxy_pids: pids,
        workdir: tmp.path().to_owned(),
    };
    if args.json {
        json_text(&report)
    } else {
        Ok(text(&report))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One layout's processes and where its files are.
struct Ctx<'a> {
    layout: Layout,
    args: &'a RegistryArgs,
    config: PathBuf,
    run: PathBuf,
    ports: Ports,
    /// Holds `ports` for the layout's run: copies start (and restart) all along it.
    _held: Held,
    apps: Apps,
    procs: Proxies,
    /// Per copy of b its proxy's pid, and a's.
    copies: Vec<u32>,
    a: u32,
    pids: &'a mut Vec<u32>,
}

async fn run_layout(
    layout: Layout,
    args: &RegistryArgs,
    hopwise: &Path,
    dir: &Path,
    pids: &mut Vec<u32>,
) -> Result<LayoutRun, LabError> {
    let (config, run) = (dir.join("config"), dir.join("run"));
    for d in [&config, &run] {
        std::fs::create_dir_all(d).map_err(io(format!("cannot create {}", d.display())))?;
    }
    let held = hold(3 + 2 * COPIES)?;
    let ports = Ports::from(held.addrs(), COPIES)
        .ok_or_else(|| LabError::Failed("not enough free ports".into()))?;
    let mut c = Ctx {
        layout,
        args,
        procs: Proxies::new(hopwise, &run),
        apps: Apps::start(COPIES).await?,
        config,
        run,
        ports,
        _held: held,
        copies: Vec::new(),
        a: 0,
        pids,
    };
    start(&mut c).await?;

    // Steady load; the third copy added while it runs.
    let load = Load::start(c.ports.upstream, c.args.rate);
    wait_served(&c, &load, &["b0", "b1"], 1).await?;
    let before = files::snapshot(&c.config)?;
    let restarted = add_copy(&mut c).await?;
    let files_touched = files::touched(&before, &files::snapshot(&c.config)?);
    wait_served(&c, &load, &["b2"], SERVED).await?;
    let add = load.finish().await;

    // Nothing in flight: both counts are read at the same point, and again at the end.
    let (tries0, retries0) = a_counts(&c).await?;
    let hits0 = c.apps.hits();
    let load = Load::start(c.ports.upstream, c.args.rate);
    c.procs.kill(c.copies[0]);
    tokio::time::sleep(c.args.after_kill.get()).await;
    let kill = load.finish().await;
    let (tries1, retries1) = a_counts(&c).await?;
    let (tries, app_requests) = (tries1 - tries0, c.apps.hits() - hits0);
    let mesh = std::fs::read_to_string(c.config.join("mesh.yaml"))
        .map_err(io("cannot read the mesh file back"))?;
    c.procs.stop();
    Ok(LayoutRun {
        layout,
        files_touched,
        restarted,
        add,
        kill,
        tries,
        app_requests,
        sent_to_dead: tries.saturating_sub(app_requests),
        connect_failure_retries: retries1 - retries0,
        mesh,
    })
}

/// a's proxy's tries toward b and its retries after a refused connection.
async fn a_counts(c: &Ctx<'_>) -> Result<(u64, u64), LabError> {
    let m = scrape(c.ports.admin).await?;
    let tries = m.sum(
        metric::TRIES,
        &[("direction", "outbound"), ("service", "b")],
    );
    let retries = m.sum(
        metric::RETRIES,
        &[("service", "b"), ("condition", "connect-failure")],
    );
    Ok((tries, retries))
}

/// Waits until each of `copies` has answered the load `n` times; an error naming them (and
/// any process that died) if not within [`WAIT`].
async fn wait_served(c: &Ctx<'_>, load: &Load, copies: &[&str], n: u64) -> Result<(), LabError> {
    let start = Instant::now();
    while copies.iter().any(|k| load.served(k) < n) {
        for pid in c.copies.iter().chain([&c.a]) {
            c.procs.alive(*pid)?;
        }
        if start.elapsed() > WAIT {
            return Err(LabError::Failed(format!(
                "{} layout: {copies:?} did not answer a's requests within {WAIT:?}\n{}",
                c.layout.name(),
                c.procs.stderr_tails()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Starts the layout with two copies of b and a's proxy.
async fn start(c: &mut Ctx<'_>) -> Result<(), LabError> {
    match c.layout {
        Layout::Fixed => {
            let mesh = c.config.join("mesh.yaml");
            let yaml = layouts::fixed_mesh(&c.ports, &c.apps.addrs(), 2);
            write(&mesh, &yaml)?;
            let parsed = hopwise_model::Mesh::from_yaml(&yaml)
                .map_err(|d| LabError::Mesh(d.render("mesh.yaml")))?;
            hopwise_proxy::certs::write_dev_certs(&parsed, &c.config.join("certs"))
                .map_err(|e| LabError::Failed(format!("cannot write the certificates: {e}")))?;
        }
        Layout::Registry => {
            let mesh = c.config.join("mesh.yaml");
            write(&mesh, &layouts::registry_mesh())?;
            let state = c.run.join("state");
            let pid = spawn(
                c,
                "the control plane",
                "control",
                layouts::control(&mesh, &state, c.ports.control),
            )?;
            control_ready(c, pid, &state).await?;
        }
    }
    for i in 0..2 {
        start_copy(c, i).await?;
    }
    c.a = start_a(c).await?;
    Ok(())
}

/// Adds copy 2; returns the proxies that had to be restarted for it.
async fn add_copy(c: &mut Ctx<'_>) -> Result<Vec<String>, LabError> {
    match c.layout {
        Layout::Fixed => {
            let yaml = layouts::fixed_mesh(&c.ports, &c.apps.addrs(), 3);
            write(&c.config.join("mesh.yaml"), &yaml)?;
            start_copy(c, 2).await?;
            // a reads the file only at its start: stopped as an operator stops it, started again.
            c.procs.terminate(c.a, DRAIN).await;
            c.a = start_a(c).await?;
            Ok(vec!["a".to_owned()])
        }
        Layout::Registry => {
            start_copy(c, 2).await?;
            Ok(Vec::new())
        }
    }
}

async fn start_copy(c: &mut Ctx<'_>, i: usize) -> Result<(), LabError> {
    let args = match c.layout {
        Layout::Fixed => layouts::fixed_proxy(&c.config.join("mesh.yaml"), Some(i)),
        Layout::Registry => {
            let cache = c.run.join(format!("cache-b{i}"));
            let app = c.apps.addrs()[i];
            let ttl = c.args.lease_ttl.get();
            layouts::registry_b(&c.ports, &c.run.join("state"), &cache, i, app, ttl)
        }
    };
    let pid = spawn(c, &format!("b{i}'s proxy"), &format!("b{i}"), args)?;
    c.procs.ready(pid, c.ports.copies[i].1).await?;
    c.copies.push(pid);
    Ok(())
}

async fn start_a(c: &mut Ctx<'_>) -> Result<u32, LabError> {
    let args = match c.layout {
        Layout::Fixed => layouts::fixed_proxy(&c.config.join("mesh.yaml"), None),
        Layout::Registry => {
            layouts::registry_a(&c.ports, &c.run.join("state"), &c.run.join("cache-a"))
        }
    };
    let file = format!("a-{}", c.pids.len());
    let pid = spawn(c, "a's proxy", &file, args)?;
    c.procs.ready(pid, c.ports.admin).await?;
    Ok(pid)
}

fn spawn(
    c: &mut Ctx<'_>,
    name: &str,
    file: &str,
    args: Vec<std::ffi::OsString>,
) -> Result<u32, LabError> {
    let pid = c.procs.spawn(name, file, &args)?;
    c.pids.push(pid);
    Ok(pid)
}

/// Waits until the control plane listens and has written its CA and the join tokens.
async fn control_ready(c: &Ctx<'_>, pid: u32, state: &Path) -> Result<(), LabError> {
    let start = Instant::now();
    let wrote = || {
        ["ca.pem", "tokens/a", "tokens/b"]
            .iter()
            .all(|f| state.join(f).exists())
    };
    loop {
        c.procs.alive(pid)?;
        if wrote()
            && tokio::net::TcpStream::connect(c.ports.control)
                .await
                .is_ok()
        {
            return Ok(());
        }
        if start.elapsed() > WAIT {
            return Err(LabError::Failed(format!(
                "the control plane was not ready within {WAIT:?}\n{}",
                c.procs.stderr_tails()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn write(path: &Path, text: &str) -> Result<(), LabError> {
    std::fs::write(path, text).map_err(io(format!("cannot write {}", path.display())))
}
