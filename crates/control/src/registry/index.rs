//! The registry's indexes over its copies, so that no call scans every copy: the leases of each
//! service by address (a service's endpoints, the leases a registration at an address replaces,
//! the cap on copies), the registry version at which each service's endpoint set last changed
//! (what a cached endpoint list is checked against), and the leases in the order they expire
//! (expiry and the next deadline in O(log n)). Every insertion and removal of a copy goes
//! through [`Index::add`] and [`Index::remove`]; `registry/tests.rs` holds the indexes equal to
//! a scan of every copy after any sequence of calls.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Instant;

use super::{Copy, LeaseId};

/// One service's leases.
#[derive(Debug, Default)]
struct Service {
    /// The leases at each address (several only while a stale lease awaits its expiry).
    at: BTreeMap<SocketAddr, BTreeSet<LeaseId>>,
    /// How many leases in all.
    leases: usize,
    /// The registry version of the last change to its endpoint set (0: none yet).
    changed: u64,
}

#[derive(Debug, Default)]
pub(super) struct Index {
    services: BTreeMap<String, Service>,
    /// Every lease by the moment it expires.
    expiries: BTreeSet<(Instant, LeaseId)>,
}

impl Index {
    /// A copy joined under `id`.
    pub(super) fn add(&mut self, id: LeaseId, copy: &Copy) {
        let s = self.service(&copy.service);
        s.at.entry(copy.inbound).or_default().insert(id);
        s.leases += 1;
        self.expiries.insert((copy.expires, id));
    }

    /// The copy under `id` left. The service's entry stays (its change version must not go
    /// back to 0 while a cache may hold it).
    pub(super) fn remove(&mut self, id: LeaseId, copy: &Copy) {
        self.expiries.remove(&(copy.expires, id));
        let Some(s) = self.services.get_mut(&copy.service) else {
            return;
        };
        if let Some(ids) = s.at.get_mut(&copy.inbound)
            && ids.remove(&id)
        {
            s.leases -= 1;
            if ids.is_empty() {
                s.at.remove(&copy.inbound);
            }
        }
    }

    /// The lease `id` now expires at `to` instead of `from`.
    pub(super) fn renewed(&mut self, id: LeaseId, from: Instant, to: Instant) {
        self.expiries.remove(&(from, id));
        self.expiries.insert((to, id));
    }

    /// `service`'s endpoint set changed at registry version `version`.
    pub(super) fn changed(&mut self, service: &str, version: u64) {
        self.service(service).changed = version;
    }

    /// The registry version of the last change to `service`'s endpoint set (0: none).
    pub(super) fn changed_at(&self, service: &str) -> u64 {
        self.services.get(service).map_or(0, |s| s.changed)
    }

    /// The leases of `service` held at `addr`.
    pub(super) fn at(&self, service: &str, addr: SocketAddr) -> Vec<LeaseId> {
        self.services
            .get(service)
            .and_then(|s| s.at.get(&addr))
            .map_or_else(Vec::new, |ids| ids.iter().copied().collect())
    }

    /// `service`'s leases, by address (addresses in order).
    pub(super) fn by_address<'a>(
        &'a self,
        service: &'a str,
    ) -> impl Iterator<Item = (&'a SocketAddr, &'a BTreeSet<LeaseId>)> + 'a {
        self.services
            .get(service)
            .into_iter()
            .flat_map(|s| s.at.iter())
    }

    /// How many leases `service` holds.
    pub(super) fn leases(&self, service: &str) -> usize {
        self.services.get(service).map_or(0, |s| s.leases)
    }

    /// The leases expired by `now` (expiring at or before it), soonest first.
    pub(super) fn expired(&self, now: Instant) -> Vec<LeaseId> {
        self.expiries
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
            .collect()
    }

    /// When the next lease expires.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.expiries.first().map(|(at, _)| *at)
    }

    fn service(&mut self, name: &str) -> &mut Service {
        self.services.entry(name.to_owned()).or_default()
    }
}
