//! `hopwise run --service S [--copy N] -- CMD ARGS…` (docs/capture.md): one copy of a service
//! run captured. The command runs in a network namespace of its own, linked to the host's by
//! a veth pair, with every service's name in its hosts file; nftables rules inside it send
//! its outbound TCP to the copy's proxy and inbound TCP from the host to its app. The proxy
//! runs in the host's namespace, as every other copy's does, with its capture listener bound
//! inside the copy's. When the command ends (or on Ctrl-C) all of it is removed; what a
//! crashed run left, the next `run` or `up` removes ([`record`]).
//!
//! The parts: [`plan`] (pure: names, addresses, commands, rules, hosts file), [`netns`] (runs
//! them, and removes them), [`record`] (the run's record, and sweeping dead runs').

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use hopwise_model::Mesh;

use crate::error::{LabError, io};
use crate::processes::parent::tie_to_parent;
use crate::processes::supervisor::Supervisor;

pub mod netns;
pub mod plan;
pub mod record;

pub use netns::Tools;

/// Where runs are recorded unless `--state` says otherwise (emptied at boot).
pub const STATE: &str = "/run/hopwise";

/// Removes what dead runs recorded under `state` left (for `hopwise up`); the ids swept. Nothing
/// to do, and nothing done, without `ip` and `nft`: no run could have made anything then.
pub fn sweep(state: &Path) -> Vec<String> {
    match Tools::find() {
        Ok(tools) => record::sweep(state, &tools),
        Err(_) => Vec::new(),
    }
}

/// `hopwise run …`
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The mesh file.
    #[arg(long)]
    pub config: PathBuf,
    /// The service this command is a copy of.
    #[arg(long)]
    pub service: String,
    /// Which copy (its index under `copies`): it decides the copy's addresses.
    #[arg(long, default_value_t = 0)]
    pub copy: usize,
    /// Certificates directory (default: the mesh file's `mesh.certs`).
    #[arg(long)]
    pub certs: Option<PathBuf>,
    /// Where runs are recorded, so a crashed one's leftovers can be found.
    #[arg(long, default_value = STATE)]
    pub state: PathBuf,
    /// The command and its arguments, run unchanged inside the namespace.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// What a run made, removed on drop (the record last, so a crash half-way is still swept).
struct Made<'a> {
    names: plan::Names,
    tools: &'a Tools,
    state: &'a Path,
}

impl Drop for Made<'_> {
    fn drop(&mut self) {
        netns::remove(&self.names, self.tools);
        record::forget(self.state, &self.names.id);
    }
}

/// Runs `args.command` captured until it exits; its exit status. `hopwise` is the binary to
/// start the proxy with.
pub fn run(args: &RunArgs, mesh: &Mesh, hopwise: &Path) -> Result<ExitStatus, LabError> {
    let tools = Tools::find()?;
    for id in record::sweep(&args.state, &tools) {
        crate::progress(&format!("hopwise run: removed what the dead run {id} left"));
    }
    let names = (0..8)
        .map(|_| format!("{:08x}", fastrand::u32(..)))
        .filter_map(|id| plan::Names::of(&id))
        .find(|n| !Path::new(&n.netns_path()).exists())
        .ok_or_else(|| LabError::Failed("no free run id".into()))?;
    let plan = plan::plan(mesh, &args.service, args.copy, names.clone())
        .map_err(|e| LabError::Failed(e.to_string()))?;
    let me = std::process::id();
    let mut rec = record::Record {
        id: names.id.clone(),
        service: args.service.clone(),
        copy: args.copy,
        pid: me,
        started: record::start_time(me).unwrap_or_default(),
        proxy: None,
    };
    record::write(&args.state, &rec)?;
    let _made = Made {
        names: names.clone(),
        tools: &tools,
        state: &args.state,
    };
    netns::build(&plan, &tools)?;
    let sup = Supervisor::new("`run`")?;
    let proxy = start_proxy(args, &plan, hopwise, &sup)?;
    rec.proxy = record::start_time(proxy).map(|t| (proxy, t));
    record::write(&args.state, &rec)?;
    let mut app = Command::new(&tools.ip)
        .args(["netns", "exec", &names.netns])
        .args(&args.command)
        .spawn()
        .map_err(io(format!("cannot start {}", args.command.join(" "))))?;
    loop {
        if let Some(status) = app.try_wait().map_err(io("cannot wait for the command"))? {
            sup.terminate(&[proxy], Duration::from_secs(5));
            return Ok(status);
        }
        if sup.interrupted() || sup.exited(proxy).is_some() {
            let _ = app.kill();
            let _ = app.wait();
            sup.check()?;
            return Err(LabError::Failed(format!(
                "the proxy of {} stopped; the command was stopped with it",
                args.service
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The copy's proxy, in this namespace, its capture listener inside the copy's; returns once
/// it has bound every listener (it prints its line then).
fn start_proxy(
    args: &RunArgs,
    plan: &plan::Plan,
    hopwise: &Path,
    sup: &Supervisor,
) -> Result<u32, LabError> {
    let mut cmd = Command::new(hopwise);
    cmd.arg("proxy")
        .arg("--config")
        .arg(&args.config)
        .args(["--service", &args.service, "--copy", &args.copy.to_string()])
        .arg("--capture")
        .arg(format!("127.0.0.1:{}", plan::CAPTURE_PORT))
        .arg("--capture-netns")
        .arg(plan.names.netns_path());
    if let Some(app) = plan.app_from_host {
        cmd.arg("--app").arg(app.to_string());
    }
    if let Some(c) = &args.certs {
        cmd.arg("--certs").arg(c);
    }
    tie_to_parent(&mut cmd);
    let stderr = args
        .state
        .join("runs")
        .join(format!("{}.proxy.stderr", plan.names.id));
    let (proc, stdout) = sup.spawn("the proxy", cmd, &stderr, true)?;
    let mut line = String::new();
    if let Some(out) = stdout {
        let mut reader = BufReader::new(out);
        let _ = reader.read_line(&mut line);
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    }
    if !line.starts_with("hopwise proxy for") {
        return Err(LabError::Start {
            name: format!("the proxy of {}", args.service),
            why: "it exited before listening".into(),
            stderr: proc.stderr_tail(40),
        });
    }
    crate::progress(&format!(
        "hopwise run: {} copy {} in namespace {} ({}), {}",
        args.service,
        args.copy,
        plan.names.netns,
        plan.net.app,
        line.trim()
    ));
    Ok(proc.pid)
}
