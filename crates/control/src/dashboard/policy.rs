//! What the dashboard says about the mesh file in force: each service's calls with the policy
//! its proxy applies (the resolved `hopwise_model::Policy`, the same value `ProxyConfig` is
//! built from), the call's safety of repetition, and `hopwise check`'s findings. Pure.

use hopwise_analyze::{Finding, Options, Severity};
use hopwise_model::{Call, Mesh, Policy, Protocol};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct ServicePolicy<'m> {
    pub name: &'m str,
    pub protocol: Protocol,
    /// Where outside requests enter, and what the outside client does.
    pub entry: Option<hopwise_model::Entry>,
    pub external: bool,
    pub calls: Vec<CallPolicy<'m>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CallPolicy<'m> {
    pub to: &'m str,
    /// The route's name and path prefix (none: the whole call).
    pub route: Option<&'m str>,
    pub route_path: Option<&'m str>,
    pub method: &'m str,
    /// Whether repeating the request is safe (the method's nature, or what the file declares).
    pub idempotent: bool,
    /// `declared` when the file says so, else `method`.
    pub safety_from: &'static str,
    /// Retries the caller's own code makes around the call.
    pub app_retries: u32,
    pub policy: &'m Policy,
}

fn call_policy(c: &Call) -> CallPolicy<'_> {
    CallPolicy {
        to: &c.to,
        route: c.route.as_deref(),
        route_path: c.route_path.as_deref(),
        method: &c.method,
        idempotent: c.idempotent,
        safety_from: if c.idempotent_declared.is_some() {
            "declared"
        } else {
            "method"
        },
        app_retries: c.app_retries,
        policy: &c.policy,
    }
}

/// Every service with its calls, in the file's order.
pub fn policy(mesh: &Mesh) -> Vec<ServicePolicy<'_>> {
    mesh.services
        .values()
        .map(|s| ServicePolicy {
            name: &s.name,
            protocol: s.protocol,
            entry: s.entry,
            external: s.external.is_some(),
            calls: s.calls.iter().map(call_policy).collect(),
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct Findings {
    pub mesh: String,
    pub config_version: u64,
    pub errors: usize,
    pub warnings: usize,
    pub findings: Vec<Finding>,
}

/// `hopwise check` (default options) on the mesh in force.
pub fn findings(mesh: &Mesh, config_version: u64) -> Findings {
    let report = hopwise_analyze::check(mesh, &Options::default());
    let count = |s| report.findings.iter().filter(|f| f.severity == s).count();
    Findings {
        mesh: report.mesh.clone(),
        config_version,
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        findings: report.findings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_sample_shows_the_payment_as_unsafe_and_finds_it() {
        let mesh = Mesh::from_yaml(include_str!(
            "../../../../examples/seed/library-sidecar.yaml"
        ))
        .unwrap();
        let p = policy(&mesh);
        let loan = p.iter().find(|s| s.name == "loan").unwrap();
        let pay = loan.calls.iter().find(|c| c.route == Some("pay")).unwrap();
        assert_eq!(pay.method, "POST");
        assert!(!pay.idempotent);
        let json = serde_json::to_value(&p).unwrap();
        assert!(json[0]["calls"].is_array());
        let f = findings(&mesh, 3);
        assert!(f.errors >= 1);
        assert!(f.findings.iter().any(|f| f.code == "unsafe-retry"));
    }
}
