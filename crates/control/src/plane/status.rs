//! `Status`: the proxies, the copies of every service, the CA and the versions.

use std::time::{Instant, SystemTime};

use super::{Plane, rotation_name};
use crate::ca::{self};
use crate::pb;

impl Plane {
    /// The proxies, the copies of every service, and the versions.
    pub fn status(&self, now: Instant) -> pb::StatusResponse {
        let unix = |t: SystemTime| ca::unix_seconds(t);
        let proxies = self
            .all_proxies()
            .into_iter()
            .map(|((service, proxy), p)| pb::ProxyStatus {
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
                pb::ServiceStatus {
                    service: s.name.clone(),
                    external: s.external.is_some(),
                    copies: self
                        .registry
                        .copies()
                        .filter(|(_, c)| c.service == s.name && c.expires > now)
                        .map(|(id, c)| pb::CopyStatus {
                            lease_id: id.0,
                            inbound_addr: c.inbound.to_string(),
                            healthy: c.healthy,
                            expires_in_ms: u64::try_from(self.mode.expires_in(c, now).as_millis())
                                .unwrap_or(u64::MAX),
                        })
                        .collect(),
                    certs_issued: issued.count,
                    cert_not_after_unix: issued.not_after.map(unix),
                }
            })
            .collect();
        pb::StatusResponse {
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
