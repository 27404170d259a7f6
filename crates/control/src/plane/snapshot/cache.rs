//! The parts of snapshots kept between changes, and when each is still good. Pure: the caller
//! passes what the parts are checked against and a function that builds a part when it is not.
//!
//! - A service's [`Fixed`] part holds while the plane's configuration stamp (bumped by every
//!   change of the mesh file, the CA or the tokens) and the config version are those it was
//!   built at.
//! - A called service's [`Upstream`] holds while, besides, the registry's version of that
//!   service's last endpoint change is the one it was built at, and none of its leases has
//!   expired since (`until`, the first of them).
//! - A service's [`Snapshot`] holds while it is made of exactly the parts (the same `Arc`s)
//!   it was made of.
//!
//! A part rebuilt with the content it had keeps its old `Arc`, so "nothing changed" reaches
//! every level as a pointer compare: a stream whose snapshot is the same `Arc` sends nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::{Fixed, Snapshot, Upstream};

/// What a fixed part is checked against: the plane's configuration stamp and config version.
pub type Stamp = (u64, u64);

#[derive(Debug)]
struct Called {
    stamp: Stamp,
    changed_at: u64,
    until: Option<Instant>,
    list: Arc<Upstream>,
}

/// The parts of the latest snapshot of each service.
#[derive(Debug, Default)]
pub struct Cache {
    /// The mesh file's text, one copy for every service's fixed part.
    text: Option<(Stamp, Arc<str>)>,
    fixed: BTreeMap<String, (Stamp, Arc<Fixed>)>,
    upstreams: BTreeMap<String, Called>,
    snapshots: BTreeMap<String, Arc<Snapshot>>,
}

impl Cache {
    /// The mesh file's text under `stamp`.
    pub fn text(&mut self, stamp: Stamp, read: impl FnOnce() -> Arc<str>) -> Arc<str> {
        match &self.text {
            Some((at, text)) if *at == stamp => text.clone(),
            _ => {
                let text = read();
                self.text = Some((stamp, text.clone()));
                text
            }
        }
    }

    /// `service`'s fixed part under `stamp`.
    pub fn fixed(
        &mut self,
        service: &str,
        stamp: Stamp,
        build: impl FnOnce() -> Fixed,
    ) -> Arc<Fixed> {
        let held = self.fixed.get(service);
        if let Some((at, part)) = held
            && *at == stamp
        {
            return part.clone();
        }
        let fresh = build();
        let part = match held {
            Some((_, old)) if **old == fresh => old.clone(),
            _ => Arc::new(fresh),
        };
        self.fixed.insert(service.to_owned(), (stamp, part.clone()));
        part
    }

    /// `to`'s endpoints under `stamp`, its registry change version `changed_at`, at `now`;
    /// `build` gives the list and until when it holds.
    pub fn upstream(
        &mut self,
        to: &str,
        stamp: Stamp,
        changed_at: u64,
        now: Instant,
        build: impl FnOnce() -> (Upstream, Option<Instant>),
    ) -> Arc<Upstream> {
        let held = self.upstreams.get(to);
        if let Some(c) = held
            && c.stamp == stamp
            && c.changed_at == changed_at
            && c.until.is_none_or(|u| now < u)
        {
            return c.list.clone();
        }
        let (fresh, until) = build();
        let list = match held {
            Some(c) if *c.list == fresh => c.list.clone(),
            _ => Arc::new(fresh),
        };
        let called = Called {
            stamp,
            changed_at,
            until,
            list: list.clone(),
        };
        self.upstreams.insert(to.to_owned(), called);
        list
    }

    /// `service`'s snapshot of these parts: the one held when it is made of them, else a new
    /// one at `version`.
    pub fn snapshot(
        &mut self,
        service: &str,
        version: u64,
        fixed: Arc<Fixed>,
        upstreams: Vec<Arc<Upstream>>,
    ) -> Arc<Snapshot> {
        if let Some(held) = self.snapshots.get(service)
            && Arc::ptr_eq(&held.fixed, &fixed)
            && held.upstreams.len() == upstreams.len()
            && held
                .upstreams
                .iter()
                .zip(&upstreams)
                .all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return held.clone();
        }
        let s = Arc::new(Snapshot {
            version,
            fixed,
            upstreams,
        });
        self.snapshots.insert(service.to_owned(), s.clone());
        s
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn fixed(mesh: &str) -> Fixed {
        Fixed::of_a(mesh, "PEM", Vec::new())
    }

    fn list(endpoints: &[&str]) -> Upstream {
        Upstream {
            service: "b".into(),
            identity: "spiffe://t/service/b".into(),
            endpoints: endpoints.iter().map(|e| (*e).to_owned()).collect(),
            labels: Default::default(),
        }
    }

    #[test]
    fn a_fixed_part_is_built_once_per_stamp_and_kept_when_it_comes_out_the_same() {
        let mut c = Cache::default();
        let mut builds = 0;
        let mut get = |c: &mut Cache, stamp: Stamp, mesh: &str| {
            c.fixed("a", stamp, || {
                builds += 1;
                fixed(mesh)
            })
        };
        let first = get(&mut c, (1, 1), "m1");
        let again = get(&mut c, (1, 1), "never built");
        assert!(Arc::ptr_eq(&first, &again));
        // A new stamp builds again; the same content keeps the same part.
        let same = get(&mut c, (2, 1), "m1");
        assert!(Arc::ptr_eq(&first, &same));
        let other = get(&mut c, (3, 2), "m2");
        assert_eq!(&*other.mesh_yaml, "m2");
        assert_eq!(builds, 3);
    }

    #[test]
    fn an_endpoint_list_holds_until_its_service_changes_or_a_lease_in_it_expires() {
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(10);
        let mut c = Cache::default();
        let mut builds = 0;
        let mut get = |c: &mut Cache, changed_at: u64, now: Instant, eps: &[&str]| {
            c.upstream("b", (1, 1), changed_at, now, || {
                builds += 1;
                (list(eps), Some(until))
            })
        };
        let first = get(&mut c, 5, t0, &["10.0.0.1:1"]);
        assert!(Arc::ptr_eq(&first, &get(&mut c, 5, t0, &[])));
        // The registry changed the service: built again, the same list kept as it was.
        assert!(Arc::ptr_eq(&first, &get(&mut c, 6, t0, &["10.0.0.1:1"])));
        // A lease expired: built again.
        let after = get(&mut c, 6, until, &[]);
        assert!(after.endpoints.is_empty());
        assert_eq!(builds, 3);
    }

    #[test]
    fn a_snapshot_of_the_same_parts_is_the_same_snapshot() {
        let mut c = Cache::default();
        let f = Arc::new(fixed("m"));
        let u = Arc::new(list(&["10.0.0.1:1"]));
        let first = c.snapshot("a", 7, f.clone(), vec![u.clone()]);
        let same = c.snapshot("a", 9, f.clone(), vec![u.clone()]);
        assert!(Arc::ptr_eq(&first, &same));
        assert_eq!(same.version, 7, "the version it was built at");
        let other = c.snapshot("a", 9, f, vec![Arc::new(list(&[]))]);
        assert_eq!(other.version, 9);
        assert_ne!(first, other);
    }
}
