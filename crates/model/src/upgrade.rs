//! Protocol switches and `CONNECT` on the HTTP path: a service's `upgrade` block resolved
//! ([`Upgrade`]), whether it accepts what a request asks ([`Upgrade::accepts`]), and the
//! connection policy an upgraded connection keeps ([`Upgrade::policy`]: opaque TCP's, so both
//! kinds of carried connection are bounded alike). `hopwise check` and the proxy read the same
//! rules here. Pure.

use std::time::Duration;

use serde::Serialize;

use crate::diag::Diagnostic;
use crate::policy::{Policy, Protocol};
use crate::raw::{OrNone, RawService};
use crate::read::Locations;
use crate::tcp::{DEFAULT_IDLE, Tcp, TcpPolicy};

/// `services.<name>.upgrade`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Upgrade {
    /// `Upgrade` protocol names the app accepts, lower case (`websocket`).
    pub protocols: Vec<String>,
    /// `CONNECT` reaches the app's address.
    pub connect: bool,
    /// An upgraded connection with no byte either way for this long is closed; `None`: never.
    pub idle_timeout: Option<Duration>,
}

/// What a request asks to switch to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked<'a> {
    /// `Upgrade: <protocol>` (with `Connection: upgrade`), the first protocol it offers.
    Protocol(&'a str),
    /// The `CONNECT` method.
    Connect,
}

impl Upgrade {
    /// The block of service `name`, checked against the rest of the service: a service outside
    /// the mesh has no proxy to carry it, a gRPC app speaks only HTTP/2, and a block that
    /// accepts nothing is a mistake.
    pub(crate) fn read(
        rs: &RawService,
        name: &str,
        locations: &Locations,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<Upgrade> {
        let raw = rs.upgrade.as_ref()?;
        let path = format!("services.{name}.upgrade");
        let mut problem = |message: &str| {
            diags.push(Diagnostic::new(&path, locations.of(&path), message));
        };
        if rs.external.is_some() {
            problem(
                "a service outside the mesh runs no proxy to carry an upgraded connection: remove `upgrade` or `external`",
            );
        }
        if rs.protocol == Some(Protocol::Grpc) {
            problem(
                "a gRPC app speaks HTTP/2, which has no `Upgrade`: remove `upgrade` or `protocol: grpc`",
            );
        }
        let connect = raw.connect.unwrap_or(false);
        if raw.protocols.is_empty() && !connect {
            problem(
                "accepts nothing: list `protocols` (such as `[websocket]`) or write `connect: true`",
            );
        }
        Some(Upgrade {
            protocols: raw.protocols.clone(),
            connect,
            idle_timeout: match raw.idle_timeout {
                None => Some(DEFAULT_IDLE),
                Some(OrNone::None) => None,
                Some(OrNone::Some(d)) => Some(d.0),
            },
        })
    }

    /// Whether the app accepts what the request asks.
    pub fn accepts(&self, asked: Asked<'_>) -> bool {
        match asked {
            Asked::Connect => self.connect,
            Asked::Protocol(p) => {
                let name = p.split('/').next().unwrap_or(p);
                self.protocols.iter().any(|ours| {
                    // `websocket` accepts `websocket/13`; `foo/2` only itself.
                    ours.eq_ignore_ascii_case(p) || ours.eq_ignore_ascii_case(name)
                })
            }
        }
    }

    /// What an upgraded connection to this service keeps of the caller's `policy`: opaque
    /// TCP's rules (connect timeout, this block's idle timeout, `limits.max_connections`, the
    /// next copy only after a connect failure), never a retry once the request was sent.
    pub fn policy(&self, policy: &Policy) -> TcpPolicy {
        let as_tcp = Tcp {
            ports: Vec::new(),
            idle_timeout: self.idle_timeout,
        };
        TcpPolicy::of(policy, &as_tcp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::RetryOn;
    use crate::{Mesh, Preset};

    fn mesh(service: &str) -> Result<Mesh, String> {
        let yaml = format!("services:\n  a: {{ calls: {{ chat: {{}} }} }}\n  chat:\n{service}");
        Mesh::from_yaml(&yaml).map_err(|d| d.render("mesh.yaml"))
    }

    #[test]
    fn a_block_is_read_with_its_defaults() {
        let m = mesh("    upgrade: { protocols: [WebSocket] }\n").unwrap();
        let u = m.services["chat"].upgrade.clone().unwrap();
        assert_eq!(u.protocols, ["websocket"]);
        assert!(!u.connect);
        assert_eq!(u.idle_timeout, Some(DEFAULT_IDLE));
        assert_eq!(m.services["a"].upgrade, None, "absent: nothing accepted");
        let m = mesh("    upgrade: { connect: true, idle_timeout: none }\n").unwrap();
        let u = m.services["chat"].upgrade.clone().unwrap();
        assert!(u.connect && u.protocols.is_empty() && u.idle_timeout.is_none());
    }

    #[test]
    fn what_is_accepted_is_what_the_block_lists() {
        let u = Upgrade {
            protocols: vec!["websocket".into(), "foo/2".into()],
            connect: false,
            idle_timeout: None,
        };
        assert!(u.accepts(Asked::Protocol("WebSocket")));
        assert!(u.accepts(Asked::Protocol("websocket/13")));
        assert!(u.accepts(Asked::Protocol("foo/2")));
        assert!(!u.accepts(Asked::Protocol("foo/3")));
        assert!(!u.accepts(Asked::Protocol("foo")));
        assert!(!u.accepts(Asked::Protocol("irc")));
        assert!(!u.accepts(Asked::Connect));
    }

    #[test]
    fn an_upgrade_keeps_tcps_policy_and_retries_only_connect_failures() {
        let u = Upgrade {
            protocols: vec!["websocket".into()],
            connect: true,
            idle_timeout: Some(Duration::from_secs(30)),
        };
        let mut p = Preset::Hopwise.policy();
        p.retry.count = 2;
        p.retry.on = [RetryOn::Any5xx].into_iter().collect();
        let tcp = u.policy(&p);
        assert_eq!(
            tcp.connect_tries, 1,
            "a 5xx is never retried: the request was sent"
        );
        assert_eq!(tcp.idle_timeout, Some(Duration::from_secs(30)));
        assert_eq!(tcp.connect_timeout, p.connect_timeout.get());
        p.retry.on = [RetryOn::ConnectFailure].into_iter().collect();
        assert_eq!(u.policy(&p).connect_tries, 3);
    }

    #[test]
    fn bad_blocks_are_named_with_their_line() {
        let text = mesh("    upgrade: { protocols: [websocket, 'a b', h2c], connect: 1, x: 2 }\n")
            .unwrap_err();
        assert!(text.contains("mesh.yaml:4:39:"), "{text}");
        for want in [
            "services.chat.upgrade.protocols[1]: `a b` is not a protocol name",
            "services.chat.upgrade.protocols[2]: `h2c` is never carried",
            "services.chat.upgrade.connect: expected `true` or `false`",
            "services.chat.upgrade.x: unknown field `x`",
        ] {
            assert!(text.contains(want), "{want} not in {text}");
        }
        let text = mesh("    upgrade: {}\n    protocol: grpc\n").unwrap_err();
        assert!(
            text.contains("services.chat.upgrade: accepts nothing"),
            "{text}"
        );
        assert!(text.contains("services.chat.upgrade: a gRPC app"), "{text}");
        let text = mesh("    upgrade: { connect: true }\n    external: { address: 127.0.0.1:1 }\n")
            .unwrap_err();
        assert!(
            text.contains("services.chat.upgrade: a service outside the mesh"),
            "{text}"
        );
    }
}
