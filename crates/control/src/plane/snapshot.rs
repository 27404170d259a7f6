//! What a service's proxies are sent: the whole snapshot at the current version, in two kinds of
//! parts that change for different reasons. [`Fixed`] comes from the mesh file and the CA: one
//! per service, rebuilt only when they change. Each [`Upstream`] is one called service's
//! endpoints: one per service called, shared by every snapshot that carries it, rebuilt only
//! when the registry says its endpoint set changed (or a lease in it expires).
//!
//! [`Plane::snapshot`] builds a snapshot afresh (what the tests compare);
//! [`Plane::shared_snapshot`] is what streams take: through [`cache`], a change costs one
//! rebuild per service it concerns — not one per subscriber — and a rebuild that finds the
//! same content hands back the same `Arc`, so every stream of the service sees "nothing new"
//! by a pointer compare, and a delta between two snapshots skips every part they share
//! (`api/wire.rs`'s `delta`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use hopwise_model::Service;
use hopwise_model::labels::Labels;

use super::{ApiError, Plane, wake};

pub mod cache;

/// Everything one service's proxies need at one version, whole (the API sends it, or the
/// difference from the last one a stream sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub version: u64,
    /// What comes from the mesh file and the CA.
    pub fixed: Arc<Fixed>,
    /// The services it calls, in the mesh file's order, each with its endpoints.
    pub upstreams: Vec<Arc<Upstream>>,
}

/// The parts of a snapshot that come from the mesh file and the CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    pub config_version: u64,
    pub service: String,
    /// Its SPIFFE identity.
    pub identity: String,
    /// The mesh file in force, as text: one copy, shared by every service's part.
    pub mesh_yaml: Arc<str>,
    /// The service's resolved policy (JSON).
    pub policy_json: String,
    /// Every CA certificate to trust (PEM).
    pub trust_bundle_pem: String,
    /// The identities allowed to call it (sorted).
    pub allowed_callers: Vec<String>,
    /// The generation of the CA that signs now.
    pub ca_generation: u64,
}

#[cfg(test)]
impl Fixed {
    /// Service `a`'s part, for tests: this mesh text, bundle and callers.
    pub fn of_a(mesh: &str, bundle: &str, callers: Vec<String>) -> Fixed {
        Fixed {
            config_version: 1,
            service: "a".into(),
            identity: "spiffe://t/service/a".into(),
            mesh_yaml: mesh.into(),
            policy_json: "{}".into(),
            trust_bundle_pem: bundle.into(),
            allowed_callers: callers,
            ca_generation: 1,
        }
    }
}

/// A service called, and the copies of it that may receive traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub service: String,
    pub identity: String,
    /// `ip:port`, sorted as text, each once.
    pub endpoints: Vec<String>,
    /// The labels of those endpoints that carry any, by endpoint.
    pub labels: BTreeMap<String, Labels>,
}

impl Plane {
    /// Everything `service`'s proxies need, at the current version, whole, built afresh.
    pub fn snapshot(&self, service: &str, now: Instant) -> Result<Snapshot, ApiError> {
        let s = self.proxied(service)?;
        Ok(Snapshot {
            version: self.version(),
            fixed: Arc::new(self.fixed(s, Arc::from(self.served_text()))),
            upstreams: wake::upstreams(&self.mesh, s)
                .into_iter()
                .map(|to| Arc::new(self.upstream(to, now).0))
                .collect(),
        })
    }

    /// The same content as [`Plane::snapshot`], from the cache: the same `Arc` as the last call
    /// while nothing in it changed (its version then is the one it was built at).
    pub fn shared_snapshot(
        &mut self,
        service: &str,
        now: Instant,
    ) -> Result<Arc<Snapshot>, ApiError> {
        let mut cache = std::mem::take(&mut self.snapshots);
        let built = self.cached(&mut cache, service, now);
        self.snapshots = cache;
        built
    }

    fn cached(
        &self,
        cache: &mut cache::Cache,
        service: &str,
        now: Instant,
    ) -> Result<Arc<Snapshot>, ApiError> {
        let s = self.proxied(service)?;
        let stamp = (self.config_stamp, self.config_version());
        let text = cache.text(stamp, || Arc::from(self.served_text()));
        let fixed = cache.fixed(service, stamp, || self.fixed(s, text));
        let upstreams = wake::upstreams(&self.mesh, s)
            .into_iter()
            .map(|to| {
                let changed_at = self.registry.changed_at(to);
                cache.upstream(to, stamp, changed_at, now, || self.upstream(to, now))
            })
            .collect();
        Ok(cache.snapshot(service, self.version(), fixed, upstreams))
    }

    /// `service`, which must run proxies.
    fn proxied(&self, service: &str) -> Result<&Service, ApiError> {
        let s = self
            .mesh
            .services
            .get(service)
            .ok_or_else(|| ApiError::UnknownService(service.to_owned()))?;
        if s.external.is_some() {
            return Err(ApiError::External(service.to_owned()));
        }
        Ok(s)
    }

    fn fixed(&self, s: &Service, mesh_yaml: Arc<str>) -> Fixed {
        let service = s.name.as_str();
        let mut allowed_callers: Vec<String> = self
            .mesh
            .calls()
            .filter(|c| c.to == service)
            .map(|c| self.mesh.identity(&c.from))
            .collect();
        allowed_callers.sort();
        allowed_callers.dedup();
        Fixed {
            config_version: self.config_version(),
            service: service.to_owned(),
            identity: self.mesh.identity(service),
            mesh_yaml,
            policy_json: serde_json::to_string(s).unwrap_or_default(),
            trust_bundle_pem: self.ca.trust_bundle_pem(),
            allowed_callers,
            ca_generation: self.ca_generation,
        }
    }

    /// `to`'s endpoints now (the only part of a snapshot that comes from the registry: what
    /// `wake::concerned` follows), and until when the list holds if nothing changes (the
    /// first of its leases to expire; `None`: no endpoint).
    fn upstream(&self, to: &str, now: Instant) -> (Upstream, Option<Instant>) {
        let mut until: Option<Instant> = None;
        let mut labels = BTreeMap::new();
        let mut endpoints: Vec<String> = self
            .registry
            .live(to, now)
            .map(|(addr, expires, l)| {
                until = Some(until.map_or(expires, |u| u.min(expires)));
                if !l.is_empty() {
                    labels.insert(addr.to_string(), l.clone());
                }
                addr.to_string()
            })
            .collect();
        // Sorted as text, the order a delta's receiver rebuilds (delta.rs), and once each: a
        // delta carries a set, and two leases on one address (a stale etcd lease not yet
        // revoked) are one endpoint to route to.
        endpoints.sort_unstable();
        endpoints.dedup();
        let upstream = Upstream {
            service: to.to_owned(),
            identity: self.mesh.identity(to),
            endpoints,
            labels,
        };
        (upstream, until)
    }
}
