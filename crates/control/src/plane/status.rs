//! `Status`: the proxies, the copies of every service, the CA and the versions.

use std::time::{Instant, SystemTime};

use super::{Plane, rotation_name};
use crate::ca::{self};

/// What `Status` shows: the proxies, the copies of every service, the CA and the versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub mesh: String,
    pub version: u64,
    pub config_version: u64,
    /// Every proxy known to any replica.
    pub proxies: Vec<ProxyStatus>,
    /// Every service of the mesh file, in its order.
    pub services: Vec<ServiceStatus>,
    /// When the signing root expires (Unix seconds; 0: unknown).
    pub ca_not_after_unix: i64,
    pub ca_generation: u64,
    /// The rotation's stage done (`added`, `reissued`), or empty.
    pub ca_rotation: String,
    /// The common names of the roots in the trust bundle.
    pub trust_bundle: Vec<String>,
    /// Where the state is kept.
    pub store: String,
}

/// One proxy, as this replica and the others know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyStatus {
    pub service: String,
    pub proxy: String,
    pub connected: bool,
    pub last_sent_version: u64,
    pub last_acked_version: u64,
    pub last_ack_accepted: bool,
    pub last_ack_reason: String,
    pub last_ack_unix_ms: Option<i64>,
    pub cert_not_after_unix: Option<i64>,
    pub cert_ca_generation: Option<u64>,
    /// The replica it is connected to (or was last).
    pub replica: String,
}

/// One service: its copies and the certificates issued to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStatus {
    pub service: String,
    pub external: bool,
    pub copies: Vec<CopyStatus>,
    pub certs_issued: u64,
    pub cert_not_after_unix: Option<i64>,
}

/// One registered copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyStatus {
    pub lease_id: u64,
    pub inbound_addr: String,
    pub healthy: bool,
    pub expires_in_ms: u64,
    /// How Kubernetes lists its address (`ready`, `terminating`, `absent`); empty when it
    /// lists no Service of the name.
    pub kubernetes: &'static str,
}

impl Plane {
    /// The proxies, the copies of every service, and the versions.
    pub fn status(&self, now: Instant) -> Status {
        let unix = |t: SystemTime| ca::unix_seconds(t);
        let proxies = self
            .all_proxies()
            .into_iter()
            .map(|((service, proxy), p)| ProxyStatus {
                service,
                proxy,
                connected: p.connected,
                last_sent_version: p.last_sent,
                last_acked_version: p.ack.as_ref().map_or(0, |a| a.version),
                last_ack_accepted: p.ack.as_ref().is_some_and(|a| a.accepted),
                last_ack_reason: p.ack.as_ref().map(|a| a.reason.clone()).unwrap_or_default(),
                last_ack_unix_ms: p.ack.as_ref().map(|a| a.at_unix_ms),
                cert_not_after_unix: p.cert_not_after_unix,
                cert_ca_generation: p.cert_in_force.or(p.cert_issued),
                replica: p.replica,
            })
            .collect();
        let services = self
            .mesh
            .services
            .values()
            .map(|s| {
                let issued = self.issued.get(&s.name).copied().unwrap_or_default();
                ServiceStatus {
                    service: s.name.clone(),
                    external: s.external.is_some(),
                    copies: self
                        .registry
                        .copies()
                        .filter(|(_, c)| c.service == s.name && c.expires > now)
                        .map(|(id, c)| CopyStatus {
                            lease_id: id.0,
                            inbound_addr: c.inbound.to_string(),
                            healthy: c.healthy,
                            expires_in_ms: u64::try_from(self.mode.expires_in(c, now).as_millis())
                                .unwrap_or(u64::MAX),
                            kubernetes: self
                                .registry
                                .discovered(&s.name)
                                .map_or("", |e| e.state(c.inbound.ip())),
                        })
                        .collect(),
                    certs_issued: issued.count,
                    cert_not_after_unix: issued.not_after.map(unix),
                }
            })
            .collect();
        Status {
            mesh: self.mesh.name.clone(),
            version: self.version(),
            config_version: self.config_version(),
            proxies,
            services,
            ca_not_after_unix: self.ca.not_after().map_or(0, unix),
            ca_generation: self.ca_generation,
            ca_rotation: rotation_name(self.rotation()).to_owned(),
            trust_bundle: self.ca.root_names(),
            store: self.store.location(),
        }
    }
}
