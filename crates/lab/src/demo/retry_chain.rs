//! `hopwise demo retry-chain`: the seed's retry chain and timeout trap, with real proxies.
//!
//! Each row writes one mesh file — frontend with a local port for checkout; checkout and
//! pricing as *relay* copies (each copy's `app` is its own upstream port, so its inbound side
//! feeds its outbound side: the seed's chain has no services between proxies); inventory
//! `external` — starts frontend's, checkout's and pricing's proxies from it as three
//! `hopwise proxy` processes, and sends checkouts into frontend's proxy: gRPC-shaped POSTs over
//! h2c for the gRPC rows, plain HTTP/1.1 GETs for the others. Attempts at inventory are counted
//! twice: by pricing's proxy (`hopwise_tries_total` toward inventory, from its `/metrics`;
//! connection attempts when inventory is down) and by inventory itself. Every row runs under
//! `defaults: { preset: istio }` and under hopwise's defaults, each with the row's own change
//! (503 made retriable, the app retrying), next to what `hopwise check` predicts for the same
//! file.
//!
//! The timeout trap: pricing's proxy alone, a 300 ms per-try timeout and 2 retries, in front of
//! an inventory that accepts requests and never answers: Istio's list, then with `reset` added.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{RetryChainArgs, json_text};
use crate::error::{LabError, io};
use crate::progress;

mod mesh;
mod rows;
mod runs;
mod text;

use rows::ROWS;
use runs::{run_one, run_trap};
pub use text::text;

/// Requests per timeout-trap row, as the seed.
pub(super) const TRAP_REQUESTS: u32 = 5;

/// Istio's retry list (`retry.go`, 1.31), as the mesh file writes it.
pub(super) const ISTIO_ON: &str =
    "connect-failure, refused-stream, unavailable, cancelled, retriable-status-codes";

/// Whose defaults a run starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Defaults {
    Istio,
    Hopwise,
}

impl Defaults {
    pub(super) fn name(self) -> &'static str {
        match self {
            Defaults::Istio => "istio",
            Defaults::Hopwise => "hopwise",
        }
    }
}

/// Everything the demo measured.
#[derive(Debug, Serialize)]
pub struct Report {
    pub checkouts: u32,
    pub rows: Vec<Row>,
    pub timeout_trap: Vec<TrapRow>,
    /// Every `hopwise proxy` process the demo started (all stopped when it ends).
    pub proxy_pids: Vec<u32>,
    /// The directory the mesh files, certificates and proxies' stderr were written into
    /// (removed at the end).
    pub workdir: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub key: &'static str,
    pub failure: &'static str,
    pub protocol: &'static str,
    /// The seed's figure for Istio's defaults.
    pub seed: u64,
    pub istio: Run,
    pub hopwise: Run,
}

/// One row under one set of defaults.
#[derive(Debug, Serialize)]
pub struct Run {
    pub defaults: Defaults,
    /// Attempts at inventory per checkout, counted by pricing's proxy (the mean).
    pub per_checkout: f64,
    /// Per checkout: pricing's proxy's tries toward inventory.
    pub proxy_counts: Vec<u64>,
    /// Per checkout: requests inventory received; `None` when it is down.
    pub inventory_counts: Option<Vec<u64>>,
    /// Per checkout call the app made (more than one per checkout when it retries).
    pub per_call: Vec<u64>,
    pub max_per_call: u64,
    /// What `hopwise check` predicts per checkout for the same mesh file.
    pub check: Option<u64>,
    /// Tries each proxy sent, per checkout, top first.
    pub tries_per_hop: Vec<HopTries>,
    /// Retries a condition allowed but a proxy did not make, by proxy and reason.
    pub skipped: Vec<ProxyCount>,
    /// Answers a proxy made itself instead of passing one on, by proxy, side and reason.
    pub local_replies: Vec<ProxyCount>,
    /// What the app got on its last call.
    pub client_got: String,
    pub why: String,
    /// The mesh file of the run.
    pub mesh: String,
}

#[derive(Debug, Serialize)]
pub struct HopTries {
    pub call: String,
    pub tries: f64,
}

/// A counter of one proxy, by reason.
#[derive(Debug, Serialize)]
pub struct ProxyCount {
    pub proxy: String,
    pub reason: String,
    pub count: u64,
}

#[derive(Debug, Serialize)]
pub struct TrapRow {
    pub retry_on: String,
    pub requests: u32,
    /// Pricing's proxy's tries toward inventory.
    pub proxy_tries: u64,
    /// Requests inventory received.
    pub inventory_received: u64,
    pub tries_per_request: f64,
    pub seed: u64,
    pub client_got: String,
}

/// What the runs share.
pub(super) struct Ctx<'a> {
    pub(super) hopwise: &'a Path,
    pub(super) dir: PathBuf,
    pub(super) checkouts: u32,
    pub(super) pids: Vec<u32>,
}

/// Runs the demo and renders its report (text or JSON).
pub async fn run(args: &RetryChainArgs, hopwise: &Path) -> Result<String, LabError> {
    let tmp = tempfile::Builder::new()
        .prefix("hopwise-demo-retry-chain-")
        .tempdir()
        .map_err(io("cannot create a temporary directory"))?;
    let mut ctx = Ctx {
        hopwise,
        dir: tmp.path().to_owned(),
        checkouts: args.checkouts,
        pids: Vec::new(),
    };
    let mut rows = Vec::new();
    for (i, spec) in ROWS.iter().enumerate() {
        let mut runs = Vec::new();
        for defaults in [Defaults::Istio, Defaults::Hopwise] {
            progress(&format!(
                "retry-chain: row {}/{} (inventory {}), {} defaults, {} checkouts",
                i + 1,
                ROWS.len(),
                spec.label,
                defaults.name(),
                args.checkouts
            ));
            runs.push(run_one(&mut ctx, spec, defaults).await?);
        }
        let (Some(hopwise_run), Some(istio_run)) = (runs.pop(), runs.pop()) else {
            return Err(LabError::Failed("a row did not run".into()));
        };
        rows.push(Row {
            key: spec.key,
            failure: spec.label,
            protocol: if spec.grpc { "grpc" } else { "http" },
            seed: spec.seed,
            istio: istio_run,
            hopwise: hopwise_run,
        });
    }
    progress("retry-chain: the timeout trap");
    let with_reset = format!("{ISTIO_ON}, reset");
    let timeout_trap = vec![
        run_trap(&mut ctx, ISTIO_ON, 1, "istio").await?,
        run_trap(&mut ctx, &with_reset, 3, "reset").await?,
    ];
    let report = Report {
        checkouts: args.checkouts,
        rows,
        timeout_trap,
        proxy_pids: ctx.pids,
        workdir: tmp.path().to_owned(),
    };
    if args.json {
        json_text(&report)
    } else {
        Ok(text(&report))
    }
}
