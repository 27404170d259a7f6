//! What a service's proxies are sent: the whole snapshot at the current version.

use std::net::SocketAddr;
use std::time::Instant;

use super::{ApiError, Plane, wake};
use crate::pb;

impl Plane {
    /// Everything `service`'s proxies need, at the current version, whole.
    pub fn snapshot(&self, service: &str, now: Instant) -> Result<pb::Snapshot, ApiError> {
        let s = self
            .mesh
            .services
            .get(service)
            .ok_or_else(|| ApiError::UnknownService(service.to_owned()))?;
        if s.external.is_some() {
            return Err(ApiError::External(service.to_owned()));
        }
        // The only part that comes from the registry: what `wake::concerned` follows.
        let upstreams: Vec<pb::Upstream> = wake::upstreams(&self.mesh, s)
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
                pb::Upstream {
                    service: to.to_owned(),
                    identity: self.mesh.identity(to),
                    endpoints,
                    removed_endpoints: Vec::new(),
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
        Ok(pb::Snapshot {
            version: self.version(),
            config_version: self.config_version(),
            service: service.to_owned(),
            identity: self.mesh.identity(service),
            mesh_yaml: Some(self.mesh_text().to_owned()),
            policy_json: Some(serde_json::to_string(s).unwrap_or_default()),
            upstreams,
            trust_bundle_pem: Some(self.ca.trust_bundle_pem()),
            allowed_callers,
            ca_generation: self.ca_generation,
            ..Default::default()
        })
    }
}
