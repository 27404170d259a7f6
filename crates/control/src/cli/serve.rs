//! `hopwise control`: the control plane started on its store (embedded or etcd), served on its
//! port (with the dashboard and the watched `--config` file) until the binary says stop. What
//! to tell the operator comes back as text ([`Serving::summary`], [`refusal`]); the binary
//! prints it, sets up logging and chooses the exit status.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use hopwise_analyze::Finding;

use super::{CliError, ControlArgs, read, runtime};
use crate::api::{self, PlaneHandle, Running};
use crate::client::{self, Server};
use crate::dashboard::{self, Dashboard};
use crate::pb;
use crate::plane::{CaFiles, ConfigFile, Options, Plane, StartError, Started};
use crate::store::etcd::{Access, EtcdSpec, EtcdStore, Keys};
use crate::store::{Store, StoreError, TOKENS_DIR};

/// A control plane serving (and its dashboard), until [`Serving::run_until`] stops it.
#[derive(Debug)]
pub struct Serving {
    rt: tokio::runtime::Runtime,
    running: Running,
    dashboard: Option<Dashboard>,
    summary: String,
}

impl Serving {
    /// What to tell the operator: where it listens, the state, the files it wrote, the notes.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Runs `task` beside the API on the control plane's runtime, given the running plane
    /// (the binary's Kubernetes discovery, which this crate does not link). It ends with the
    /// runtime.
    pub fn spawn<F>(&self, task: impl FnOnce(PlaneHandle) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(task(self.running.handle()));
    }

    /// Serves until `stop` resolves (the binary's SIGTERM or Ctrl-C), then ends every stream
    /// and stops.
    pub fn run_until(self, stop: impl Future<Output = ()>) -> Result<(), CliError> {
        let Serving {
            rt,
            running,
            dashboard,
            ..
        } = self;
        rt.block_on(async move {
            stop.await;
            tracing::info!("stopping");
            if let Some(d) = dashboard {
                d.stop();
            }
            running.shutdown().await?;
            Ok(())
        })
    }
}

/// What `hopwise control` shows when `hopwise check` refuses the mesh file it was started on
/// (`CliError::Start(StartError::Refused { .. })`): the findings, as `apply` shows them.
pub fn refusal(name: &str, findings: &[Finding]) -> String {
    client::render_apply(&pb::ApplyResponse {
        findings: findings.iter().map(api::wire::finding).collect(),
        message: format!("{name}: `hopwise check` finds error(s); the control plane did not start"),
        ..Default::default()
    })
}

/// Starts the control plane of `args` and serves it in the background.
pub fn start(args: ControlArgs) -> Result<Serving, CliError> {
    start_with(args, None, None)
}

/// [`start`], with `reviewer` vouching for tokens that are not join tokens, and `mesh` the
/// mesh file to start on when no `--config` is given (`--kubernetes`: the binary makes both,
/// the `Mesh` resource's file the second, so this crate links no Kubernetes client).
pub fn start_with(
    args: ControlArgs,
    reviewer: Option<std::sync::Arc<dyn crate::review::TokenReviewer>>,
    mesh: Option<ConfigFile>,
) -> Result<Serving, CliError> {
    let Some(state) = args.state.clone() else {
        return Err(CliError::Usage(
            "--state DIR is required to run the control plane".into(),
        ));
    };
    if let Some(d) = args.dashboard
        && !d.ip().is_loopback()
    {
        return Err(CliError::Usage(format!(
            "--dashboard {d}: the dashboard is plain HTTP without authentication (and it can \
             change the sample apps' faults), so it listens on a loopback address only \
             (127.0.0.1 or [::1])"
        )));
    }
    if let Some(t) = args.traces_listen
        && !t.ip().is_loopback()
    {
        return Err(CliError::Usage(format!(
            "--traces-listen {t}: the trace receiver has no authentication, so it listens on a \
             loopback address only"
        )));
    }
    let mut options = options(&args)?;
    if options.config.is_none() {
        options.config = mesh;
    }
    let spec = shared_store(&args)?;
    // The runtime comes first: the etcd store is opened on it, and `Plane::start` (on this
    // thread, outside it) blocks on it to write.
    let rt = runtime()?;
    let started = start_plane(&rt, spec.as_ref(), &state, &options)?;
    let (running, dashboard, summary) = rt.block_on(listen(args, started, reviewer))?;
    Ok(Serving {
        rt,
        running,
        dashboard,
        summary,
    })
}

