//! Every proxy of the mesh as the replicas know it together: each replica's word about a proxy
//! (this one's, and the others' read from the shared store) merged into one, and whether a proxy
//! holds a CA rotation's stage back. Pure: no clock (callers pass `now`), no I/O.

use std::collections::BTreeMap;

use crate::store::etcd::{Effect, ProxyValue};

use super::RotateStage;

/// What the other replicas know of each proxy, by (service, proxy name), then by the etcd lease
/// of the replica that wrote it.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    facts: BTreeMap<(String, String), BTreeMap<u64, ProxyValue>>,
}

impl Remote {
    /// Takes in a record of a proxy seen on the shared store (other effects are not its
    /// business). A record written on `own` lease is this replica's own, echoed: skipped, as
    /// what it holds in memory is as new or newer.
    pub fn learn(&mut self, own: Option<u64>, effect: &Effect) {
        match effect {
            Effect::ProxyPut {
                service,
                proxy,
                lease,
                value,
            } if Some(*lease) != own => {
                self.put(service.clone(), proxy.clone(), *lease, value.clone());
            }
            Effect::ProxyGone {
                service,
                proxy,
                lease,
            } => self.remove(service, proxy, *lease),
            _ => {}
        }
    }

    pub fn put(&mut self, service: String, proxy: String, lease: u64, value: ProxyValue) {
        self.facts
            .entry((service, proxy))
            .or_default()
            .insert(lease, value);
    }

    pub fn remove(&mut self, service: &str, proxy: &str, lease: u64) {
        let key = (service.to_owned(), proxy.to_owned());
        if let Some(by_lease) = self.facts.get_mut(&key) {
            by_lease.remove(&lease);
            if by_lease.is_empty() {
                self.facts.remove(&key);
            }
        }
    }

    /// Every record held: (service, proxy, lease).
    pub fn keys(&self) -> impl Iterator<Item = (&str, &str, u64)> {
        self.facts.iter().flat_map(|((s, p), by_lease)| {
            by_lease
                .keys()
                .map(move |lease| (s.as_str(), p.as_str(), *lease))
        })
    }

    /// Every proxy with what each replica knows of it, this replica's (`local`) included.
    pub fn merged(
        &self,
        local: BTreeMap<(String, String), ProxyValue>,
    ) -> BTreeMap<(String, String), ProxyValue> {
        let mut all: BTreeMap<(String, String), Vec<ProxyValue>> = BTreeMap::new();
        for (key, value) in local {
            all.entry(key).or_default().push(value);
        }
        for (key, by_lease) in &self.facts {
            all.entry(key.clone())
                .or_default()
                .extend(by_lease.values().cloned());
        }
        all.into_iter().map(|(k, v)| (k, merge(&v))).collect()
    }
}

/// One proxy's facts from several replicas, as one. Connected if its stream is open on any
/// (`replica` names each, for the moment of a failover when the old one has not noticed yet);
/// the acknowledgement received last; the highest of each generation and version (they only
/// grow: versions are the store's revisions, the same on every replica).
pub fn merge(facts: &[ProxyValue]) -> ProxyValue {
    let mut out = ProxyValue::default();
    let mut replicas: Vec<&str> = Vec::new();
    for f in facts {
        if f.connected {
            out.connected = true;
            replicas.push(&f.replica);
        }
        out.last_sent = out.last_sent.max(f.last_sent);
        let later = |a: &crate::store::etcd::AckValue, b: &crate::store::etcd::AckValue| {
            (a.at_unix_ms, a.version) > (b.at_unix_ms, b.version)
        };
        if let Some(ack) = &f.ack
            && out.ack.as_ref().is_none_or(|known| later(ack, known))
        {
            out.ack = Some(ack.clone());
        }
        out.cert_not_after_unix = out.cert_not_after_unix.max(f.cert_not_after_unix);
        out.cert_issued = out.cert_issued.max(f.cert_issued);
        out.cert_in_force = out.cert_in_force.max(f.cert_in_force);
        out.bundle_confirmed = out.bundle_confirmed.max(f.bundle_confirmed);
        // Where it says now, from a replica it is connected to.
        if f.admin.is_some() && (out.admin.is_none() || f.connected) {
            out.admin = f.admin;
        }
    }
    replicas.sort_unstable();
    replicas.dedup();
    out.replica = replicas.join(",");
    out
}

/// It may be serving: its stream is open somewhere, or its last known certificate is still
/// valid at `now_unix` (seconds).
pub fn live(p: &ProxyValue, now_unix: i64) -> bool {
    p.connected || p.cert_not_after_unix.is_some_and(|t| t > now_unix)
}

/// Why `p` holds `stage` back (`None`: it does not): `reissue` waits until it has confirmed
/// the bundle of `bundle_version` or later, `retire` until its certificate is from
/// `ca_generation`.
pub fn not_ready(
    p: &ProxyValue,
    stage: RotateStage,
    ca_generation: u64,
    bundle_version: u64,
) -> Option<String> {
    match stage {
        RotateStage::Add => None,
        RotateStage::Reissue if p.bundle_confirmed < bundle_version => Some(if p.connected {
            "has not confirmed the trust bundle with the new root yet".to_owned()
        } else {
            "has not confirmed the trust bundle with the new root (its stream is closed, but \
             its certificate is still valid)"
                .to_owned()
        }),
        RotateStage::Reissue => None,
        // What the proxy says it presents; a proxy that never says (an older build) is judged
        // by what it was issued.
        RotateStage::Retire => match (p.cert_in_force.or(p.cert_issued), p.cert_issued) {
            (Some(g), _) if g >= ca_generation => None,
            (Some(_), Some(issued)) if issued >= ca_generation => Some(
                "it was issued a certificate from the new root but has not confirmed using it yet"
                    .to_owned(),
            ),
            (Some(g), _) => Some(format!(
                "its certificate is from the old root (CA generation {g}, current {ca_generation})"
            )),
            (None, _) => Some(
                "its certificate is unknown (not issued or acknowledged since the control plane \
                 started)"
                    .to_owned(),
            ),
        },
    }
}

#[cfg(test)]
mod tests;
