//! The processes of one `hopwise up`: the control plane, a sample app and a proxy per copy; waiting until every copy is registered and healthy; stopping them all.
//!
//! Every child runs in its own process group (a terminal's Ctrl-C reaches only `up`, which then
//! stops them gently: proxies first, so they leave the registry and drain, then the apps, then
//! the control plane) and is killed on every other exit path (the [`Supervisor`] kills what it
//! owns when dropped). Each child asks the kernel for SIGTERM when `up` dies
//! ([`crate::processes::parent`]), so a SIGKILLed `up` leaves nothing behind either; and the next `up`
//! kills any process the run directory lists that is still ours (its command line names the
//! run directory) before it wipes the directory and starts clean.
//!
//! The run directory and stale processes are [`super::rundir`]'s; starting the children in
//! order and waiting for each, [`super::start`]'s.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hopwise_model::{Mesh, Run};

use super::captured::{self, Namespaces};
use super::command;
use super::gateway::Front;
use super::load::{self, LoadTarget};
use super::plan::{Plan, Planned, PlannedCopy};
use super::rundir::{self, write};
use super::samples;
use super::start::{app_args, s, start};
use super::{UpArgs, signals, table};
use crate::error::{LabError, io};
use crate::processes::parent::tie_to_parent;
use crate::processes::ports::hold;
use crate::processes::supervisor::{Proc, Supervisor};

/// How long the whole mesh may take to be ready.
/// The children of one run, with the supervisor that owns them.
pub(super) struct Children {
    pub(super) sup: Supervisor,
    pub(super) run: PathBuf,
    exe: PathBuf,
    pub(super) control: Vec<Proc>,
    pub(super) apps: Vec<Proc>,
    /// The users' commands (`run`), also in `apps`: watched for exits while `up` runs.
    commands: Vec<Proc>,
    pub(super) proxies: Vec<Proc>,
    /// The captured copies' namespaces: last, so that on every exit path the supervisor
    /// (dropped first: fields drop in order) has killed what ran in them before they go.
    pub(super) nets: Option<Namespaces>,
}

impl Children {
    pub(super) fn spawn(&mut self, name: &str, args: &[String]) -> Result<Proc, LabError> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(args);
        self.spawn_command(name, cmd)
    }

    /// Copy `c`'s sample app: in its namespace when it is captured (made here).
    pub(super) fn spawn_app(
        &mut self,
        mesh: &Mesh,
        file: &Path,
        svc: &Planned,
        c: &PlannedCopy,
    ) -> Result<Proc, LabError> {
        let name = format!("{}-{}.app", svc.name, c.copy);
        let mut args = app_args(file, &self.run, svc, c);
        let Some(nets) = self.nets.as_mut().filter(|_| c.captured) else {
            return self.spawn(&name, &args);
        };
        // The knobs stay on the host's loopback (up's own namespace), where `hopwise fault`
        // and the dashboard reach them.
        args.extend([
            s("--knobs-netns"),
            format!("/proc/{}/ns/net", std::process::id()),
        ]);
        let mut cmd = nets
            .make(mesh, &svc.name, c.copy, c.app.port())?
            .command(&self.exe);
        cmd.args(&args);
        self.spawn_command(&name, cmd)
    }

    /// Copy `c`'s own command `run`, in its namespace when it is captured (made before its
    /// proxy, [`Namespaces::before_proxy`]).
    pub(super) fn spawn_run(
        &mut self,
        file: &Path,
        svc: &Planned,
        run: &Run,
        c: &PlannedCopy,
    ) -> Result<Proc, LabError> {
        let launch = command::launch(run, file.parent().unwrap_or(Path::new("/")), c);
        let netns = self
            .nets
            .as_mut()
            .and_then(|n| n.get_mut(&svc.name, c.copy));
        let cmd = command::command(&self.exe, &launch, netns.map(|n| &*n));
        let p = self.spawn_logged(&format!("{}-{}.run", svc.name, c.copy), cmd, true)?;
        self.commands.push(p.clone());
        Ok(p)
    }

    fn spawn_command(&mut self, name: &str, cmd: Command) -> Result<Proc, LabError> {
        self.spawn_logged(name, cmd, false)
    }

    /// Starts `cmd` tied to `up`, its stderr (and with `stdout`, its stdout) in `logs/`.
    fn spawn_logged(
        &mut self,
        name: &str,
        mut cmd: Command,
        stdout: bool,
    ) -> Result<Proc, LabError> {
        tie_to_parent(&mut cmd);
        let logs = self.run.join("logs");
        let (p, out) = self
            .sup
            .spawn(name, cmd, &logs.join(format!("{name}.stderr")), stdout)?;
        if let Some(out) = out {
            command::keep_stdout(out, &logs.join(format!("{name}.stdout")))?;
        }
        let pids: String = self.sup.pids().iter().map(|p| format!("{p}\n")).collect();
        write(&self.run.join("pids"), &pids)?;
        Ok(p)
    }

    /// Proxies first (they deregister and drain), then the apps, then the control plane.
    /// Each group is asked together and waited for together.
    fn stop(&mut self) {
        for (group, grace) in [
            (std::mem::take(&mut self.proxies), Duration::from_secs(5)),
            (std::mem::take(&mut self.apps), Duration::from_secs(2)),
            (std::mem::take(&mut self.control), Duration::from_secs(3)),
        ] {
            let pids: Vec<u32> = group.iter().map(|p| p.pid).collect();
            self.sup.terminate(&pids, grace);
        }
        let _ = std::fs::remove_file(self.run.join("pids"));
        // Every process stopped: the namespaces, links, hosts files and records go.
        self.nets = None;
    }
}

