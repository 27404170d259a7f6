//! The ports a service is called on (`services.<name>.ports`, read in `raw/ports.rs`): where a
//! captured connection to the service's address goes by the port the app dialed — as a
//! Kubernetes Service maps `port` to `targetPort` — and which app ports a callee's proxy lets a
//! caller's proxy name. The caller's proxy and the callee's read the same list. Pure.

use serde::Serialize;

use crate::raw::RawServicePort;

/// Where a call on a dialed port goes on the callee's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The app's own port (no port listed: every port reaches the app, as before ports).
    App,
    /// This port of the app's host.
    Port(u16),
}

/// A service's ports, resolved: (dialed port, app port), sorted by the dialed port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Ports(Vec<(u16, u16)>);

impl Ports {
    pub fn of(raw: &[RawServicePort]) -> Ports {
        let mut list: Vec<(u16, u16)> = raw
            .iter()
            .map(|p| (p.port, p.target_port.unwrap_or(p.port)))
            .collect();
        list.sort_unstable();
        list.dedup_by_key(|(port, _)| *port);
        Ports(list)
    }

    /// No port is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// (dialed port, app port), by dialed port.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u16)> + '_ {
        self.0.iter().copied()
    }

    /// Where a call dialed on `port` goes. `None`: refused — ports are listed and this is not
    /// one of them (as a Service refuses a port it does not expose).
    pub fn target(&self, port: u16) -> Option<Target> {
        if self.0.is_empty() {
            return Some(Target::App);
        }
        let i = self.0.binary_search_by_key(&port, |(p, _)| *p).ok()?;
        Some(Target::Port(self.0[i].1))
    }

    /// Whether a callee whose app listens on `app_port` lets a caller's proxy send a request
    /// to `target`: its app's own port, or a port its service lists as a target. Never any
    /// other port of the host (a caller could otherwise reach what the file never opened).
    pub fn accepts(&self, target: u16, app_port: u16) -> bool {
        target == app_port || self.0.iter().any(|(_, t)| *t == target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(list: &[(u16, Option<u16>)]) -> Ports {
        let raw: Vec<RawServicePort> = list
            .iter()
            .map(|&(port, target_port)| RawServicePort { port, target_port })
            .collect();
        Ports::of(&raw)
    }

    #[test]
    fn no_port_listed_sends_every_port_to_the_app() {
        let none = ports(&[]);
        assert_eq!(none.target(80), Some(Target::App));
        assert_eq!(none.target(9090), Some(Target::App));
        assert!(none.accepts(8080, 8080));
        assert!(
            !none.accepts(22, 8080),
            "never a port the file did not open"
        );
    }

    #[test]
    fn a_listed_port_reaches_its_target_and_another_is_refused() {
        let two = ports(&[(9090, None), (80, Some(8080))]);
        assert_eq!(two.target(80), Some(Target::Port(8080)));
        assert_eq!(two.target(9090), Some(Target::Port(9090)));
        assert_eq!(two.target(8080), None, "the target is not a dialed port");
        assert_eq!(two.target(443), None);
        assert!(two.accepts(8080, 8080));
        assert!(two.accepts(9090, 8080));
        assert!(
            !two.accepts(80, 8080),
            "80 is dialed, never an app port here"
        );
        assert!(!two.accepts(22, 8080));
    }

    #[test]
    fn bad_ports_are_named_with_their_line() {
        let yaml = "services:\n  api:\n    ports:\n      - { port: 80, target_port: 8080 }\n      - { port: 0 }\n      - { target_port: 9 }\n      - { port: 80 }\n      - { port: 81, name: x }\n  ext:\n    ports: [{ port: 1 }]\n    external: { address: 127.0.0.1:1 }\n  gw:\n    ports: [{ port: 1 }]\n    gateway: { http: { port: 8000 } }\n";
        let text = crate::Mesh::from_yaml(yaml)
            .unwrap_err()
            .render("mesh.yaml");
        for expected in [
            "mesh.yaml:5:",
            "services.api.ports[1].port: port 0 is not a port",
            "services.api.ports[2]: a service port needs `port`",
            "mesh.yaml:7:",
            "services.api.ports[3].port: port 80 is listed twice",
            "services.api.ports[4].name: unknown field `name`",
            "services.ext.ports: a service outside the mesh",
            "services.gw.ports: a gateway runs no app of its own",
        ] {
            assert!(text.contains(expected), "{expected}\n{text}");
        }
    }

    #[test]
    fn ports_are_read_into_the_mesh() {
        let yaml = "services:\n  a: { calls: { api: {} } }\n  api: { ports: [{ port: 80, target_port: 8080 }, { port: 9090 }] }\n";
        let mesh = crate::Mesh::from_yaml(yaml).unwrap();
        let api = &mesh.services["api"].ports;
        assert_eq!(api.iter().collect::<Vec<_>>(), [(80, 8080), (9090, 9090)]);
        assert!(mesh.services["a"].ports.is_empty());
    }
}
