//! `hopwise run --service S [--copy N] -- CMD ARGS…` (docs/capture.md): one copy of a service
//! run captured. The command runs in a network namespace of its own, linked to the host's by
//! a veth pair, with every service's name in its hosts file; nftables rules inside it send
//! its outbound TCP to the copy's proxy and inbound TCP from the host to its app. The proxy
//! runs in the host's namespace, as every other copy's does, with its capture listener bound
//! inside the copy's. When the command ends (or on Ctrl-C) all of it is removed; what a
//! crashed run left, the next `run` or `up` removes ([`record`]).
//!
//! The parts: [`plan`] (pure: names, addresses, commands, rules, hosts file), [`netns`] (runs
//! them, and removes them), [`record`] (the run's record, and sweeping dead runs'), [`copy`]
//! (one copy's namespace made and owned: what `run` and a captured `hopwise up` share), [`init`]
//! (`hopwise capture-init`: the same redirect loaded in a Kubernetes pod, the proxy's uid let
//! through).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use hopwise_model::Mesh;

use crate::error::{LabError, io};
use crate::processes::parent::tie_to_parent;
use crate::processes::supervisor::Supervisor;

pub mod copy;
pub mod init;
pub mod netns;
pub mod plan;
pub mod record;

pub use copy::CapturedCopy;
pub use netns::Tools;

/// Where runs are recorded unless `--state` says otherwise (emptied at boot).
pub const STATE: &str = "/run/hopwise";

/// Removes what dead runs recorded under `state` left (for `hopwise up`); the ids swept. Nothing
/// to do, and nothing done, without `ip` and `nft` or `iptables-restore`: no run could have
/// made anything then.
pub fn sweep(state: &Path) -> Vec<String> {
    match Tools::find() {
        Ok(tools) => record::sweep(state, &tools),
        Err(_) => Vec::new(),
    }
}

/// Is this process's effective uid 0 (`/proc/self/status`)? Capture needs root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
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

/// Runs `args.command` captured until it exits; its exit status. `hopwise` is the binary to
/// start the proxy with.
pub fn run(args: &RunArgs, mesh: &Mesh, hopwise: &Path) -> Result<ExitStatus, LabError> {
    let tools = Tools::find()?;
    for id in record::sweep(&args.state, &tools) {
        crate::progress(&format!("hopwise run: removed what the dead run {id} left"));
    }
    let app_port = mesh
        .services
        .get(&args.service)
        .and_then(|s| s.copies.get(args.copy))
        .and_then(|c| c.app)
        .map(|a| a.port());
    let mut made = CapturedCopy::make(
        mesh,
        &args.service,
        args.copy,
        app_port,
        &args.state,
        &tools,
    )?;
    let sup = Supervisor::new("`run`")?;
    let (proxy, line) = start_proxy(args, &made, hopwise, &sup)?;
    made.proxy_started(proxy)?;
    // Said once the record names the proxy: a run killed after this line leaves nothing the
    // next one cannot find.
    let plan = made.plan();
    crate::progress(&format!(
        "hopwise run: {} copy {} in namespace {} ({}), {}",
        args.service,
        args.copy,
        plan.names.netns,
        plan.net.app,
        line.trim()
    ));
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| LabError::Failed("no command to run".into()))?;
    let mut app = made
        .command(program)
        .args(rest)
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
/// it has bound every listener, with the line it prints then.
fn start_proxy(
    args: &RunArgs,
    made: &CapturedCopy,
    hopwise: &Path,
    sup: &Supervisor,
) -> Result<(u32, String), LabError> {
    let plan = made.plan();
    let mut cmd = Command::new(hopwise);
    cmd.arg("proxy")
        .arg("--config")
        .arg(&args.config)
        .args(["--service", &args.service, "--copy", &args.copy.to_string()])
        .args(made.proxy_args());
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
    Ok((proc.pid, line))
}
