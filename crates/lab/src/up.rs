//! `hopwise up FILE`: the whole mesh of a file on this machine — the control plane, a sample
//! app per copy of every service with `sample:` (each with live fault knobs) or its own
//! command per copy (`run:`), a proxy per copy, optional load into the entry service — until
//! Ctrl-C; and `hopwise fault`, which turns the knobs of a running `up`, and `hopwise tap`,
//! which streams the requests through a service's proxies.
//!
//! The parts, one job each: [`plan`] (pure: mesh → processes and ports), [`run`] (the
//! processes: start, wait until ready, stop), [`rundir`] (the run directory, stale processes),
//! [`samples`] (writes the `samples.json` contract), [`load`] (steady requests into the entry
//! service), [`table`] (what `up` prints), [`fault`] (`hopwise fault`), [`tap`] (`hopwise
//! tap`), [`captured`] (the samples run captured, each copy in its own network namespace),
//! [`command`] (a service's own command, `run`, per copy), [`traces`] (the proxies' spans to the
//! dashboard), [`gateway`] (the front door: the file's own gateway, or one added for the entry). The sample apps and their knobs are [`crate::samples`]'s, the child processes
//! [`crate::processes`]'. See docs/up.md.

use std::net::SocketAddr;
use std::path::PathBuf;

use hopwise_model::Dur;

pub mod captured;
pub mod command;
pub mod fault;
pub mod gateway;
pub mod load;
pub mod plan;
pub mod run;
pub mod rundir;
pub mod samples;
mod start;
pub mod table;
pub mod tap;
pub mod traces;

/// `hopwise up FILE …`
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// The mesh file (YAML); it must pass `hopwise check`.
    pub file: PathBuf,
    /// Send this many requests a second into the entry service's app, and print a summary
    /// every few seconds.
    #[arg(long, value_parser = parse_rate)]
    pub load: Option<f64>,
    /// Where the control plane serves the dashboard.
    #[arg(long, default_value = "127.0.0.1:7901")]
    pub dashboard: SocketAddr,
    /// Where the control plane listens (TLS; loopback by default).
    #[arg(long, default_value = "127.0.0.1:7900")]
    pub control: SocketAddr,
    /// Run every sample app captured, as `mesh.capture.up: true` does: each copy in its own
    /// network namespace, calling its callees by name (root; docs/up.md).
    #[arg(long)]
    pub captured: bool,
    /// Where captured copies are recorded, so a crashed run's leftovers can be found (as
    /// `hopwise run --state`).
    #[arg(long, default_value = crate::capture::STATE)]
    pub state: PathBuf,
    /// When the file has no `mesh.tracing`: the share of requests traced to the dashboard
    /// (`1`, `10%`; `0`: none). A file's own `mesh.tracing` is kept (docs/up.md).
    #[arg(long, default_value = "1", value_parser = traces::parse_ratio)]
    pub traces: f64,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of requests per second"))?;
    if !(r > 0.0 && r <= 10_000.0) {
        return Err(format!(
            "{s}: choose a rate above 0 and at most 10000 requests/s"
        ));
    }
    Ok(r)
}

/// `hopwise fault SERVICE …`
#[derive(Debug, Clone, clap::Args)]
pub struct FaultArgs {
    /// The service whose sample copies change (a sample's knobs), or whose proxies inject a
    /// fault (your own app: `--error-rate`, `--latency`, in the mesh file).
    pub service: String,
    /// Only this copy (default: every copy).
    #[arg(long)]
    pub copy: Option<usize>,
    /// Share of requests answered 503 (gRPC: UNAVAILABLE), 0.0–1.0.
    #[arg(long)]
    pub error_rate: Option<f64>,
    /// Added before every answer (`200ms`, `0s` to remove).
    #[arg(long)]
    pub latency: Option<Dur>,
    /// The app port refuses connections.
    #[arg(long, overrides_with = "no_down")]
    pub down: bool,
    /// The app port listens again.
    #[arg(long)]
    pub no_down: bool,
    /// Accept requests and never answer.
    #[arg(long, overrides_with = "no_hang")]
    pub hang: bool,
    /// Answer again (requests already hanging stay so until their client gives up).
    #[arg(long)]
    pub no_hang: bool,
    /// The next N requests fail (503 / UNAVAILABLE).
    #[arg(long)]
    pub fail_first: Option<u64>,
    /// Process each request, then drop the connection without an answer.
    #[arg(long, overrides_with = "keep_response")]
    pub lose_response: bool,
    /// Answer every request processed again.
    #[arg(long)]
    pub keep_response: bool,
    /// Every knob back to "no fault" (applied before the other options); for your own app,
    /// its mesh fault removed.
    #[arg(long)]
    pub clear: bool,
    /// Your own app only: the fault touches only requests carrying this header
    /// (`NAME` or `NAME=VALUE`).
    #[arg(long, value_name = "NAME[=VALUE]")]
    pub only_header: Option<String>,
    /// The run: its directory (`.hopwise/<mesh>`) or its mesh file (default: the only run
    /// under `./.hopwise/`).
    #[arg(long)]
    pub run: Option<PathBuf>,
}

/// `hopwise tap SERVICE …`
#[derive(Debug, Clone, clap::Args)]
pub struct TapArgs {
    /// The service whose proxies' requests to show.
    pub service: String,
    /// Only this route's requests (a call's route, the callee for a call without routes, a
    /// caller's route into the service, or `inbound`).
    #[arg(long)]
    pub route: Option<String>,
    /// Stop after this many requests (default: until Ctrl-C).
    #[arg(long)]
    pub max: Option<u64>,
    /// Each request as the proxy's JSON line (the access log's fields), with `tapped_copy`
    /// (which copy's proxy saw it) added.
    #[arg(long)]
    pub json: bool,
    /// These admin endpoints instead of a running `hopwise up`'s copies of the service.
    #[arg(long, value_delimiter = ',')]
    pub admin: Vec<SocketAddr>,
    /// The run: its directory (`.hopwise/<mesh>`) or its mesh file (default: the only run
    /// under `./.hopwise/`).
    #[arg(long)]
    pub run: Option<PathBuf>,
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn signals() {
    hopwise_proxy::server::shutdown_signal().await;
}
