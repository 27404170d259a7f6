//! The command line of the control plane, which the `hopwise` binary flattens into its own:
//! `hopwise control --config MESH.yaml --state DIR --listen ADDR:PORT` runs it (TLS only),
//! `hopwise control apply FILE --server ADDR --state DIR` changes its mesh file,
//! `hopwise control rotate-ca --stage add|reissue|retire --server ADDR --state DIR` rotates its
//! CA, and `hopwise status --server ADDR --state DIR` shows its proxies and copies (the last
//! three trust `DIR/ca.pem` and send `DIR/admin-token`, or `--ca FILE --admin-token FILE`). Each
//! operation returns what it got ([`status`], [`apply`], [`rotate_ca`], [`token::run`],
//! [`serve::start`]) or a typed [`CliError`]; the binary shows it and chooses the exit status.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hopwise_model::Dur;

use crate::api::ServeError;
use crate::client::{self, ClientError, Server};
use crate::pb;
use crate::plane::StartError;
use crate::store::{ADMIN_TOKEN_FILE, BUNDLE_FILE, StoreError};

mod etcd;
pub mod serve;
pub mod token;

pub use token::TokenAction;

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

#[derive(Debug, Clone, clap::Args)]
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
    /// The dashboard's OTLP trace receiver (gRPC, plain h2c, loopback only): proxies whose
    /// `mesh.tracing.collector` names it send their spans here, and the page shows the recent
    /// traces as waterfalls. Off when absent.
    #[arg(long, requires = "dashboard")]
    pub traces_listen: Option<SocketAddr>,
    /// Accept pods' projected ServiceAccount tokens (audience `hopwise`) besides join tokens:
    /// each is checked by the Kubernetes API server (TokenReview; in a pod its own
    /// ServiceAccount, else `$KUBECONFIG` or `~/.kube/config`), and the proxy gets the identity of
    /// the service that runs as that ServiceAccount (`kubernetes:` in the mesh file;
    /// docs/kubernetes.md).
    #[arg(long)]
    pub kubernetes: bool,
}

#[derive(Debug, Clone, clap::Subcommand)]
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
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)
}

fn read(path: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|source| CliError::Read {
        path: path.to_owned(),
        source,
    })
}

/// `hopwise status`: the running control plane's answer.
pub fn status(server: &ServerArgs) -> Result<pb::StatusResponse, CliError> {
    let server = server.resolve()?;
    Ok(runtime()?.block_on(client::status(&server))?)
}

/// `hopwise control apply FILE`: what the control plane did with the file (applied, or refused
/// with its problems or findings).
pub fn apply(file: &Path, server: &ServerArgs) -> Result<pb::ApplyResponse, CliError> {
    let server = server.resolve()?;
    let text = read(file)?;
    let name = file.display().to_string();
    Ok(runtime()?.block_on(client::apply(&server, &text, &name))?)
}

/// `hopwise control rotate-ca --stage …`: the stage's answer, asked again while it waits for
/// proxies, for up to `wait`.
pub fn rotate_ca(
    stage: RotateStageArg,
    server: &ServerArgs,
    wait: Option<Duration>,
    force: bool,
) -> Result<pb::RotateCaResponse, CliError> {
    let server = server.resolve()?;
    let deadline = std::time::Instant::now() + wait.unwrap_or(Duration::ZERO);
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
    Ok(response)
}
