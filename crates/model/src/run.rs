//! A service's own command (`services.<name>.run`), resolved: what `hopwise up` starts for
//! each copy of it, and how the command learns where it listens and where its upstreams are
//! ([`PORT`], [`APP`], [`upstream_var`]; docs/up.md). Checked against the rest of the service:
//! a service runs its own command or a sample, never both, and a service outside the mesh
//! runs nowhere here. Pure: `hopwise-lab` starts the process.

use serde::Serialize;

use crate::diag::Diagnostic;
use crate::raw::RawService;
use crate::read::Locations;

/// The variable that carries the port the command listens on (`8753`).
pub const PORT: &str = "PORT";
/// The variable that carries the whole address it listens on (`127.0.0.1:8753`).
pub const APP: &str = "HOPWISE_APP";
/// An argument written `{port}` becomes the port (for programs that take it as a flag).
pub const PORT_ARG: &str = "{port}";

/// `services.<name>.run`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Run {
    /// The program and its arguments, as written.
    pub argv: Vec<String>,
    /// Set on top of `up`'s own environment, in file order.
    pub env: Vec<(String, String)>,
    /// The path its proxy probes; `None`: the proxy's default (`/`), and `up` waits for the
    /// port only.
    pub health_path: Option<String>,
}

/// The variable that tells a command where to reach `service` (`HOPWISE_UPSTREAM_FEE`): its
/// name upper-cased, `-` as `_`.
pub fn upstream_var(service: &str) -> String {
    format!(
        "HOPWISE_UPSTREAM_{}",
        service.to_ascii_uppercase().replace('-', "_")
    )
}

impl Run {
    /// The `run` of service `name`, checked against the rest of the service.
    pub(crate) fn read(
        rs: &RawService,
        name: &str,
        locations: &Locations,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<Run> {
        let raw = rs.run.as_ref()?.command();
        let path = format!("services.{name}.run");
        let mut problem = |message: String| {
            diags.push(Diagnostic::new(&path, locations.of(&path), message));
        };
        if rs.sample.is_some() {
            problem(
                "a service runs its own command or a sample app, not both: remove `run` or `sample`"
                    .into(),
            );
        }
        if rs.external.is_some() {
            problem(
                "a service outside the mesh runs elsewhere, so `hopwise up` starts nothing for it: remove `run` or `external`"
                    .into(),
            );
        }
        // Two callees whose variables would be the same: the command could reach only one.
        let mut seen: Vec<(String, &str)> = Vec::new();
        for to in rs.calls.keys() {
            let var = upstream_var(to);
            if let Some((_, first)) = seen.iter().find(|(v, _)| *v == var) {
                problem(format!(
                    "calls `{first}` and `{to}`, which would both be told as `{var}`: rename one"
                ));
            }
            seen.push((var, to));
        }
        Some(Run {
            argv: raw.command,
            env: raw.env.into_iter().collect(),
            health_path: raw.health_path,
        })
    }
}

#[cfg(test)]
mod tests;
