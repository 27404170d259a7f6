//! What the plane knows of each proxy: its streams, the last version sent and acknowledged, its
//! certificate, its admin endpoint; the cap on proxy names, and records of proxies gone for good
//! dropped.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime};

use super::{ApiError, MAX_PROXY_NAMES_PER_SERVICE, PROXY_RECORD_TTL, Plane, unix_ms};
use crate::ca::{self};

/// A proxy's acknowledgement of a version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ack {
    /// The join token it acknowledges with.
    pub token: String,
    /// The service it asks for (empty: the token's).
    pub service: String,
    pub proxy: String,
    pub version: u64,
    pub accepted: bool,
    /// Why it rejected the version.
    pub reason: String,
    /// The CA generation of the certificate it presents (0: not said).
    pub cert_ca_generation: u64,
    /// The snapshot's trust bundle is in force.
    pub trust_bundle_applied: bool,
}
use crate::store::etcd::{AckValue, ProxyValue};

#[derive(Debug, Clone, Default)]
pub(super) struct ProxyRecord {
    streams: usize,
    last_sent: u64,
    ack: Option<AckRecord>,
    cert_not_after: Option<SystemTime>,
    /// The CA generation of the last certificate issued to it.
    cert_issued: Option<u64>,
    /// The CA generation of the certificate it says it presents (from its acknowledgements,
    /// sent once a new certificate is in use).
    cert_in_force: Option<u64>,
    /// The highest version it acknowledged with the snapshot's trust bundle in force.
    bundle_confirmed: u64,
    /// Its admin endpoint (`SubscribeRequest.admin_addr`), for the dashboard.
    admin: Option<SocketAddr>,
}