/// The plane's options from the flags (the mesh file read).
fn options(args: &ControlArgs) -> Result<Options, CliError> {
    let config = match &args.config {
        Some(path) => Some(ConfigFile {
            name: path.display().to_string(),
            text: read(path)?,
        }),
        None => None,
    };
    let ca_files = match (&args.ca_cert, &args.ca_key) {
        (Some(cert), Some(key)) => Some(CaFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => None,
    };
    Ok(Options {
        config,
        ca_files,
        cert_lifetime: args.cert_lifetime.get(),
    })
}

/// `--store etcd://…`, and the credentials and store key that reach it.
type SharedStore = (EtcdSpec, (Access, Keys));

/// `--store etcd://…` and what reaching it needs, or `None` for the embedded store.
fn shared_store(args: &ControlArgs) -> Result<Option<SharedStore>, CliError> {
    let Some(text) = &args.store else {
        return Ok(None);
    };
    let spec =
        EtcdSpec::parse(text).map_err(|reason| CliError::Usage(format!("--store {reason}")))?;
    // A build without etcd says so before asking for etcd's flags.
    if !cfg!(feature = "etcd") {
        return Err(StoreError::NoEtcd { url: spec.url() }.into());
    }
    let access = args.etcd.resolve(&spec)?;
    Ok(Some((spec, access)))
}

/// Opens the store and starts the plane on it.
fn start_plane(
    rt: &tokio::runtime::Runtime,
    spec: Option<&SharedStore>,
    state: &std::path::Path,
    options: &Options,
) -> Result<Started, CliError> {
    let mut attempt = 0;
    loop {
        let store = match spec {
            None => Store::open(state)?,
            Some((spec, (access, keys))) => Store::Etcd(rt.block_on(EtcdStore::open(
                spec.clone(),
                access,
                keys.clone(),
                state,
            ))?),
        };
        attempt += 1;
        match Plane::start(store, options.clone(), SystemTime::now()) {
            // Two replicas initialising an empty etcd at once: one wins, the other reads
            // what it wrote and starts on it.
            Err(StartError::Store(StoreError::Conflict { .. })) if attempt < 3 => continue,
            other => return Ok(other?),
        }
    }
}

/// Listens and serves the plane, watches `--config`, starts the dashboard; returns them with
/// the summary to show.
async fn listen(
    args: ControlArgs,
    started: Started,
    reviewer: Option<std::sync::Arc<dyn crate::review::TokenReviewer>>,
) -> Result<(Running, Option<Dashboard>, String), CliError> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| CliError::Listen {
            addr: args.listen,
            source,
        })?;
    let local = listener.local_addr().map_or(args.listen, |a| a);
    let mut text = summary(&started.plane, local, &started);
    let plane = started.plane;
    let mut own = local;
    // Listening on every address: talk to itself on loopback.
    if own.ip().is_unspecified() {
        own.set_ip(if own.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    let dir = plane.store().dir().to_owned();
    let limits = crate::conn::Limits {
        connections_per_address: args.max_connections_per_address,
        connections: args.max_connections,
        first_request: args.first_request_timeout.get(),
        idle: args.idle_timeout.get(),
        ..crate::conn::Limits::default()
    };
    let running = api::spawn_with_options(plane, listener, api::Options { limits, reviewer })?;
    if let Some(path) = args.config {
        let seen = std::fs::read_to_string(&path).ok();
        tokio::spawn(watch_file(path, seen, (own.to_string(), dir)));
    }
    let dashboard = match args.dashboard {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| CliError::Listen { addr, source })?;
            let traces = match args.traces_listen {
                Some(t) => Some(
                    tokio::net::TcpListener::bind(t)
                        .await
                        .map_err(|source| CliError::Listen { addr: t, source })?,
                ),
                None => None,
            };
            let d = dashboard::spawn_with_traces(
                running.handle(),
                listener,
                args.samples.clone(),
                traces,
            )
            .map_err(|source| CliError::Listen { addr, source })?;
            text.push_str(&format!("dashboard: http://{}/\n", d.addr));
            if let Some(t) = d.traces {
                text.push_str(&format!("dashboard traces (OTLP/gRPC): {t}\n"));
            }
            Some(d)
        }
        None => None,
    };
    for note in &started.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    Ok((running, dashboard, text))
}

/// Where it listens and what it wrote.
fn summary(plane: &Plane, local: std::net::SocketAddr, started: &Started) -> String {
    let at = if plane.shared() {
        format!("shared, revision {}", plane.version())
    } else {
        format!("start {}", plane.version() >> 32)
    };
    format!(
        "hopwise control: listening on {} (TLS 1.3 as {})\n\
         state: {} (mesh {}, config version {}, {at})\n\
         trust bundle: {}\n\
         admin token: {}\n\
         join tokens: {} ({} service(s))\n",
        local,
        plane.mesh().control_identity(),
        plane.store().location(),
        plane.mesh().name,
        plane.config_version(),
        started.bundle_file.display(),
        started
            .admin_token_file
            .as_ref()
            .map_or("-".to_owned(), |p| p.display().to_string()),
        plane.store().dir().join(TOKENS_DIR).display(),
        started.token_files.len(),
    )
}

/// How often `--config FILE` is looked at for edits.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Watches the mesh file the control plane was started with: whenever its content differs from
/// what was last seen, it goes to the running control plane exactly as `hopwise control apply`
/// sends it (checked, refused with the findings on error), and the outcome is logged. Polls the
/// content (a small file) rather than trusting timestamps: editors that write in place, write a
/// new file and rename it, or keep the mtime are all seen. A file caught half-written is refused
/// and applied at the next look, once complete.
async fn watch_file(path: PathBuf, mut seen: Option<String>, (addr, state): (String, PathBuf)) {
    let name = path.display().to_string();
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Gone for a moment (an editor's rename), or unreadable: look again later.
        // A small file: reading it blocks this worker for microseconds.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if seen.as_deref() == Some(text.as_str()) {
            continue;
        }
        // Read each time: a CA rotation rewrites `ca.pem`.
        let applied = match Server::from_state(&addr, &state) {
            Ok(server) => client::apply(&server, &text, &name).await,
            Err(e) => Err(e),
        };
        match applied {
            Ok(r) if r.applied && r.unchanged => {
                tracing::info!("{name} changed on disk; the mesh file in force is the same");
            }
            Ok(r) if r.applied => tracing::info!(
                "{name} changed on disk: applied as config version {} (version {})",
                r.config_version,
                r.version
            ),
            Ok(r) => tracing::warn!(
                "{name} changed on disk: refused, nothing changed\n{}",
                client::render_apply(&r).trim_end()
            ),
            Err(e) => {
                // The control plane is not answering: try this content again next time.
                tracing::warn!("{name} changed on disk, but it could not be applied: {e}");
                continue;
            }
        }
        seen = Some(text);
    }
}
