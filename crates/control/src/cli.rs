//! The command line of the control plane, which the `hopwise` binary flattens into its own:
//! `hopwise control --config MESH.yaml --state DIR --listen ADDR:PORT` runs it (TLS only),
//! `hopwise control apply FILE --server ADDR --state DIR` changes its mesh file,
//! `hopwise control rotate-ca --stage add|reissue|retire --server ADDR --state DIR` rotates its
//! CA, and `hopwise status --server ADDR --state DIR` shows its proxies and copies (the last
//! three trust `DIR/ca.pem` and send `DIR/admin-token`, or `--ca FILE --admin-token FILE`). [`run`] writes what the user
//! sees to the writer it is given and returns the exit status by the binary's convention (0 done,
//! 1 refused because of error findings, 2 bad input); errors go back to the binary to print.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hopwise_model::Dur;

use crate::api::{self, ServeError};
use crate::client::{self, ClientError, Server};
use crate::plane::{CaFiles, ConfigFile, Options, Plane, StartError};
use crate::store::etcd::{EtcdSpec, EtcdStore};
use crate::store::{ADMIN_TOKEN_FILE, BUNDLE_FILE, Store, StoreError, TOKENS_DIR};

mod etcd;
mod token;

pub use token::TokenAction;

/// Exit status: done.
pub const EXIT_OK: u8 = 0;
/// Exit status: refused because `hopwise check` found an error.
pub const EXIT_FINDINGS: u8 = 1;
/// Exit status: the input could not be used.
pub const EXIT_BAD_INPUT: u8 = 2;

/// `hopwise control …` and `hopwise status`.
// Parsed once per process; boxing `ControlArgs` would only cost its destructuring patterns.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run the control plane (CA, registry, configuration streamed to proxies), or change its
    /// mesh file with `hopwise control apply`.
    Control(ControlArgs),
    /// Show a running control plane's proxies, their versions and acknowledgements, and the
    /// copies each service has.
    Status {
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// A running control plane and what lets the command line in: the CA bundle its certificate
/// must chain to, and the admin token. `--state DIR` stands for `--ca DIR/ca.pem
/// --admin-token DIR/admin-token` (what the control plane writes there); --ca and --admin-token
/// win over it.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// The control plane's address: `HOST:PORT` or `https://HOST:PORT` (`127.0.0.1:7900`).
    #[arg(long)]
    pub server: String,
    /// The control plane's state directory: its `ca.pem` and `admin-token` are used.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// The CA bundle (PEM) the control plane's certificate must chain to (`DIR/ca.pem`).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// The file holding the control plane's admin token (`DIR/admin-token`, owner-only).
    #[arg(long)]
    pub admin_token: Option<PathBuf>,
}

