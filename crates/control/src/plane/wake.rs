//! Which subscribers a change concerns. A snapshot of service S carries the endpoints of S's
//! upstreams — the list [`upstreams`] gives, which [`Plane::snapshot`] builds its snapshot
//! from, so the two cannot drift — and otherwise only what comes from the mesh file and the CA.
//! So a change to the copies of X concerns the subscribers of the services whose upstreams hold
//! X ([`concerned`]; not X's own, whose snapshot holds nothing of X's copies), and a change of
//! the mesh file, the trust bundle or the CA generation concerns every subscriber. The plane
//! asks [`Callers`], an index of each service's callers built once per mesh file, so a change
//! costs the callers it names, not a scan of every service's calls.
//!
//! [`Plane::snapshot`]: super::Plane::snapshot

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hopwise_model::{Mesh, Service};

/// Whose snapshot streams to wake after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// The mesh file, the trust bundle or the CA generation changed: every stream.
    Everyone,
    /// The streams of these services (subscribers are named by their service); none: nobody.
    Services(BTreeSet<String>),
}

impl Wake {
    /// Whether the streams of `service` are woken.
    pub fn wakes(&self, service: &str) -> bool {
        match self {
            Wake::Everyone => true,
            Wake::Services(s) => s.contains(service),
        }
    }
}

/// The services whose endpoints a snapshot of `service` carries: each one it calls that runs
/// proxies (not `external`), once, in the order of its calls.
pub fn upstreams<'m>(mesh: &'m Mesh, service: &'m Service) -> Vec<&'m str> {
    let mut out: Vec<&str> = Vec::new();
    for call in &service.calls {
        let internal = mesh
            .services
            .get(&call.to)
            .is_some_and(|c| c.external.is_none());
        if internal && !out.contains(&call.to.as_str()) {
            out.push(&call.to);
        }
    }
    out
}

/// The services whose snapshots change when the endpoint sets of `copies_of` change: those
/// that run proxies and have one of them among their [`upstreams`].
pub fn concerned(mesh: &Mesh, copies_of: &BTreeSet<String>) -> BTreeSet<String> {
    if copies_of.is_empty() {
        return BTreeSet::new();
    }
    mesh.services
        .values()
        .filter(|s| s.external.is_none())
        .filter(|s| upstreams(mesh, s).iter().any(|u| copies_of.contains(*u)))
        .map(|s| s.name.clone())
        .collect()
}

/// Who carries each service's endpoints in their snapshots (its callers that run proxies), for
/// one mesh file: [`concerned`] as a lookup.
#[derive(Debug, Default)]
pub struct Callers {
    mesh: Option<Arc<Mesh>>,
    of: BTreeMap<String, BTreeSet<String>>,
}

impl Callers {
    pub fn of(mesh: &Arc<Mesh>) -> Callers {
        let mut of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for s in mesh.services.values().filter(|s| s.external.is_none()) {
            for to in upstreams(mesh, s) {
                of.entry(to.to_owned()).or_default().insert(s.name.clone());
            }
        }
        Callers {
            mesh: Some(mesh.clone()),
            of,
        }
    }

    /// Whether this index is of `mesh`.
    pub fn is_of(&self, mesh: &Arc<Mesh>) -> bool {
        self.mesh.as_ref().is_some_and(|m| Arc::ptr_eq(m, mesh))
    }

    /// [`concerned`], looked up.
    pub fn concerned(&self, copies_of: &BTreeSet<String>) -> BTreeSet<String> {
        copies_of
            .iter()
            .filter_map(|c| self.of.get(c))
            .flatten()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `b` is called by `a` and `c`; `c` also calls `d` and the external `x`; `e` calls nobody.
    const MESH: &str = "mesh: { name: m, trust_domain: m.local }
services:
  a: { entry: { timeout: 3s }, calls: { b: { timeout: 1s } } }
  c: { entry: { timeout: 3s }, calls: { b: { timeout: 1s }, d: { timeout: 1s }, x: { timeout: 1s } } }
  b: {}
  d: {}
  e: { entry: { timeout: 1s } }
  x: { external: { address: 127.0.0.1:9 } }
";

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_change_to_a_service_s_copies_concerns_its_callers_only() {
        let mesh = Mesh::from_yaml(MESH).unwrap();
        assert_eq!(concerned(&mesh, &set(&["b"])), set(&["a", "c"]));
        assert_eq!(concerned(&mesh, &set(&["d"])), set(&["c"]));
        assert_eq!(concerned(&mesh, &set(&["b", "d"])), set(&["a", "c"]));
        // Nobody calls `a` or `e`: their own subscribers hold nothing of their copies.
        assert_eq!(concerned(&mesh, &set(&["a", "e"])), set(&[]));
        assert_eq!(concerned(&mesh, &set(&[])), set(&[]));
        // A name the mesh does not know (a copy of a service since removed) concerns nobody.
        assert_eq!(concerned(&mesh, &set(&["gone"])), set(&[]));
    }

    #[test]
    fn the_index_of_callers_answers_as_the_scan() {
        let mesh = Arc::new(Mesh::from_yaml(MESH).unwrap());
        let callers = Callers::of(&mesh);
        assert!(callers.is_of(&mesh));
        assert!(!callers.is_of(&Arc::new(Mesh::from_yaml(MESH).unwrap())));
        for names in [
            &["b"][..],
            &["d"],
            &["b", "d"],
            &["a", "e"],
            &[],
            &["gone"],
            &["x"],
        ] {
            assert_eq!(
                callers.concerned(&set(names)),
                concerned(&mesh, &set(names))
            );
        }
    }

    #[test]
    fn upstreams_are_the_called_services_that_run_proxies() {
        let mesh = Mesh::from_yaml(MESH).unwrap();
        let of = |s: &str| upstreams(&mesh, &mesh.services[s]);
        assert_eq!(of("c"), ["b", "d"]);
        assert_eq!(of("a"), ["b"]);
        assert!(of("b").is_empty());
    }

    #[test]
    fn everyone_wakes_every_service_and_a_set_only_its_own() {
        assert!(Wake::Everyone.wakes("a"));
        let w = Wake::Services(set(&["a"]));
        assert!(w.wakes("a"));
        assert!(!w.wakes("b"));
    }
}
