//! Which copies of each service exist: each registers with a lease it must renew, reports its
//! app's health, and leaves the endpoint sets the moment its lease expires, it turns unhealthy,
//! or it deregisters. Every change to an endpoint set bumps the version proxies are sent, and
//! names the service whose set changed ([`Registry::take_touched`]), so only the proxies that
//! call it are woken.
//!
//! Pure: the caller passes `now`, so leases are tested on a synthetic clock.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;

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
        if !self.touched.contains(service) {
            self.touched.insert(service.to_owned());
        }
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
        let stale: Vec<LeaseId> = self
            .copies
            .iter()
            .filter(|(_, c)| c.service == service && c.inbound == inbound)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            if let Some(old) = self.copies.remove(&id)
                && old.healthy
            {
                self.changed(&old.service);
            }
        }
        self.next += 1;
        let id = LeaseId(self.next);
        self.copies.insert(
            id,
            Copy {
                service: service.to_owned(),
                inbound,
                healthy: false,
                admin: None,
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
        let (changed, old_service) = match self.copies.get(&id) {
            None => (healthy, None),
            Some(old) => (
                (old.healthy || healthy)
                    && (old.healthy != healthy || old.service != service || old.inbound != inbound),
                // A copy that moves to another service leaves the old one's set.
                (old.healthy && old.service != service).then(|| old.service.clone()),
            ),
        };
        self.copies.insert(
            id,
            Copy {
                service: service.to_owned(),
                inbound,
                healthy,
                // The shared record's admin address is set by the caller (`set_admin`).
                admin: None,
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

    /// Keeps a lease alive for another TTL.
    pub fn renew(&mut self, id: LeaseId, now: Instant) -> Result<(), RegistryError> {
        self.expire(now);
        let copy = self
            .copies
            .get_mut(&id)
            .ok_or(RegistryError::UnknownLease(id))?;
        copy.expires = now + copy.ttl;
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
        if let Some(c) = self.copies.remove(&id)
            && c.healthy
        {
            self.changed(&c.service);
            changes.removed.push((c.service, c.inbound));
        }
        changes
    }

    /// Drops every lease that has expired by `now`.
    pub fn expire(&mut self, now: Instant) -> Changes {
        let dead: Vec<LeaseId> = self
            .copies
            .iter()
            .filter(|(_, c)| c.expires <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut changes = Changes::default();
        for id in dead {
            changes.removed.extend(self.deregister(id).removed);
        }
        changes
    }

    /// The copies of `service` that may receive traffic: leased, unexpired and healthy.
    pub fn endpoints(&self, service: &str, now: Instant) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = self
            .copies
            .values()
            .filter(|c| c.service == service && c.healthy && c.expires > now)
            .map(|c| c.inbound)
            .collect();
        out.sort();
        out
    }

    /// The copy holding a lease, if the lease is known (it may have expired by now; see
    /// [`Registry::expire`]).
    pub fn copy(&self, id: LeaseId) -> Option<&Copy> {
        self.copies.get(&id)
    }

    /// When the next lease expires, if any is held: the moment to call [`Registry::expire`].
    pub fn next_expiry(&self) -> Option<Instant> {
        self.copies.values().map(|c| c.expires).min()
    }

    /// Every lease, for `hopwise status`.
    pub fn copies(&self) -> impl Iterator<Item = (&LeaseId, &Copy)> {
        self.copies.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn a_copy_serves_once_healthy_and_leaves_when_its_lease_expires() {
        let t0 = Instant::now();
        let mut r = Registry::new();
        let id = r.register("pricing", addr(1), TTL, t0).unwrap();
        assert!(
            r.endpoints("pricing", t0).is_empty(),
            "not before its first probe"
        );
        let v = r.version();
        r.set_health(id, true, t0).unwrap();
        assert!(r.version() > v);
        assert_eq!(r.endpoints("pricing", t0), [addr(1)]);
        // Renewed in time, it stays.
        r.renew(id, t0 + Duration::from_secs(8)).unwrap();
        assert_eq!(
            r.endpoints("pricing", t0 + Duration::from_secs(15)),
            [addr(1)]
        );
        // Not renewed: gone at expiry, at once, and its renewals are refused.
        let later = t0 + Duration::from_secs(18);
        assert!(r.endpoints("pricing", later).is_empty());
        let changes = r.expire(later);
        assert_eq!(changes.removed, [("pricing".to_owned(), addr(1))]);
        assert_eq!(r.renew(id, later), Err(RegistryError::UnknownLease(id)));
    }

    #[test]
    fn unhealthy_copies_leave_and_come_back() {
        let t0 = Instant::now();
        let mut r = Registry::new();
        let a = r.register("pricing", addr(1), TTL, t0).unwrap();
        let b = r.register("pricing", addr(2), TTL, t0).unwrap();
        r.set_health(a, true, t0).unwrap();
        r.set_health(b, true, t0).unwrap();
        assert_eq!(r.endpoints("pricing", t0), [addr(1), addr(2)]);
        let changes = r.set_health(a, false, t0).unwrap();
        assert_eq!(changes.removed, [("pricing".to_owned(), addr(1))]);
        assert_eq!(r.endpoints("pricing", t0), [addr(2)]);
        // No change, no new version.
        let v = r.version();
        assert!(r.set_health(b, true, t0).unwrap().is_empty());
        assert_eq!(r.version(), v);
    }

    #[test]
    fn deregistering_removes_at_once_and_a_restart_replaces_the_old_lease() {
        let t0 = Instant::now();
        let mut r = Registry::new();
        let a = r.register("fee", addr(1), TTL, t0).unwrap();
        r.set_health(a, true, t0).unwrap();
        // The same copy restarted before its old lease expired: one entry, not two.
        let a2 = r.register("fee", addr(1), TTL, t0).unwrap();
        r.set_health(a2, true, t0).unwrap();
        assert_eq!(r.endpoints("fee", t0), [addr(1)]);
        assert_eq!(r.copies().count(), 1);
        r.deregister(a2);
        assert!(r.endpoints("fee", t0).is_empty());
    }

    #[test]
    fn lease_ids_continue_after_a_restart_and_the_next_expiry_is_known() {
        let t0 = Instant::now();
        let mut r = Registry::starting_after(7 << 32);
        assert_eq!(r.next_expiry(), None);
        let a = r.register("a", addr(1), TTL, t0).unwrap();
        assert_eq!(a, LeaseId((7 << 32) + 1));
        let b = r
            .register("a", addr(2), Duration::from_secs(2), t0)
            .unwrap();
        assert_eq!(r.next_expiry(), Some(t0 + Duration::from_secs(2)));
        assert_eq!(r.copy(b).map(|c| c.inbound), Some(addr(2)));
        r.expire(t0 + Duration::from_secs(3));
        assert_eq!(r.copy(b), None);
        assert_eq!(r.next_expiry(), Some(t0 + TTL));
    }

    #[test]
    fn copies_put_from_a_shared_store_change_the_version_only_when_endpoints_change() {
        let t0 = Instant::now();
        let far = t0 + Duration::from_secs(3600);
        let mut r = Registry::new();
        let v = r.version();
        assert!(
            !r.put(LeaseId(9), "b", addr(1), false, TTL, far),
            "unhealthy: no endpoint"
        );
        assert_eq!(r.version(), v);
        assert!(r.put(LeaseId(9), "b", addr(1), true, TTL, far));
        assert_eq!(r.endpoints("b", t0), [addr(1)]);
        assert!(
            !r.put(LeaseId(9), "b", addr(1), true, TTL, far),
            "the same again"
        );
        assert!(!r.deregister(LeaseId(9)).is_empty());
        assert!(r.endpoints("b", t0).is_empty());
    }

    #[test]
    fn each_change_names_the_service_whose_endpoints_changed() {
        let t0 = Instant::now();
        let far = t0 + Duration::from_secs(3600);
        let mut r = Registry::new();
        let a = r.register("pricing", addr(1), TTL, t0).unwrap();
        let b = r.register("stock", addr(2), TTL, t0).unwrap();
        assert!(
            r.take_touched().is_empty(),
            "unhealthy copies are in no endpoint set"
        );
        r.set_health(a, true, t0).unwrap();
        r.renew(b, t0).unwrap();
        assert_eq!(r.take_touched(), BTreeSet::from(["pricing".to_owned()]));
        assert!(r.take_touched().is_empty(), "taken");
        r.set_health(b, true, t0).unwrap();
        r.deregister(a);
        assert_eq!(
            r.take_touched(),
            BTreeSet::from(["pricing".to_owned(), "stock".to_owned()])
        );
        // A shared store's copy that moves to another service leaves the old one's set too.
        r.put(LeaseId(99), "stock", addr(9), true, TTL, far);
        r.take_touched();
        r.put(LeaseId(99), "pricing", addr(9), true, TTL, far);
        assert_eq!(
            r.take_touched(),
            BTreeSet::from(["pricing".to_owned(), "stock".to_owned()])
        );
        r.expire(t0 + TTL);
        assert_eq!(r.take_touched(), BTreeSet::from(["stock".to_owned()]));
    }

    #[test]
    fn leases_shorter_than_a_second_are_refused() {
        let mut r = Registry::new();
        assert!(matches!(
            r.register("a", addr(1), Duration::from_millis(10), Instant::now()),
            Err(RegistryError::TtlTooShort(_))
        ));
    }

    proptest::proptest! {
        /// Whatever happens, the endpoint set holds exactly the healthy, unexpired copies.
        #[test]
        fn endpoints_are_exactly_the_live_healthy_copies(
            ops in proptest::collection::vec((0u8..5, 0u16..4, 0u64..30), 0..60),
        ) {
            let t0 = Instant::now();
            let mut r = Registry::new();
            let mut ids: Vec<LeaseId> = Vec::new();
            let mut now = t0;
            for (op, which, dt) in ops {
                now += Duration::from_secs(dt % 7);
                let id = ids.get(usize::from(which)).copied();
                match (op, id) {
                    (0, _) => {
                        if let Ok(id) = r.register("s", addr(which), TTL, now) {
                            ids.push(id);
                        }
                    }
                    (1, Some(id)) => { let _ = r.renew(id, now); }
                    (2, Some(id)) => { let _ = r.set_health(id, true, now); }
                    (3, Some(id)) => { let _ = r.set_health(id, false, now); }
                    (4, Some(id)) => { r.deregister(id); }
                    _ => {}
                }
                let expected: std::collections::BTreeSet<SocketAddr> = r
                    .copies()
                    .filter(|(_, c)| c.healthy && c.expires > now)
                    .map(|(_, c)| c.inbound)
                    .collect();
                let got: std::collections::BTreeSet<SocketAddr> =
                    r.endpoints("s", now).into_iter().collect();
                proptest::prop_assert_eq!(got, expected);
            }
        }
    }
}
