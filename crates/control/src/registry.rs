//! Which copies of each service exist: each registers with a lease it must renew, reports its
//! app's health, and leaves the endpoint sets the moment its lease expires, it turns unhealthy,
//! or it deregisters. Every change to an endpoint set bumps the version proxies are sent, and
//! names the service whose set changed ([`Registry::take_touched`]), so only the proxies that
//! call it are woken.
//!
//! Pure: the caller passes `now`, so leases are tested on a synthetic clock. No call scans every
//! copy: [`index`] keeps each service's leases by address and every lease by its expiry, so a
//! registration, a renewal, a health report or an expiry costs O(log n), and a service's
//! endpoints cost its own copies.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hopwise_model::kubernetes::Endpoints;
use hopwise_model::labels::Labels;
use serde::Serialize;

mod index;
use index::Index;

/// A lease, named by the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct LeaseId(pub u64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("lease {0:?} is unknown (expired, or never granted): register again")]
    UnknownLease(LeaseId),
    #[error("a lease of {0:?} is too short to renew in time; use at least one second")]
    TtlTooShort(Duration),
}

/// One registered copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Copy {
    pub service: String,
    /// Where other proxies reach it (its proxy's mTLS port).
    pub inbound: SocketAddr,
    pub healthy: bool,
    /// Its proxy's admin endpoint (`/metrics`), when the proxy said where it is.
    pub admin: Option<SocketAddr>,
    /// The labels it registered with (`RegisterRequest.labels`), which route subsets select by.
    #[serde(skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    #[serde(skip)]
    pub expires: Instant,
    #[serde(skip)]
    pub ttl: Duration,
}

/// What changed in one call, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Changes {
    pub added: Vec<(String, SocketAddr)>,
    pub removed: Vec<(String, SocketAddr)>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

#[derive(Debug, Default)]
pub struct Registry {
    copies: BTreeMap<LeaseId, Copy>,
    next: u64,
    version: u64,
    /// The services whose endpoint set changed since [`Registry::take_touched`].
    touched: BTreeSet<String>,
    index: Index,
    /// What Kubernetes lists of each service it knows (discovery): a copy there takes traffic
    /// only at an address listed ready. A service absent here is gated by its leases alone.
    discovered: BTreeMap<String, Endpoints>,
}

impl Registry {
    pub fn new() -> Self {
        Registry::default()
    }

    /// A registry whose lease ids start after `last`, so ids from an earlier run (a control
    /// plane that restarted) are never granted again.
    pub fn starting_after(last: u64) -> Self {
        Registry {
            next: last,
            ..Registry::default()
        }
    }

    /// The version of the endpoint sets; it grows on every change.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The endpoint set of `service` changed.
    fn changed(&mut self, service: &str) {
        self.version += 1;
        self.index.changed(service, self.version);
        if !self.touched.contains(service) {
            self.touched.insert(service.to_owned());
        }
    }

    /// The registry version at which `service`'s endpoint set last changed (0: never): an
    /// endpoint list built since then is still the list, but for leases that expired meanwhile.
    pub fn changed_at(&self, service: &str) -> u64 {
        self.index.changed_at(service)
    }

    /// Puts a copy in, with its indexes.
    fn insert(&mut self, id: LeaseId, copy: Copy) {
        if let Some(old) = self.copies.remove(&id) {
            self.index.remove(id, &old);
        }
        self.index.add(id, &copy);
        self.copies.insert(id, copy);
    }

    /// Takes a copy out, with its indexes.
    fn take(&mut self, id: LeaseId) -> Option<Copy> {
        let copy = self.copies.remove(&id)?;
        self.index.remove(id, &copy);
        Some(copy)
    }

