//! hopwise's static analysis of a mesh: timeout budgets that must nest, retries that multiply,
//! defaults that queue without limit, retries of calls that are not safe to repeat, route rules
//! that can never match, each backend of a weighted split counted on its own (`splits`); and
//! which rule a given request takes (`routes`).
//!
//! Pure: `&Mesh → Report`. No I/O; rendering returns strings. All arithmetic comes from
//! `hopwise-model`, the same functions the proxy runs.

pub mod assume;
pub mod chain;
pub mod fanout;
pub mod findings;
pub mod fix;
pub mod render;
pub mod routes;
pub mod splits;
pub mod timeouts;

use hopwise_model::Mesh;
use serde::Serialize;

pub use fanout::{Failure, FanoutRow};
pub use findings::{Finding, Options, Severity};
pub use splits::Split;
pub use timeouts::{CallTiming, EntryTiming, Timeouts};

/// Everything `hopwise check` knows about a mesh.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub mesh: String,
    pub timeouts: Timeouts,
    pub fanout: Vec<FanoutRow>,
    /// Each rule with several backends, per backend (`splits.rs`).
    pub splits: Vec<Split>,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }
}

pub fn check(mesh: &Mesh, opts: &Options) -> Report {
    let timeouts = timeouts::analyze(mesh);
    let fanout = fanout::analyze(mesh);
    let findings = findings::find(mesh, &timeouts, &fanout, opts);
    Report {
        mesh: mesh.name.clone(),
        timeouts,
        fanout,
        splits: splits::analyze(mesh),
        findings,
    }
}

#[cfg(test)]
mod tests;