impl ServerArgs {
    /// Reads the files; an error names the flag and the file that is missing.
    pub fn resolve(&self) -> Result<Server, ClientError> {
        let pick =
            |given: &Option<PathBuf>, file: &str, flag: &'static str| match (given, &self.state) {
                (Some(p), _) => Ok((p.clone(), flag)),
                (None, Some(dir)) => Ok((dir.join(file), "--state")),
                (None, None) => Err(ClientError::NoCredentials {
                    server: self.server.clone(),
                    missing: flag,
                }),
            };
        let ca = pick(&self.ca, BUNDLE_FILE, "--ca")?;
        let token = pick(&self.admin_token, ADMIN_TOKEN_FILE, "--admin-token")?;
        Server::from_files(&self.server, (&ca.0, ca.1), Some((&token.0, token.1)))
    }
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ControlArgs {
    #[command(subcommand)]
    pub action: Option<ControlAction>,
    /// The mesh file. Required on the first start; afterwards the state directory's copy is in
    /// force and changes go through `hopwise control apply`. While the control plane runs, this
    /// file is watched: an edit is checked and applied as `hopwise control apply` would.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The state directory: CA, join tokens (`DIR/tokens/<service>`), the mesh file in force.
    /// With `--store etcd://…` it holds only the token files and `ca.pem` for local proxies.
    #[arg(long, required = true)]
    pub state: Option<PathBuf>,
    /// Where the state is kept: in --state (the default), or in etcd, shared by several
    /// replicas: `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]` (prefix `/hopwise` by default;
    /// `etcds://` for TLS). Needs --store-key.
    /// The first replica on an empty prefix needs --config; later ones take the stored state.
    /// etcd needs a build with it: `cargo build --features etcd`.
    #[arg(long)]
    pub store: Option<String>,
    /// The shared store's key, TLS and credentials (`cli/etcd.rs`).
    #[command(flatten)]
    pub etcd: etcd::EtcdArgs,
    /// Where to listen (TLS 1.3 with the control plane's own certificate; any address, e.g.
    /// 0.0.0.0:7900 to serve other machines).
    #[arg(long, default_value = "127.0.0.1:7900")]
    pub listen: SocketAddr,
    /// Lifetime of issued certificates (`24h`, `10m`, `30s`).
    #[arg(long, default_value = "24h")]
    pub cert_lifetime: Dur,
    /// The operator's CA certificate (PEM), instead of a generated one. With --ca-key.
    #[arg(long, requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// The private key of --ca-cert (PEM, PKCS #8), readable by the control plane only.
    #[arg(long, requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// Serve the dashboard (a web page: the live service graph, policies, findings,
    /// calculators, fault knobs) on this loopback address (plain HTTP). Off when absent.
    #[arg(long)]
    pub dashboard: Option<SocketAddr>,
    /// Open connections allowed from one client address (an IPv6 client: its /64); past it,
    /// new ones are closed at once. Proxies on one host each hold one.
    #[arg(long, default_value_t = crate::conn::Limits::default().connections_per_address)]
    pub max_connections_per_address: usize,
    /// Open connections allowed on the control port in all.
    #[arg(long, default_value_t = crate::conn::Limits::default().connections)]
    pub max_connections: usize,
    /// How long a new connection may go without a request after its TLS handshake.
    #[arg(long, default_value = "5s")]
    pub first_request_timeout: Dur,
    /// How long a connection may have no request in flight (a proxy's snapshot stream always
    /// is) before it is closed.
    #[arg(long, default_value = "60s")]
    pub idle_timeout: Dur,
    /// The sample apps' fault knobs, as `hopwise up` writes them (JSON; re-read on every
    /// request; a missing file shows no knobs). Used by the dashboard.
    #[arg(long, requires = "dashboard")]
    pub samples: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum ControlAction {
    /// Send a new mesh file to a running control plane. It is checked first: a file with error
    /// findings is refused with them (exit 1); an invalid file with its problems (exit 2).
    Apply {
        /// The mesh file (YAML).
        file: PathBuf,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Rotate the CA without an outage, one stage at a time: `add` (a new root joins the trust
    /// bundle), `reissue` (once every proxy trusts it, the new root signs and every proxy
    /// renews at once), `retire` (once every proxy's certificate is from the new root, the old
    /// root leaves the bundle). A stage that is not safe yet is refused with the proxies it
    /// waits for (exit 1).
    RotateCa {
        /// The stage to run.
        #[arg(long, value_enum)]
        stage: RotateStageArg,
        #[command(flatten)]
        server: ServerArgs,
        /// Ask again while the stage waits for proxies, for up to this long (`30s`).
        #[arg(long)]
        wait: Option<Dur>,
        /// Run the stage although some proxies are not ready (they are listed): those proxies
        /// may fail their handshakes.
        #[arg(long)]
        force: bool,
    },
    /// Replace or revoke a service's join token on a running control plane: the old token is
    /// refused from the next call on (a proxy using it is refused at its next Register or
    /// Subscribe), and streams opened with it end.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Measure a control plane at scale: simulated proxies (in this process) issue CSRs,
    /// subscribe, register copies and report health; then the time for a configuration
    /// change and a registry change to reach every subscriber, and the control plane's memory.
    Bench(crate::bench::BenchArgs),
}

/// The stages of `hopwise control rotate-ca`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RotateStageArg {
    Add,
    Reissue,
    Retire,
}

impl RotateStageArg {
    fn name(self) -> &'static str {
        match self {
            RotateStageArg::Add => "add",
            RotateStageArg::Reissue => "reissue",
            RotateStageArg::Retire => "retire",
        }
    }
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)
}

fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn read(path: &PathBuf) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|source| CliError::Read {
        path: path.clone(),
        source,
    })
}