/// Does this build's `hopwise control` serve the dashboard? (It gains `--dashboard` and
/// `--samples` in a parallel change; until then `up` runs without them.)
fn control_has_dashboard(exe: &Path) -> bool {
    Command::new(exe)
        .args(["control", "--help"])
        .output()
        .is_ok_and(|o| {
            let help = String::from_utf8_lossy(&o.stdout);
            help.contains("--dashboard") && help.contains("--samples")
        })
}

/// Runs `up` on a mesh file already read and checked by the binary.
pub fn up(args: &UpArgs, mesh: &Mesh, file: &Path, out: &mut dyn Write) -> Result<(), LabError> {
    let exe = std::env::current_exe().map_err(io("cannot find the hopwise executable"))?;
    let run = rundir::run_dir(mesh)?;
    rundir::prepare(&run, &exe)?;
    let result = up_in(args, mesh, file, &exe, &run, out);
    let _ = std::fs::remove_file(run.join("up.pid"));
    result
}

fn up_in(
    args: &UpArgs,
    mesh: &Mesh,
    file: &Path,
    exe: &Path,
    run: &Path,
    out: &mut dyn Write,
) -> Result<(), LabError> {
    // Held until `up` returns: children bind them, and bind them again when restarted.
    // Two more than the plan may ask for, as the control plane's and the dashboard's are
    // skipped: the plan must never run short (it would get port 0, which nothing can reach).
    let held = hold(Plan::ports_needed(mesh) + 2)?;
    let mut ports = held
        .addrs()
        .iter()
        .copied()
        .filter(|p| *p != args.control && *p != args.dashboard);
    let mut short = false;
    let mut next = || {
        ports.next().unwrap_or_else(|| {
            short = true;
            SocketAddr::from(([127, 0, 0, 1], 0))
        })
    };
    // The front door (docs/up.md): the file's own gateway, or one `up` adds for the entry.
    let front = Front {
        entry: Plan::entry_of(mesh),
        listen: next(),
    };
    let text = std::fs::read_to_string(file).map_err(io("cannot read the mesh file"))?;
    let fronted = front.apply(&text);
    let with_gateway = Mesh::from_yaml(&fronted.text).ok();
    let mesh = with_gateway.as_ref().unwrap_or(mesh);
    let mut plan = Plan::new(mesh, &mut next).map_err(|e| LabError::Failed(e.to_string()))?;
    if short {
        // Port 0 would be bound somewhere nobody is told of: refuse rather than run it.
        return Err(LabError::Failed(format!(
            "the plan for {} asked for more than the {} ports `up` held (a bug in Plan::ports_needed)",
            file.display(),
            held.addrs().len()
        )));
    }
    let nets = if args.captured || mesh.capture.up {
        plan = captured::plan(plan, mesh).map_err(|e| LabError::Failed(e.to_string()))?;
        Some(Namespaces::new(&args.state)?)
    } else {
        None
    };
    let samples_file = run.join(samples::FILE);
    let text = serde_json::to_string_pretty(&samples::from_plan(file, &plan, args.control))
        .map_err(|e| LabError::Failed(format!("cannot render {}: {e}", samples::FILE)))?;
    write(&samples_file, &(text + "\n"))?;
    let certs = run.join("certs");
    hopwise_proxy::certs::write_dev_certs(mesh, &certs)
        .map_err(|e| LabError::Failed(format!("cannot write the run's certificates: {e}")))?;
    let dashboard = control_has_dashboard(exe).then_some(args.dashboard);
    let traces = dashboard
        .map(|_| super::traces::Prepared::new(file, run, args.traces, &front))
        .transpose()?;
    // What the control plane reads: the file with its front door (and, with a dashboard,
    // its spans sent there: `traces` wrote it).
    if traces.is_none() {
        write(&run.join("mesh.yaml"), &fronted.text)?;
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("cannot start up's runtime"))?;
    let mut kids = Children {
        sup: Supervisor::quiet(),
        run: run.to_owned(),
        exe: exe.to_owned(),
        control: Vec::new(),
        apps: Vec::new(),
        commands: Vec::new(),
        proxies: Vec::new(),
        nets,
    };
    // Children are spawned from this thread only: their parent-death signal follows the
    // thread that forked them.
    let ready = rt.block_on(async {
        tokio::select! {
            r = start(&mut kids, args, mesh, file, &plan, (dashboard, traces.as_ref())) => r,
            () = signals() => Err(LabError::Interrupted { who: "`up`" }),
        }
    });
    if let Err(e) = ready {
        kids.stop();
        return Err(e);
    }
    // Through the gateway when there is one, as a client outside the mesh would come.
    let load_target = match (args.load, &plan.entry) {
        (Some(rate), Some(entry)) => plan.service(entry).map(|s| LoadTarget {
            service: s.name.clone(),
            rate,
            grpc: s.protocol == hopwise_model::Protocol::Grpc,
            apps: match &plan.gateway {
                Some(g) => vec![g.http],
                None => s.copies.iter().map(|c| c.app).collect(),
            },
            via: plan.gateway.as_ref().map(|g| g.name.clone()),
        }),
        _ => None,
    };
    let shown = table::text(
        mesh,
        &plan,
        args.control,
        dashboard,
        load_target.as_ref(),
        run,
    );
    let _ = out.write_all(shown.as_bytes());
    if let Some(t) = &traces {
        let _ = writeln!(out, "{}", t.note);
        rt.spawn(super::traces::follow(
            file.to_owned(),
            t.file.clone(),
            t.receiver,
            args.traces,
            front.clone(),
        ));
    } else {
        let _ = writeln!(out, "{}", fronted.note);
    }
    let _ = out.flush();
    if args.load.is_some() && load_target.is_none() {
        let _ = writeln!(out, "load: no entry service runs here; no load is sent");
    }
    let stats = rt.block_on(async {
        match &load_target {
            Some(t) => {
                let stats = load::Stats::new();
                tokio::select! {
                    () = load::run(t, &stats, out) => {}
                    () = command::until_signal(&kids.sup, &kids.commands) => {}
                }
                Some(stats)
            }
            None => {
                command::until_signal(&kids.sup, &kids.commands).await;
                None
            }
        }
    });
    drop(rt);
    kids.stop();
    if let Some(stats) = stats {
        let _ = writeln!(out, "{}", stats.summary("load, total"));
    }
    let _ = writeln!(out, "stopped: every process `up` started has exited");
    let _ = out.flush();
    Ok(())
}
