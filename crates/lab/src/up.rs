//! `hopwise up FILE`: the whole mesh of a file on this machine — the control plane, a sample
//! app per copy of every service with `sample:` (each with live fault knobs), a proxy per
//! copy, optional load into the entry service — until Ctrl-C; and `hopwise fault`, which turns
//! the knobs of a running `up`.
//!
//! The parts, one job each: [`plan`] (pure: mesh → processes and ports), [`run`] (the
//! processes: start, wait until ready, stop), [`rundir`] (the run directory, stale processes),
//! [`apps`] (the sample apps, a process per copy), [`knobs`] (the fault knobs and their HTTP port), [`samples`] (the
//! `samples.json` contract), [`load`] (steady requests into the entry service), [`table`]
//! (what `up` prints), [`fault`] (`hopwise fault`). See docs/up.md.

use std::net::SocketAddr;
use std::path::PathBuf;

use hopwise_model::Dur;

pub mod apps;
pub mod fault;
pub mod knobs;
pub mod load;
pub mod plan;
pub mod run;
pub mod rundir;
pub mod samples;
pub mod table;

pub mod pb {
    //! The sample apps' gRPC service, generated from `proto/sample.proto` by `build.rs`.
    #![allow(missing_debug_implementations, clippy::all, clippy::unwrap_used)]
    tonic::include_proto!("hopwise.sample.v1");
}

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
    /// The service whose sample copies change.
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
    /// Every knob back to "no fault" (applied before the other options).
    #[arg(long)]
    pub clear: bool,
    /// The run: its directory (`.hopwise/<mesh>`) or its mesh file (default: the only run
    /// under `./.hopwise/`).
    #[arg(long)]
    pub run: Option<PathBuf>,
}

/// Why `up` or `fault` could not do its job. The binary prints it with its sources.
#[derive(Debug, thiserror::Error)]
pub enum UpError {
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{name} did not start: {why}{}", crate::bench::stderr_block(.stderr))]
    Start {
        name: String,
        why: String,
        stderr: String,
    },
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error("{0}")]
    Failed(String),
    #[error("interrupted; every process `up` started has been stopped")]
    Interrupted,
}

/// `map_err` helper: an I/O error with what we were doing.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> UpError {
    let what = what.into();
    move |source| UpError::Io { what, source }
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn signals() {
    hopwise_proxy::server::shutdown_signal().await;
}