/// Runs one command. Output for the user goes to `out`.
pub fn run(command: Command, out: &mut dyn Write) -> Result<u8, CliError> {
    match command {
        Command::Status { server } => {
            let server = server.resolve()?;
            let status = runtime()?.block_on(client::status(&server))?;
            out.write_all(client::render_status(&status, now_unix_ms()).as_bytes())
                .map_err(CliError::Output)?;
            Ok(EXIT_OK)
        }
        Command::Control(ControlArgs {
            action: Some(ControlAction::Apply { file, server }),
            ..
        }) => {
            let server = server.resolve()?;
            let text = read(&file)?;
            let name = file.display().to_string();
            let response = runtime()?.block_on(client::apply(&server, &text, &name))?;
            out.write_all(client::render_apply(&response).as_bytes())
                .map_err(CliError::Output)?;
            Ok(if response.applied {
                EXIT_OK
            } else if response.diagnostics.is_empty() {
                EXIT_FINDINGS
            } else {
                EXIT_BAD_INPUT
            })
        }
        Command::Control(ControlArgs {
            action:
                Some(ControlAction::RotateCa {
                    stage,
                    server,
                    wait,
                    force,
                }),
            ..
        }) => {
            let server = server.resolve()?;
            let deadline = std::time::Instant::now() + wait.map_or(Duration::ZERO, |w| w.get());
            let response = runtime()?.block_on(async {
                loop {
                    let r = client::rotate_ca(&server, stage.name(), force).await?;
                    // Only a stage waiting for proxies is worth asking again.
                    if !r.retry || std::time::Instant::now() >= deadline {
                        return Ok::<_, ClientError>(r);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })?;
            out.write_all(client::render_rotate(&response).as_bytes())
                .map_err(CliError::Output)?;
            Ok(if response.done {
                EXIT_OK
            } else {
                EXIT_FINDINGS
            })
        }
        Command::Control(ControlArgs {
            action: Some(ControlAction::Token { action }),
            ..
        }) => token::run(action, out),
        Command::Control(ControlArgs {
            action: Some(ControlAction::Bench(args)),
            ..
        }) => {
            crate::bench::run(&args, out)?;
            Ok(EXIT_OK)
        }
        Command::Control(args) => serve(args, out),
    }
}

fn serve(args: ControlArgs, out: &mut dyn Write) -> Result<u8, CliError> {
    let Some(state) = args.state else {
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
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
    let watched = args.config.clone();
    let config = match &args.config {
        Some(path) => Some(ConfigFile {
            name: path.display().to_string(),
            text: read(path)?,
        }),
        None => None,
    };
    let ca_files = match (args.ca_cert, args.ca_key) {
        (Some(cert), Some(key)) => Some(CaFiles { cert, key }),
        _ => None,
    };
    let lifetime: Duration = args.cert_lifetime.get();
    let spec = match &args.store {
        None => None,
        Some(text) => {
            let spec = EtcdSpec::parse(text)
                .map_err(|reason| CliError::Usage(format!("--store {reason}")))?;
            // A build without etcd says so before asking for etcd's flags.
            if !cfg!(feature = "etcd") {
                return Err(StoreError::NoEtcd { url: spec.url() }.into());
            }
            let access = args.etcd.resolve(&spec)?;
            Some((spec, access))
        }
    };
    // The runtime comes first: the etcd store is opened on it, and `Plane::start` (on this
    // thread, outside it) blocks on it to write.
    let rt = runtime()?;
    let options = Options {
        config,
        ca_files,
        cert_lifetime: lifetime,
    };
    let mut attempt = 0;
    let started = loop {
        let store = match &spec {
            None => Store::open(&state)?,
            Some((spec, (access, keys))) => Store::Etcd(rt.block_on(EtcdStore::open(
                spec.clone(),
                access,
                keys.clone(),
                &state,
            ))?),
        };
        attempt += 1;
        match Plane::start(store, options.clone(), SystemTime::now()) {
            // Two replicas initialising an empty etcd at once: one wins, the other reads
            // what it wrote and starts on it.
            Err(StartError::Store(StoreError::Conflict { .. })) if attempt < 3 => continue,
            other => break other,
        }
    };
    let started = match started {
        Ok(s) => s,
        Err(StartError::Refused { name, findings }) => {
            let response = crate::pb::ApplyResponse {
                findings: findings.iter().map(api::wire::finding).collect(),
                message: format!(
                    "{name}: `hopwise check` finds error(s); the control plane did not start"
                ),
                ..Default::default()
            };
            out.write_all(client::render_apply(&response).as_bytes())
                .map_err(CliError::Output)?;
            return Ok(EXIT_FINDINGS);
        }
        Err(e) => return Err(e.into()),
    };
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|source| CliError::Listen {
                addr: args.listen,
                source,
            })?;
        let plane = started.plane;
        let at = if plane.shared() {
            format!("shared, revision {}", plane.version())
        } else {
            format!("start {}", plane.version() >> 32)
        };
        let summary = format!(
            "hopwise control: listening on {} (TLS 1.3 as {})\n\
             state: {} (mesh {}, config version {}, {at})\n\
             trust bundle: {}\n\
             admin token: {}\n\
             join tokens: {} ({} service(s))\n",
            listener.local_addr().map_or(args.listen, |a| a),
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
        );
        let mut local = listener.local_addr().map_or(args.listen, |a| a);
        // Listening on every address: talk to itself on loopback.
        if local.ip().is_unspecified() {
            local.set_ip(if local.is_ipv4() {
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
        let running = api::spawn_with(plane, listener, limits)?;
        if let Some(path) = watched {
            let seen = std::fs::read_to_string(&path).ok();
            tokio::spawn(watch_file(path, seen, (local.to_string(), dir)));
        }
        let mut text = summary;
        let dashboard = match args.dashboard {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| CliError::Listen { addr, source })?;
                let d = crate::dashboard::spawn(running.handle(), listener, args.samples.clone())
                    .map_err(|source| CliError::Listen { addr, source })?;
                text.push_str(&format!("dashboard: http://{}/\n", d.addr));
                Some(d)
            }
            None => None,
        };
        for note in &started.notes {
            text.push_str(&format!("note: {note}\n"));
        }
        out.write_all(text.as_bytes()).map_err(CliError::Output)?;
        out.flush().map_err(CliError::Output)?;
        wait_for_signal().await;
        tracing::info!("stopping");
        if let Some(d) = dashboard {
            d.stop();
        }
        running.shutdown().await?;
        Ok(EXIT_OK)
    })
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

/// Resolves on SIGTERM or Ctrl-C; never if neither can be watched (no signal is not a signal).
/// The proxy's `server::shutdown_signal` is the same; this crate does not depend on the proxy.
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                () = ctrl_c => {}
            }
        }
        Err(_) => ctrl_c.await,
    }
}