    /// The services whose endpoint set changed since the last call.
    pub fn take_touched(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.touched)
    }

    /// Registers a copy. It serves traffic once it reports healthy (a new copy is unhealthy
    /// until its first probe passes, so no request reaches an app that is still starting).
    /// Registering the same address again replaces the old lease.
    pub fn register(
        &mut self,
        service: &str,
        inbound: SocketAddr,
        ttl: Duration,
        now: Instant,
    ) -> Result<LeaseId, RegistryError> {
        if ttl < Duration::from_secs(1) {
            return Err(RegistryError::TtlTooShort(ttl));
        }
        for id in self.index.at(service, inbound) {
            if let Some(old) = self.take(id)
                && old.healthy
            {
                self.changed(&old.service);
            }
        }
        self.next += 1;
        let id = LeaseId(self.next);
        self.insert(
            id,
            Copy {
                service: service.to_owned(),
                inbound,
                healthy: false,
                admin: None,
                labels: Labels::new(),
                expires: now + ttl,
                ttl,
            },
        );
        Ok(id)
    }

    /// Sets a copy whose lease is kept elsewhere (etcd, shared by replicas): inserted or
    /// replaced under `id`, expiring at `expires`. Returns whether an endpoint set changed.
    pub fn put(
        &mut self,
        id: LeaseId,
        service: &str,
        inbound: SocketAddr,
        healthy: bool,
        ttl: Duration,
        expires: Instant,
    ) -> bool {
        // A lease's labels are set once, after its first `put` (`set_labels`): kept here.
        let labels = self
            .copies
            .get(&id)
            .map(|c| c.labels.clone())
            .unwrap_or_default();
        let (changed, old_service) = match self.copies.get(&id) {
            None => (healthy, None),
            Some(old) => (
                (old.healthy || healthy)
                    && (old.healthy != healthy || old.service != service || old.inbound != inbound),
                // A copy that moves to another service leaves the old one's set.
                (old.healthy && old.service != service).then(|| old.service.clone()),
            ),
        };
        self.insert(
            id,
            Copy {
                service: service.to_owned(),
                inbound,
                healthy,
                // The shared record's admin address is set by the caller (`set_admin`).
                admin: None,
                labels,
                expires,
                ttl,
            },
        );
        if changed {
            self.changed(service);
            if let Some(old) = old_service {
                self.touched.insert(old);
            }
        }
        changed
    }

    /// Records where the copy's admin endpoint is (for the dashboard). Changes no endpoint set.
    pub fn set_admin(&mut self, id: LeaseId, admin: SocketAddr) -> Result<(), RegistryError> {
        let copy = self
            .copies
            .get_mut(&id)
            .ok_or(RegistryError::UnknownLease(id))?;
        copy.admin = Some(admin);
        Ok(())
    }

    /// Records the labels a copy carries. Changes its service's endpoint set only when the copy
    /// serves and its labels are new (a subset's copies changed).
    pub fn set_labels(&mut self, id: LeaseId, labels: Labels) -> Result<(), RegistryError> {
        let copy = self
            .copies
            .get_mut(&id)
            .ok_or(RegistryError::UnknownLease(id))?;
        if copy.labels == labels {
            return Ok(());
        }
        copy.labels = labels;
        if copy.healthy {
            let service = copy.service.clone();
            self.changed(&service);
        }
        Ok(())
    }

    /// Keeps a lease alive for another TTL.
    pub fn renew(&mut self, id: LeaseId, now: Instant) -> Result<(), RegistryError> {
        self.expire(now);
        let copy = self
            .copies
            .get_mut(&id)
            .ok_or(RegistryError::UnknownLease(id))?;
        let from = copy.expires;
        copy.expires = now + copy.ttl;
        let to = copy.expires;
        self.index.renewed(id, from, to);
        Ok(())
    }

    /// Records the app's health as the copy's own probe saw it.
    pub fn set_health(
        &mut self,
        id: LeaseId,
        healthy: bool,
        now: Instant,
    ) -> Result<Changes, RegistryError> {
        let mut changes = self.expire(now);
        let copy = self
            .copies
            .get_mut(&id)
            .ok_or(RegistryError::UnknownLease(id))?;
        if copy.healthy != healthy {
            copy.healthy = healthy;
            let entry = (copy.service.clone(), copy.inbound);
            self.changed(&entry.0);
            if healthy {
                changes.added.push(entry);
            } else {
                changes.removed.push(entry);
            }
        }
        Ok(changes)
    }

    /// A graceful goodbye: the copy leaves at once.
    pub fn deregister(&mut self, id: LeaseId) -> Changes {
        let mut changes = Changes::default();
        if let Some(c) = self.take(id)
            && c.healthy
        {
            self.changed(&c.service);
            changes.removed.push((c.service, c.inbound));
        }
        changes
    }

    /// Drops every lease that has expired by `now`.
    pub fn expire(&mut self, now: Instant) -> Changes {
        let dead = self.index.expired(now);
        let mut changes = Changes::default();
        for id in dead {
            changes.removed.extend(self.deregister(id).removed);
        }
        changes
    }

    /// The copies of `service` that may receive traffic: leased, unexpired and healthy; each
    /// address once, in order.
    pub fn endpoints(&self, service: &str, now: Instant) -> Vec<SocketAddr> {
        self.live(service, now).map(|(addr, _, _)| addr).collect()
    }

    /// Sets what Kubernetes lists of `service`'s addresses (`None`: it knows no Service of
    /// that name, and leases alone decide). Returns whether anything changed; a change bumps
    /// the version and wakes the service's callers, as a copy's change does.
    pub fn set_discovered(&mut self, service: &str, endpoints: Option<Endpoints>) -> bool {
        if self.discovered.get(service) == endpoints.as_ref() {
            return false;
        }
        match endpoints {
            Some(e) => self.discovered.insert(service.to_owned(), e),
            None => self.discovered.remove(service),
        };
        self.changed(service);
        true
    }

    /// The services Kubernetes's lists gate.
    pub fn discovered_services(&self) -> impl Iterator<Item = &String> {
        self.discovered.keys()
    }

    /// What Kubernetes lists of `service`, when it knows it.
    pub fn discovered(&self, service: &str) -> Option<&Endpoints> {
        self.discovered.get(service)
    }

    /// Each address of `service` that may receive traffic, in order, with the moment the last
    /// of its live leases expires (the list holds until the earliest of these, unless
    /// [`Registry::changed_at`] moves) and that lease's labels (two live leases at one address
    /// are a copy registered again, the later its own). Where Kubernetes knows the service,
    /// only addresses it lists as ready.
    pub fn live<'a>(
        &'a self,
        service: &'a str,
        now: Instant,
    ) -> impl Iterator<Item = (SocketAddr, Instant, &'a Labels)> + 'a {
        let gate = self.discovered.get(service);
        self.index
            .by_address(service)
            .filter(move |(addr, _)| gate.is_none_or(|e| e.admits(addr.ip())))
            .filter_map(move |(addr, ids)| {
                ids.iter()
                    .filter_map(|id| self.copies.get(id))
                    .filter(|c| c.healthy && c.expires > now)
                    .max_by_key(|c| c.expires)
                    .map(|c| (*addr, c.expires, &c.labels))
            })
    }

    /// How many leases `service` holds, but those at `addr` (which a registration there
    /// replaces).
    pub fn held_besides(&self, service: &str, addr: SocketAddr) -> usize {
        self.index.leases(service) - self.index.at(service, addr).len()
    }

    /// The leases that hold `service` at `addr`.
    pub fn leases_at(&self, service: &str, addr: SocketAddr) -> Vec<LeaseId> {
        self.index.at(service, addr)
    }

    /// The copy holding a lease, if the lease is known (it may have expired by now; see
    /// [`Registry::expire`]).
    pub fn copy(&self, id: LeaseId) -> Option<&Copy> {
        self.copies.get(&id)
    }

    /// When the next lease expires, if any is held: the moment to call [`Registry::expire`].
    pub fn next_expiry(&self) -> Option<Instant> {
        self.index.next_expiry()
    }

    /// Every lease, for `hopwise status`.
    pub fn copies(&self) -> impl Iterator<Item = (&LeaseId, &Copy)> {
        self.copies.iter()
    }
}

#[cfg(test)]
mod tests;
