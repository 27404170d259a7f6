//! A Kubernetes Service as the mesh serves it (the control plane's typed input from the
//! Services' watch): its ClusterIP, the address captured apps reach it at, and its ports, each a
//! `port` callers dial and a `targetPort` — a number, or the name of a port its pods declare,
//! which the EndpointSlice controller resolves into the slices ([`super::Endpoints::ports`]).
//! [`Front::ports_with`] makes them the mesh file's `ports`. Pure.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

/// A Service's `targetPort`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PortTarget {
    Number(u16),
    /// A port its pods name (`containerPort` with `name: http`).
    Name(String),
}

/// One of a Service's TCP ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServicePort {
    /// Its `name` (empty for a Service's one unnamed port): what its slices' ports are named.
    pub name: String,
    pub port: u16,
    pub target: PortTarget,
}

/// What a Service says of itself to the mesh.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Front {
    /// `None` for a headless Service (`clusterIP: None`).
    pub cluster_ip: Option<IpAddr>,
    /// Its TCP ports (UDP and SCTP are not the mesh's).
    pub ports: Vec<ServicePort>,
}

impl Front {
    /// The mesh file's `ports` — (port, target port) — given the ports its EndpointSlices list
    /// (`slices`: by the Service port's name, the number each resolved to). A port whose target
    /// is a name no slice resolved is left out, so a call on it is refused until one does,
    /// never sent to a port the pods did not name.
    pub fn ports_with(&self, slices: Option<&BTreeMap<String, u16>>) -> Vec<(u16, u16)> {
        self.ports
            .iter()
            .filter_map(|p| {
                let target = match &p.target {
                    PortTarget::Number(n) => *n,
                    PortTarget::Name(_) => *slices?.get(&p.name)?,
                };
                Some((p.port, target))
            })
            .collect()
    }

    /// Whether a target is a name, so the slices' ports decide it.
    pub fn names_targets(&self) -> bool {
        (self.ports.iter()).any(|p| matches!(p.target, PortTarget::Name(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_go_as_they_are_and_names_as_the_slices_resolved_them() {
        let front = Front {
            cluster_ip: None,
            ports: vec![
                ServicePort {
                    name: "http".into(),
                    port: 80,
                    target: PortTarget::Name("web".into()),
                },
                ServicePort {
                    name: "admin".into(),
                    port: 9090,
                    target: PortTarget::Number(9901),
                },
            ],
        };
        assert!(front.names_targets());
        assert_eq!(
            front.ports_with(None),
            [(9090, 9901)],
            "unresolved: left out"
        );
        // Slices' ports carry the Service port's name, not the pod's.
        let slices = BTreeMap::from([("http".to_owned(), 8080), ("admin".to_owned(), 9901)]);
        assert_eq!(front.ports_with(Some(&slices)), [(80, 8080), (9090, 9901)]);
        let other = BTreeMap::from([("web".to_owned(), 8080)]);
        assert_eq!(front.ports_with(Some(&other)), [(9090, 9901)]);
    }
}
