//! Opaque TCP: a service's `tcp` block resolved ([`Tcp`]), where a tunnelled connection may go
//! on the callee's side ([`Tcp::target_port`]), and which policy a TCP call keeps
//! ([`TcpPolicy::of`]) and which fields of it cannot apply ([`INAPPLICABLE`]). `hopwise check`
//! and the proxy read the same rules here. Pure.

use std::time::Duration;

use serde::Serialize;

use crate::policy::{Policy, RetryOn};
use crate::raw::{OrNone, RawTcp};

/// What `tcp.idle_timeout` is when the file does not say (Envoy's `tcp_proxy` default).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(3600);

/// `services.<name>.tcp`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tcp {
    /// The app's opaque ports. Empty: the whole service is opaque TCP, on its app's address.
    pub ports: Vec<u16>,
    /// A connection with no byte either way for this long is closed; `None`: never.
    pub idle_timeout: Option<Duration>,
}

impl Tcp {
    pub fn of(raw: &RawTcp) -> Tcp {
        Tcp {
            ports: raw.ports.clone(),
            idle_timeout: match raw.idle_timeout {
                None => Some(DEFAULT_IDLE),
                Some(OrNone::None) => None,
                Some(OrNone::Some(d)) => Some(d.0),
            },
        }
    }

    /// The whole service is TCP (no port listed): every call to it is a TCP call.
    pub fn whole(&self) -> bool {
        self.ports.is_empty()
    }

    /// The port a caller names in its tunnel when it knows none (an explicit local port).
    pub fn default_port(&self) -> u16 {
        self.ports.first().copied().unwrap_or(0)
    }

    /// Where on the app's host a tunnel that names `port` goes, given the app's own port: a
    /// whole-TCP service's app whatever the port, else only a declared port. `None`: refused
    /// (a tunnel can never reach a port the mesh file did not open).
    pub fn target_port(&self, port: u16, app_port: u16) -> Option<u16> {
        if self.whole() {
            Some(app_port)
        } else {
            self.ports.contains(&port).then_some(port)
        }
    }
}

/// What a TCP call keeps of its policy: no request is seen, so only the connection's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TcpPolicy {
    /// To the callee's proxy, TLS and the tunnel's answer included.
    pub connect_timeout: Duration,
    /// The callee's `tcp.idle_timeout`.
    pub idle_timeout: Option<Duration>,
    /// Tunnels open at once from one proxy to the service (`limits.max_connections`).
    pub max_connections: u32,
    /// Copies tried to open one tunnel: 1, plus `retries.count` when `retries.on` lists
    /// `connect-failure`. Never once a byte was sent: a tunnel that opened is never repeated.
    pub connect_tries: u32,
}

impl TcpPolicy {
    pub fn of(policy: &Policy, callee: &Tcp) -> TcpPolicy {
        let retries = if policy.retry.on.contains(&RetryOn::ConnectFailure) {
            policy.retry.count
        } else {
            0
        };
        TcpPolicy {
            connect_timeout: policy.connect_timeout.get(),
            idle_timeout: callee.idle_timeout,
            max_connections: policy.limits.max_connections,
            connect_tries: retries.saturating_add(1),
        }
    }
}

/// Fields of a call (or its routes) that cannot apply to a TCP call, with why: `hopwise check`
/// names each one written on a call to a whole-TCP service.
pub const INAPPLICABLE: [(&str, &str); 12] = [
    (
        "timeout",
        "a TCP connection has no request to time; tcp.idle_timeout bounds it",
    ),
    ("per_try_timeout", "a TCP connection has no tries"),
    ("budget", "a TCP connection is never retried once it opened"),
    (
        "grpc_status_on_timeout",
        "no gRPC status crosses a TCP connection",
    ),
    (
        "propagate_deadline",
        "no deadline header crosses a TCP connection",
    ),
    (
        "limits.max_pending",
        "a TCP connection over the cap is refused, never queued",
    ),
    (
        "limits.max_requests",
        "a TCP connection carries no requests; limits.max_connections caps it",
    ),
    (
        "limits.max_retries",
        "a TCP connection is never retried once it opened",
    ),
    ("retries.status_codes", "a TCP connection has no status"),
    (
        "retries.backoff",
        "a connect failure is tried on the next copy at once",
    ),
    ("routes", "a TCP connection has no path to route by"),
    ("method", "a TCP connection has no method"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Preset;

    fn tcp(ports: &[u16]) -> Tcp {
        Tcp {
            ports: ports.to_vec(),
            idle_timeout: Some(DEFAULT_IDLE),
        }
    }

    #[test]
    fn a_whole_service_goes_to_its_app_and_a_listed_port_only_to_itself() {
        assert_eq!(tcp(&[]).target_port(5432, 6379), Some(6379));
        assert_eq!(tcp(&[]).default_port(), 0);
        let two = tcp(&[6379, 26379]);
        assert_eq!(two.target_port(26379, 8080), Some(26379));
        assert_eq!(two.target_port(22, 8080), None, "never a port not declared");
        assert_eq!(
            two.target_port(8080, 8080),
            None,
            "the HTTP port is not opaque"
        );
        assert_eq!(two.default_port(), 6379);
    }

    #[test]
    fn connect_failures_are_retried_only_when_listed() {
        let mut p = Preset::Hopwise.policy();
        p.retry.count = 2;
        p.retry.on = [RetryOn::ConnectFailure].into_iter().collect();
        assert_eq!(TcpPolicy::of(&p, &tcp(&[])).connect_tries, 3);
        p.retry.on = [RetryOn::Any5xx].into_iter().collect();
        assert_eq!(TcpPolicy::of(&p, &tcp(&[])).connect_tries, 1);
    }

    #[test]
    fn idle_timeout_defaults_to_an_hour_and_none_switches_it_off() {
        let raw = RawTcp::default();
        assert_eq!(Tcp::of(&raw).idle_timeout, Some(DEFAULT_IDLE));
        let off = RawTcp {
            idle_timeout: Some(OrNone::None),
            ..RawTcp::default()
        };
        assert_eq!(Tcp::of(&off).idle_timeout, None);
    }

    #[test]
    fn bad_tcp_fields_are_named_with_their_line() {
        let yaml = "services:\n  cache:\n    tcp: { ports: [6379, 0], idle_timeout: 0s, mode: x }\n  ext:\n    tcp: {}\n    external: { address: 127.0.0.1:1 }\n";
        let text = crate::Mesh::from_yaml(yaml)
            .unwrap_err()
            .render("mesh.yaml");
        assert!(text.contains("mesh.yaml:3:"), "{text}");
        assert!(
            text.contains("services.cache.tcp.ports[1]: port 0 is not a port"),
            "{text}"
        );
        assert!(
            text.contains("services.cache.tcp.idle_timeout: must be longer than zero"),
            "{text}"
        );
        assert!(
            text.contains("services.cache.tcp.mode: unknown field `mode`"),
            "{text}"
        );
        assert!(
            text.contains("services.ext.tcp: a service outside the mesh"),
            "{text}"
        );
    }

    #[test]
    fn a_whole_tcp_service_is_read_into_the_mesh() {
        let yaml =
            "services:\n  a: { calls: { cache: {} } }\n  cache: { tcp: { idle_timeout: none } }\n";
        let mesh = crate::Mesh::from_yaml(yaml).unwrap();
        let tcp = mesh.services["cache"].tcp.clone().unwrap();
        assert!(tcp.whole());
        assert_eq!(tcp.idle_timeout, None);
        assert_eq!(mesh.services["a"].tcp, None);
    }
}