impl ProxyRecord {
    /// What this replica knows of the proxy, as replicas share it (`replica`: this one's name).
    pub(super) fn facts(&self, replica: &str) -> ProxyValue {
        ProxyValue {
            replica: replica.to_owned(),
            connected: self.streams > 0,
            last_sent: self.last_sent,
            ack: self.ack.as_ref().map(|a| AckValue {
                version: a.version,
                accepted: a.accepted,
                reason: a.reason.clone(),
                at_unix_ms: unix_ms(a.at),
            }),
            cert_not_after_unix: self.cert_not_after.map(ca::unix_seconds),
            cert_issued: self.cert_issued,
            cert_in_force: self.cert_in_force,
            bundle_confirmed: self.bundle_confirmed,
            admin: self.admin,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct AckRecord {
    version: u64,
    accepted: bool,
    reason: String,
    at: SystemTime,
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct IssuedRecord {
    pub(super) count: u64,
    pub(super) not_after: Option<SystemTime>,
}

impl Plane {
    /// Remembers a certificate issued (signed under CA `generation`), for `Status` and for
    /// `rotate-ca --stage retire`.
    pub fn record_issued(
        &mut self,
        service: &str,
        proxy: &str,
        not_after: SystemTime,
        generation: u64,
    ) {
        let rec = self.issued.entry(service.to_owned()).or_default();
        rec.count += 1;
        rec.not_after = Some(not_after);
        if !proxy.is_empty() {
            let p = self
                .proxies
                .entry((service.to_owned(), proxy.to_owned()))
                .or_default();
            p.cert_not_after = Some(not_after);
            p.cert_issued = Some(generation);
            self.share(service, proxy);
        }
    }

    /// Refuses a name [`request::proxy_name`](super::request::proxy_name) refuses, and a proxy
    /// name that `service` has not used yet once it has used
    /// [`MAX_PROXY_NAMES_PER_SERVICE`] (records a join-token holder could otherwise grow
    /// without end).
    pub fn admit_proxy(&self, service: &str, proxy: &str) -> Result<(), ApiError> {
        // Every call that names a proxy comes here before its name is kept.
        super::request::proxy_name(proxy)?;
        let key = (service.to_owned(), proxy.to_owned());
        if self.proxies.contains_key(&key) {
            return Ok(());
        }
        let names = self
            .proxies
            .range((service.to_owned(), String::new())..)
            .take_while(|((s, _), _)| s == service)
            .count();
        if names >= MAX_PROXY_NAMES_PER_SERVICE {
            return Err(ApiError::TooManyProxies {
                service: service.to_owned(),
                cap: MAX_PROXY_NAMES_PER_SERVICE,
            });
        }
        Ok(())
    }

    pub(super) fn proxy(&mut self, service: &str, proxy: &str) -> &mut ProxyRecord {
        self.proxies
            .entry((service.to_owned(), proxy.to_owned()))
            .or_default()
    }

    /// A `Subscribe` stream of `proxy` opens: the name admitted first ([`Plane::admit_proxy`]),
    /// then its admin endpoint (if it named one) and the stream recorded. Admitting after a
    /// record was made would find the name known and pass it over the cap.
    pub fn subscriber_joined(
        &mut self,
        service: &str,
        proxy: &str,
        admin: Option<SocketAddr>,
    ) -> Result<(), ApiError> {
        self.admit_proxy(service, proxy)?;
        if let Some(admin) = admin {
            self.set_proxy_admin(service, proxy, admin);
        }
        self.stream_opened(service, proxy);
        Ok(())
    }

    /// A subscriber's stream opened.
    pub fn stream_opened(&mut self, service: &str, proxy: &str) {
        let p = self.proxy(service, proxy);
        p.streams += 1;
        if p.streams == 1 {
            self.share(service, proxy);
        }
    }

    /// Where a subscribed proxy's admin endpoint is (checked by [`admin_addr`]).
    pub fn set_proxy_admin(&mut self, service: &str, proxy: &str, addr: SocketAddr) {
        let p = self.proxy(service, proxy);
        if p.admin.replace(addr) != Some(addr) {
            self.share(service, proxy);
        }
    }

    /// The proxies whose snapshot stream is open and that said where their admin endpoint is:
    /// (service, proxy name, admin address). The dashboard reads their metrics.
    pub fn subscribed_admins(&self) -> Vec<(String, String, SocketAddr)> {
        self.proxies
            .iter()
            .filter(|(_, p)| p.streams > 0)
            .filter_map(|((service, proxy), p)| Some((service.clone(), proxy.clone(), p.admin?)))
            .collect()
    }

    /// A subscriber's stream closed.
    pub fn stream_closed(&mut self, service: &str, proxy: &str) {
        let p = self.proxy(service, proxy);
        p.streams = p.streams.saturating_sub(1);
        if p.streams == 0 {
            self.share(service, proxy);
        }
    }

    /// A snapshot was sent to a subscriber.
    pub fn record_sent(&mut self, service: &str, proxy: &str, version: u64) {
        self.proxy(service, proxy).last_sent = version;
    }

    /// A proxy accepted or rejected a version.
    #[allow(clippy::too_many_arguments)]
    pub fn ack(
        &mut self,
        token: &str,
        service: &str,
        proxy: &str,
        version: u64,
        accepted: bool,
        reason: &str,
        now: SystemTime,
    ) -> Result<(), ApiError> {
        self.ack_request(
            &Ack {
                token: token.to_owned(),
                service: service.to_owned(),
                proxy: proxy.to_owned(),
                version,
                accepted,
                reason: reason.to_owned(),
                cert_ca_generation: 0,
                trust_bundle_applied: false,
            },
            now,
        )
    }

    /// A proxy accepted or rejected a version, and said which CA generation its certificate is
    /// from and whether the snapshot's trust bundle is in force.
    pub fn ack_request(&mut self, r: &Ack, now: SystemTime) -> Result<(), ApiError> {
        let service = self.authorize(&r.token, &r.service)?;
        self.admit_proxy(&service, &r.proxy)?;
        let p = self.proxy(&service, &r.proxy);
        p.ack = Some(AckRecord {
            version: r.version,
            accepted: r.accepted,
            reason: r.reason.clone(),
            at: now,
        });
        if r.cert_ca_generation > 0 {
            p.cert_in_force = Some(r.cert_ca_generation);
        }
        if r.trust_bundle_applied {
            p.bundle_confirmed = p.bundle_confirmed.max(r.version);
        }
        // Every acknowledgement: `Status` on the other replicas shows its version and time.
        // The writer coalesces (the latest facts of each proxy, at most every 100 ms).
        self.share(&service, &r.proxy);
        Ok(())
    }

    /// This replica's name in `Status` (its listen address).
    pub fn set_replica(&mut self, name: &str) {
        self.replica = name.to_owned();
    }

    /// Drops the records of proxies that have had no stream open for [`PROXY_RECORD_TTL`] and
    /// hold no certificate valid at `wall` (a proxy that may still be serving is kept: CA
    /// rotation waits for it). Returns how many were dropped. Call it now and then (the
    /// server does, every second).
    pub fn prune_proxies(&mut self, now: Instant, wall: SystemTime) -> usize {
        let mut gone = Vec::new();
        for (key, p) in &self.proxies {
            if p.streams > 0 {
                self.proxies_idle.remove(key);
                continue;
            }
            let since = *self.proxies_idle.entry(key.clone()).or_insert(now);
            let valid = p.cert_not_after.is_some_and(|t| t > wall);
            if now.saturating_duration_since(since) >= PROXY_RECORD_TTL && !valid {
                gone.push(key.clone());
            }
        }
        for key in &gone {
            self.proxies.remove(key);
            self.proxies_idle.remove(key);
            self.mode.pruned(key);
        }
        gone.len()
    }

    /// Every proxy known to this replica or, through the shared store, to another one, with
    /// their facts merged.
    pub(super) fn all_proxies(&self) -> BTreeMap<(String, String), ProxyValue> {
        let local = self
            .proxies
            .iter()
            .map(|(k, p)| (k.clone(), p.facts(&self.replica)))
            .collect();
        self.remote.merged(local)
    }
}
