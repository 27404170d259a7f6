//! What a service's proxies are sent: the whole snapshot at the current version.

use std::net::SocketAddr;
use std::time::Instant;

use super::{ApiError, Plane, wake};

/// Everything one service's proxies need at one version, whole (the API sends it, or the
/// difference from the last one a stream sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub version: u64,
    pub config_version: u64,
    pub service: String,
    /// Its SPIFFE identity.
    pub identity: String,
    /// The mesh file in force, as text.
    pub mesh_yaml: String,
    /// The service's resolved policy (JSON).
    pub policy_json: String,
    /// The services it calls, in the mesh file's order, each with its endpoints.
    pub upstreams: Vec<Upstream>,
    /// Every CA certificate to trust (PEM).
    pub trust_bundle_pem: String,
    /// The identities allowed to call it (sorted).
    pub allowed_callers: Vec<String>,
    /// The generation of the CA that signs now.
    pub ca_generation: u64,
}

/// A service called, and the copies of it that may receive traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub service: String,
    pub identity: String,
    /// `ip:port`, sorted as text, each once.
    pub endpoints: Vec<String>,
}

impl Plane {
    /// Everything `service`'s proxies need, at the current version, whole.
    pub fn snapshot(&self, service: &str, now: Instant) -> Result<Snapshot, ApiError> {
        let s = self
            .mesh
            .services
            .get(service)
            .ok_or_else(|| ApiError::UnknownService(service.to_owned()))?;
        if s.external.is_some() {
            return Err(ApiError::External(service.to_owned()));
        }
        // The only part that comes from the registry: what `wake::concerned` follows.
        let upstreams: Vec<Upstream> = wake::upstreams(&self.mesh, s)
            .into_iter()
            .map(|to| {
                let mut endpoints: Vec<String> = self
                    .registry
                    .endpoints(to, now)
                    .iter()
                    .map(SocketAddr::to_string)
                    .collect();
                // Sorted as text, the order a delta's receiver rebuilds (delta.rs), and once
                // each: a delta carries a set, and two leases on one address (a stale etcd
                // lease not yet revoked) are one endpoint to route to.
                endpoints.sort_unstable();
                endpoints.dedup();
                Upstream {
                    service: to.to_owned(),
                    identity: self.mesh.identity(to),
                    endpoints,
                }
            })
            .collect();
        let mut allowed_callers: Vec<String> = self
            .mesh
            .calls()
            .filter(|c| c.to == service)
            .map(|c| self.mesh.identity(&c.from))
            .collect();
        allowed_callers.sort();
        allowed_callers.dedup();
        Ok(Snapshot {
            version: self.version(),
            config_version: self.config_version(),
            service: service.to_owned(),
            identity: self.mesh.identity(service),
            mesh_yaml: self.mesh_text().to_owned(),
            policy_json: serde_json::to_string(s).unwrap_or_default(),
            upstreams,
            trust_bundle_pem: self.ca.trust_bundle_pem(),
            allowed_callers,
            ca_generation: self.ca_generation,
        })
    }
}
