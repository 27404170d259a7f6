//! Starting one `hopwise up`'s processes in order, each waited for before the next needs it:
//! the control plane (listening, the join tokens written), every sample app (its app and knob
//! ports listening), every copy's proxy (its `/ready`; then its own command, if any), and at
//! last the control plane's word that every copy is registered and healthy. Each wait ends
//! with the child's stderr when the child exits or is not ready within [`READY_TIMEOUT`].
//! Who owns the children is `run.rs`'s.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use hopwise_model::Mesh;

use super::UpArgs;
use super::captured;
use super::plan::{Plan, Planned, PlannedCopy, PlannedGateway, ProxyPorts};
use super::run::Children;
use super::samples;
use super::traces::Prepared;
use crate::error::LabError;
use crate::processes::supervisor::{Proc, Supervisor};
use crate::progress;
use crate::samples::wire;

const READY_TIMEOUT: Duration = Duration::from_secs(40);

/// Starts everything `plan` runs, in order; returns once the mesh is ready.
pub(super) async fn start(
    kids: &mut Children,
    args: &UpArgs,
    mesh: &Mesh,
    file: &Path,
    plan: &Plan,
    (dashboard, traces): (Option<SocketAddr>, Option<&Prepared>),
) -> Result<(), LabError> {
    start_control(kids, args, plan, (dashboard, traces)).await?;
    start_apps(kids, mesh, file, plan).await?;
    progress("sample apps listening; starting the proxies");
    for svc in &plan.services {
        for c in &svc.copies {
            let Some(proxy) = &c.proxy else { continue };
            start_proxy(kids, args, mesh, svc, c, proxy).await?;
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
    if let Some(g) = &plan.gateway {
        start_gateway(kids, args, g).await?;
    }
    progress("proxies ready; waiting for every copy to be registered and healthy");
    wait_registered(kids, args, plan).await
}

/// The control plane, until it listens and has written a join token per proxied service.
async fn start_control(
    kids: &mut Children,
    args: &UpArgs,
    plan: &Plan,
    (dashboard, traces): (Option<SocketAddr>, Option<&Prepared>),
) -> Result<(), LabError> {
    let run = kids.run.clone();
    let (state, certs) = (run.join("state"), run.join("certs"));
    let mut control_args = vec![
        s("control"),
        s("--config"),
        // The file with its front door (super::gateway), and its spans' collector (traces).
        s(run.join("mesh.yaml").display()),
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
    let names: Vec<String> = (plan.services.iter())
        .filter(|p| p.copies.iter().any(|c| c.proxy.is_some()))
        .map(|p| p.name.clone())
        .chain(plan.gateway.iter().map(|g| g.name.clone()))
        .collect();
    let control = args.control;
    let tokens = state.join("tokens");
    wait_for(&kids.sup, &cp, "it did not listen and write the join tokens", || {
        let (tokens, names) = (tokens.clone(), names.clone());
        async move { listening(control).await && names.iter().all(|n| tokens.join(n).is_file()) }
    })
    .await?;
    kids.control.push(cp);
    Ok(())
}

/// Every copy of every sample, until its app and knob ports listen.
async fn start_apps(
    kids: &mut Children,
    mesh: &Mesh,
    file: &Path,
    plan: &Plan,
) -> Result<(), LabError> {
    for svc in plan.services.iter().filter(|s| s.sample.is_some()) {
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
    Ok(())
}

/// Copy `c`'s proxy (its capture listener in its namespace when captured), until `/ready`.
async fn start_proxy(
    kids: &mut Children,
    args: &UpArgs,
    mesh: &Mesh,
    svc: &Planned,
    c: &PlannedCopy,
    proxy: &ProxyPorts,
) -> Result<(), LabError> {
    let mut a = proxy_args(&kids.run, args, (&svc.name, c.copy), proxy.admin);
    a.extend([s("--inbound"), s(proxy.inbound)]);
    if let Some(h) = svc.health_path() {
        a.extend([s("--health-path"), s(h)]);
    }
    if let Some(n) = kids.nets.as_mut() {
        n.before_proxy(mesh, svc, c)?;
    }
    for (to, port) in &proxy.upstreams {
        a.extend([s("--upstream"), format!("{to}={port}")]);
    }
    match kids
        .nets
        .as_mut()
        .and_then(|n| n.get_mut(&svc.name, c.copy))
    {
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
    wait_ready(&kids.sup, &p, proxy.admin).await?;
    kids.proxies.push(p);
    Ok(())
}

/// What every proxy of the run is started with: the control plane, its join token, who it is,
/// its admin port and its cache.
fn proxy_args(
    run: &Path,
    args: &UpArgs,
    (service, copy): (&str, usize),
    admin: SocketAddr,
) -> Vec<String> {
    let state = run.join("state");
    vec![
        s("proxy"),
        s("--control"),
        format!("https://{}", args.control),
        s("--control-ca"),
        s(state.join("ca.pem").display()),
        s("--token-file"),
        s(state.join("tokens").join(service).display()),
        s("--service"),
        s(service),
        s("--copy"),
        s(copy),
        s("--admin"),
        s(admin),
        s("--cache"),
        s(run
            .join("cache")
            .join(format!("{service}-{copy}"))
            .display()),
    ]
}

/// The gateway's proxy (no app, no inbound port: it listens where its block says), until
/// `/ready`.
async fn start_gateway(
    kids: &mut Children,
    args: &UpArgs,
    g: &PlannedGateway,
) -> Result<(), LabError> {
    let a = proxy_args(&kids.run, args, (&g.name, 0), g.admin);
    progress(&format!(
        "starting the gateway {} on http://{}/",
        g.name, g.http
    ));
    let p = kids.spawn(&format!("{}-0.proxy", g.name), &a)?;
    wait_ready(&kids.sup, &p, g.admin).await?;
    kids.proxies.push(p);
    Ok(())
}

/// Until the proxy `p` answers 200 on `admin`'s `/ready`; the error says what it last got.
async fn wait_ready(sup: &Supervisor, p: &Proc, admin: SocketAddr) -> Result<(), LabError> {
    let last = std::rc::Rc::new(std::cell::RefCell::new(String::new()));
    let got = last.clone();
    let what = format!("its admin endpoint {admin} did not answer /ready");
    let waited = wait_for(sup, p, &what, || {
        let got = got.clone();
        async move {
            let r = wire::get(admin, "/ready").await;
            *got.borrow_mut() = match &r {
                Ok(r) => format!("it answered {}", r.status),
                Err(e) => e.to_string(),
            };
            r.is_ok_and(|r| r.status == 200)
        }
    })
    .await;
    match waited {
        Err(LabError::Start { name, why, stderr }) => {
            let why = format!("{why} (last: {})", last.borrow());
            Err(LabError::Start { name, why, stderr })
        }
        other => other,
    }
}

/// Until the control plane says every copy is registered (and healthy, for samples), while
/// every child lives.
async fn wait_registered(kids: &Children, args: &UpArgs, plan: &Plan) -> Result<(), LabError> {
    let state = kids.run.join("state");
    let start = Instant::now();
    loop {
        match registered(plan, &args.control.to_string(), &state).await {
            Ok(None) => return Ok(()),
            Ok(Some(why)) | Err(why) => {
                if start.elapsed() > READY_TIMEOUT {
                    return Err(LabError::Failed(format!(
                        "the mesh was not ready within {READY_TIMEOUT:?}: {why} (logs in {})",
                        kids.run.join("logs").display()
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

pub(super) fn s(x: impl ToString) -> String {
    x.to_string()
}

pub(super) fn app_args(file: &Path, run: &Path, svc: &Planned, c: &PlannedCopy) -> Vec<String> {
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
