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
//! The run directory and stale processes are [`super::rundir`]'s.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hopwise_model::{Mesh, Run};

use super::captured::{self, Namespaces};
use super::command;
use super::load::{self, LoadTarget};
use super::plan::{Plan, Planned, PlannedCopy};
use super::rundir::{self, write};
use super::samples;
use super::{UpArgs, signals, table};
use crate::error::{LabError, io};
use crate::processes::parent::tie_to_parent;
use crate::processes::ports::hold_addrs;
use crate::processes::supervisor::{Proc, Supervisor};
use crate::progress;
use crate::samples::wire;

/// How long the whole mesh may take to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(40);

/// The children of one run, with the supervisor that owns them.
struct Children {
    sup: Supervisor,
    run: PathBuf,
    exe: PathBuf,
    control: Vec<Proc>,
    apps: Vec<Proc>,
    /// The users' commands (`run`), also in `apps`: watched for exits while `up` runs.
    commands: Vec<Proc>,
    proxies: Vec<Proc>,
    /// The captured copies' namespaces: last, so that on every exit path the supervisor
    /// (dropped first: fields drop in order) has killed what ran in them before they go.
    nets: Option<Namespaces>,
}

impl Children {
    fn spawn(&mut self, name: &str, args: &[String]) -> Result<Proc, LabError> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(args);
        self.spawn_command(name, cmd)
    }

    /// Copy `c`'s sample app: in its namespace when it is captured (made here).
    fn spawn_app(
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
    fn spawn_run(
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

fn started(sup: &Supervisor, p: &Proc) -> Result<(), LabError> {
    match sup.exited(p.pid) {
        Some(status) => Err(LabError::Start {
            name: p.name.clone(),
            why: format!("it exited ({status})"),
            stderr: p.stderr_tail(40),
        }),
        None => Ok(()),
    }
}

/// Waits until `ready` (checked every 20 ms) while `p` lives.
async fn wait_for<F, Fut>(
    sup: &Supervisor,
    p: &Proc,
    what: &str,
    mut ready: F,
) -> Result<(), LabError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        started(sup, p)?;
        if ready().await {
            return Ok(());
        }
        if start.elapsed() > READY_TIMEOUT {
            return Err(LabError::Start {
                name: p.name.clone(),
                why: format!("{what} within {READY_TIMEOUT:?}"),
                stderr: p.stderr_tail(40),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn listening(addr: SocketAddr) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_ok()
}

fn s(x: impl ToString) -> String {
    x.to_string()
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
    let held = hold_addrs(Plan::ports_needed(mesh) + 2)
        .map_err(io("cannot find free ports on 127.0.0.1"))?;
    let mut ports = held
        .addrs()
        .to_vec()
        .into_iter()
        .filter(|p| *p != args.control && *p != args.dashboard);
    let mut next = move || {
        ports
            .next()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)))
    };
    let mut plan = Plan::new(mesh, &mut next).map_err(|e| LabError::Failed(e.to_string()))?;
    let nets = if args.captured || mesh.capture.up {
        plan = captured::plan(plan, mesh).map_err(|e| LabError::Failed(e.to_string()))?;
        Some(Namespaces::new(&args.state)?)
    } else {
        None
    };
    let samples_file = run.join(samples::FILE);
    let text = serde_json::to_string_pretty(&samples::from_plan(file, &plan))
        .map_err(|e| LabError::Failed(format!("cannot render {}: {e}", samples::FILE)))?;
    write(&samples_file, &(text + "\n"))?;
    let certs = run.join("certs");
    hopwise_proxy::certs::write_dev_certs(mesh, &certs)
        .map_err(|e| LabError::Failed(format!("cannot write the run's certificates: {e}")))?;
    let dashboard = control_has_dashboard(exe).then_some(args.dashboard);
    let traces = dashboard
        .map(|_| super::traces::Prepared::new(file, run, args.traces))
        .transpose()?;

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
    let load_target = match (args.load, &plan.entry) {
        (Some(rate), Some(entry)) => plan.service(entry).map(|s| LoadTarget {
            service: s.name.clone(),
            rate,
            grpc: s.protocol == hopwise_model::Protocol::Grpc,
            apps: s.copies.iter().map(|c| c.app).collect(),
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
        ));
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

async fn start(
    kids: &mut Children,
    args: &UpArgs,
    mesh: &Mesh,
    file: &Path,
    plan: &Plan,
    (dashboard, traces): (Option<SocketAddr>, Option<&super::traces::Prepared>),
) -> Result<(), LabError> {
    let run = kids.run.clone();
    let state = run.join("state");
    let certs = run.join("certs");
    let mut control_args = vec![
        s("control"),
        s("--config"),
        s(traces.map_or(file, |t| t.file.as_path()).display()),
        s("--state"),
        s(state.display()),
        s("--listen"),
        s(args.control),
        s("--ca-cert"),
        s(certs.join("ca.pem").display()),
        s("--ca-key"),
        s(hopwise_proxy::certs::ca_key_path(&certs).display()),
    ];
    if let Some(d) = dashboard {
        control_args.extend([
            s("--dashboard"),
            s(d),
            s("--samples"),
            s(run.join(samples::FILE).display()),
        ]);
        control_args.extend(traces.iter().flat_map(|t| t.control_args()));
    }
    progress(&format!("starting the control plane on {}", args.control));
    let cp = kids.spawn("control", &control_args)?;
    let proxied: Vec<&Planned> = plan
        .services
        .iter()
        .filter(|p| p.copies.iter().any(|c| c.proxy.is_some()))
        .collect();
    let control = args.control;
    let tokens = state.join("tokens");
    wait_for(&kids.sup, &cp, "it did not listen and write the join tokens", || {
        let tokens = tokens.clone();
        let names: Vec<String> = proxied.iter().map(|p| p.name.clone()).collect();
        async move { listening(control).await && names.iter().all(|n| tokens.join(n).is_file()) }
    })
    .await?;
    kids.control.push(cp);

    for svc in &plan.services {
        if svc.sample.is_none() {
            continue;
        }
        for c in &svc.copies {
            let p = kids.spawn_app(mesh, file, svc, c)?;
            let (app, knobs) = (c.app, c.knobs);
            wait_for(
                &kids.sup,
                &p,
                "its app and knob ports did not listen",
                || async move {
                    listening(app).await
                        && match knobs {
                            Some(k) => listening(k).await,
                            None => true,
                        }
                },
            )
            .await?;
            kids.apps.push(p);
        }
    }
    progress("sample apps listening; starting the proxies");
    for svc in &plan.services {
        for c in &svc.copies {
            let Some(proxy) = &c.proxy else { continue };
            let mut a = vec![
                s("proxy"),
                s("--control"),
                format!("https://{}", args.control),
                s("--control-ca"),
                s(state.join("ca.pem").display()),
                s("--token-file"),
                s(tokens.join(&svc.name).display()),
                s("--service"),
                s(&svc.name),
                s("--copy"),
                s(c.copy),
                s("--inbound"),
                s(proxy.inbound),
                s("--admin"),
                s(proxy.admin),
                s("--cache"),
                s(run
                    .join("cache")
                    .join(format!("{}-{}", svc.name, c.copy))
                    .display()),
            ];
            if let Some(h) = svc.health_path() {
                a.extend([s("--health-path"), s(h)]);
            }
            if let Some(n) = kids.nets.as_mut() {
                n.before_proxy(mesh, svc, c)?;
            }
            for (to, port) in &proxy.upstreams {
                a.extend([s("--upstream"), format!("{to}={port}")]);
            }
            let made = kids
                .nets
                .as_mut()
                .and_then(|n| n.get_mut(&svc.name, c.copy));
            match &made {
                // Its capture listener in the namespace, and `--app` as the host reaches it.
                Some(m) => a.extend(m.proxy_args()),
                None => a.extend([s("--app"), s(c.app)]),
            }
            let p = kids.spawn(&format!("{}-{}.proxy", svc.name, c.copy), &a)?;
            if let Some(m) = kids
                .nets
                .as_mut()
                .and_then(|n| n.get_mut(&svc.name, c.copy))
            {
                m.proxy_started(p.pid)?;
            }
            let admin = proxy.admin;
            // What the last try got, for the error when it never answers.
            let last = std::rc::Rc::new(std::cell::RefCell::new(String::new()));
            let got = last.clone();
            let waited = wait_for(
                &kids.sup,
                &p,
                &format!("its admin endpoint {admin} did not answer /ready"),
                || {
                    let got = got.clone();
                    async move {
                        let r = wire::get(admin, "/ready").await;
                        *got.borrow_mut() = match &r {
                            Ok(r) => format!("it answered {}", r.status),
                            Err(e) => e.to_string(),
                        };
                        r.is_ok_and(|r| r.status == 200)
                    }
                },
            )
            .await;
            if let Err(LabError::Start { name, why, stderr }) = waited {
                let why = format!("{why} (last: {})", last.borrow());
                return Err(LabError::Start { name, why, stderr });
            }
            waited?;
            kids.proxies.push(p);
            if let Some(run) = &svc.run {
                // Its proxy is ready: the command may call its upstreams as it starts.
                let p = kids.spawn_run(file, svc, run, c)?;
                kids.apps.push(p.clone());
                let app = c.app;
                let what = "its command did not listen on its port";
                wait_for(&kids.sup, &p, what, || listening(app)).await?;
            }
        }
    }
    progress("proxies ready; waiting for every copy to be registered and healthy");
    let start = Instant::now();
    loop {
        let missing = registered(plan, &args.control.to_string(), &state).await;
        match missing {
            Ok(None) => return Ok(()),
            Ok(Some(why)) | Err(why) => {
                if start.elapsed() > READY_TIMEOUT {
                    return Err(LabError::Failed(format!(
                        "the mesh was not ready within {READY_TIMEOUT:?}: {why} (logs in {})",
                        run.join("logs").display()
                    )));
                }
            }
        }
        for p in kids.control.iter().chain(&kids.apps).chain(&kids.proxies) {
            started(&kids.sup, p)?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn app_args(file: &Path, run: &Path, svc: &Planned, c: &PlannedCopy) -> Vec<String> {
    let mut a = vec![
        s("sample"),
        s("--mesh"),
        s(file.display()),
        s("--service"),
        s(&svc.name),
        s("--copy"),
        s(c.copy),
        s("--listen"),
        s(if c.captured {
            captured::inside(c.app)
        } else {
            c.app
        }),
        s("--certs"),
        s(run.join("certs").display()),
        s("--run"),
        s(run.display()),
    ];
    if let Some(k) = c.knobs {
        a.extend([s("--knobs"), s(k)]);
    }
    for (to, port) in c.proxy.iter().flat_map(|p| p.upstreams.iter()) {
        a.extend([s("--upstream"), format!("{to}={port}")]);
    }
    // By name: `inventory` resolves in the copy's namespace, whose rules take the
    // connection to the proxy's capture listener.
    for to in &c.by_name {
        a.extend([s("--upstream"), format!("{to}={to}")]);
    }
    a
}

/// `None` when every copy of every proxied service is registered (and healthy, for samples);
/// otherwise what is missing. Asks with the state directory's `ca.pem` and `admin-token`.
async fn registered(plan: &Plan, server: &str, state: &Path) -> Result<Option<String>, String> {
    let server =
        hopwise_control::client::Server::from_state(server, state).map_err(|e| e.to_string())?;
    let status = hopwise_control::client::status(&server)
        .await
        .map_err(|e| e.to_string())?;
    for svc in &plan.services {
        let want = svc.copies.iter().filter(|c| c.proxy.is_some()).count();
        if want == 0 {
            continue;
        }
        let have = status
            .services
            .iter()
            .find(|s| s.service == svc.name)
            .map_or(0, |s| {
                s.copies
                    .iter()
                    .filter(|c| c.healthy || svc.health_path().is_none())
                    .count()
            });
        if have < want {
            return Ok(Some(format!(
                "{} has {have} of {want} copies registered and healthy",
                svc.name
            )));
        }
    }
    Ok(None)
}
