//! Discovery's typed input: what Kubernetes's EndpointSlices say of each Service, kept by its
//! namespace and name, and applied to the registry as a gate on the mesh service of that name
//! in that namespace ([`Registry::set_discovered`](crate::registry::Registry::set_discovered)).
//! Kept by Kubernetes's names rather than the mesh's, so that a mesh file applied later (a
//! service added, moved to another namespace, removed) is gated by what is already known.

use std::collections::BTreeSet;

use hopwise_model::kubernetes::Endpoints;

use super::Plane;

impl Plane {
    /// Records what Kubernetes lists for Service `name` in `namespace` (`None`: it lists no
    /// EndpointSlice of it now). Returns whether what a proxy is sent changed: only a Service
    /// that is a service of the mesh gates anything; a Service whose target ports are names
    /// is served again when the ports its slices resolve change.
    pub fn set_discovered(
        &mut self,
        namespace: &str,
        name: &str,
        endpoints: Option<Endpoints>,
    ) -> bool {
        let stamp = self.config_stamp;
        let key = (namespace.to_owned(), name.to_owned());
        let before = match &endpoints {
            Some(e) => self.discovered.insert(key, e.clone()),
            None => self.discovered.remove(&key),
        };
        // A Service that names a target port is served with the port its slices resolved.
        let ports = |e: Option<&Endpoints>| e.map(|e| e.ports.clone()).unwrap_or_default();
        if ports(before.as_ref()) != ports(endpoints.as_ref())
            && self.names_targets(namespace, name)
        {
            self.reoverlay();
        }
        let served = self.config_stamp != stamp;
        let Some(service) = self.mesh.service_on_kubernetes(namespace, name) else {
            return served;
        };
        let service = service.to_owned();
        let changed = self.registry.set_discovered(&service, endpoints);
        if changed {
            self.bump(None);
        }
        changed || served
    }

    /// Gates every service of the mesh in force by what Kubernetes lists of it, and ungates
    /// the services the mesh no longer has: after the mesh file changed.
    pub(super) fn regate(&mut self) {
        let gated: BTreeSet<String> = self.registry.discovered_services().cloned().collect();
        let mesh = self.mesh.clone();
        for name in mesh.services.keys().chain(gated.iter()) {
            let listed = mesh
                .services
                .get(name)
                .and_then(|s| s.kubernetes.as_ref())
                .and_then(|k| self.discovered.get(&(k.namespace.clone(), name.clone())))
                .cloned();
            self.registry.set_discovered(name, listed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, SocketAddr};
    use std::time::{Duration, Instant, SystemTime};

    use super::*;
    use crate::plane::prepare;
    use crate::plane::vouched::tests::{MESH, plane};

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 244, 0, last])
    }

    #[test]
    fn a_service_is_gated_by_its_namespaces_endpoint_slices_and_a_new_mesh_file_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut plane = plane(dir.path());
        let token = plane.token("api").unwrap().to_owned();
        let now = Instant::now();
        let mut leases = Vec::new();
        for last in [5, 6] {
            let addr = SocketAddr::new(ip(last), 4143).to_string();
            let (lease, _, _) = plane.register(&token, &addr, 10_000, now).unwrap();
            plane.set_health(&token, lease.0, true, now).unwrap();
            leases.push(lease);
        }
        let ready = |l: &[u8]| Endpoints {
            ready: l.iter().map(|&i| ip(i)).collect(),
            terminating: BTreeSet::new(),
            ports: Default::default(),
        };
        let endpoints = |p: &Plane| p.registry().endpoints("api", now + Duration::from_secs(1));
        assert_eq!(endpoints(&plane).len(), 2);

        // Another namespace's Service of the same name is not this mesh's `api`.
        let v = plane.version();
        assert!(!plane.set_discovered("other", "api", Some(ready(&[]))));
        assert_eq!(plane.version(), v);
        assert_eq!(endpoints(&plane).len(), 2);
        // Its own: only .5 is ready.
        assert!(plane.set_discovered("shop", "api", Some(ready(&[5]))));
        assert!(plane.version() > v);
        assert_eq!(endpoints(&plane), [SocketAddr::new(ip(5), 4143)]);

        // A mesh file that moves `api` to namespace `other` takes the list Kubernetes gave
        // for `other/api` (no address ready), and one that moves it back, `shop`'s again.
        let moved = MESH.replace("  api: {}", "  api: { kubernetes: { namespace: other } }");
        plane
            .commit(prepare(&moved, "v2.yaml"), SystemTime::now())
            .unwrap();
        assert!(endpoints(&plane).is_empty());
        plane
            .commit(prepare(MESH, "v3.yaml"), SystemTime::now())
            .unwrap();
        assert_eq!(endpoints(&plane), [SocketAddr::new(ip(5), 4143)]);
        // Kubernetes forgets the Service: leases alone decide again.
        assert!(plane.set_discovered("shop", "api", None));
        assert_eq!(endpoints(&plane).len(), 2);
    }
}
