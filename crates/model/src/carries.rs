//! What travels through a service's app, resolved from `services.<name>.carries`: whether the
//! deadline of the request it serves reaches the calls it makes, and whether its proxy can tie
//! those calls to that request by trace context (and so cap and end them). `hopwise check` asks
//! at every app on a chain; nothing is assumed by default. The "retries exhausted" mark on a
//! failure it passes up needs nothing of the app: its proxy links the two by time when no trace
//! context comes back (the proxy's `link`).
//!
//! A relay copy (its `app` is one of its own proxy's upstream ports, as in `hopwise demo
//! retry-chain`) has no app in between: its proxy's inbound side feeds its outbound side, so
//! every header travels.

use serde::Serialize;

use crate::policy::Protocol;
use crate::raw::Carry;
use crate::topology::Copy;

/// What one service's app carries on, as declared (or every copy a relay).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Carries {
    pub trace_context: bool,
    pub hopwise_headers: bool,
    pub grpc_deadline: bool,
    /// Every copy is a relay: nothing stands between the proxy's two sides.
    pub relay: bool,
}

impl Carries {
    /// The declared list; `relay` when every copy of the service is a relay.
    pub fn resolve(declared: &[Carry], copies: &[Copy]) -> Carries {
        Carries {
            trace_context: declared.contains(&Carry::TraceContext),
            hopwise_headers: declared.contains(&Carry::HopwiseHeaders),
            grpc_deadline: declared.contains(&Carry::GrpcDeadline),
            relay: !copies.is_empty() && copies.iter().all(is_relay),
        }
    }

    /// The proxy can tie the app's calls to the request it serves (the trace context comes back
    /// on them): it marks, caps deadlines and cancels itself.
    pub fn linked(self) -> bool {
        self.trace_context
    }

    /// The deadline of a request the app serves (over `serves`) reaches the proxy of a call it
    /// makes over `call`: linked, the proxy caps the call itself; else the app must copy the
    /// header the deadline arrived in (`x-hopwise-timeout-ms` over HTTP, `grpc-timeout` over
    /// gRPC, which a proxy reads only on a gRPC call).
    pub fn passes_deadline(self, serves: Protocol, call: Protocol) -> bool {
        self.relay
            || self.linked()
            || (self.hopwise_headers && serves == Protocol::Http)
            || (self.grpc_deadline && serves == Protocol::Grpc && call == Protocol::Grpc)
    }

    /// The words as the file writes them (a relay says so).
    pub fn words(self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Carry::ALL
            .iter()
            .filter(|(_, c)| match c {
                Carry::TraceContext => self.trace_context,
                Carry::HopwiseHeaders => self.hopwise_headers,
                Carry::GrpcDeadline => self.grpc_deadline,
            })
            .map(|(n, _)| *n)
            .collect();
        if self.relay {
            out.push("relay");
        }
        out
    }
}

/// A relay copy: its app address is one of its own proxy's upstream ports.
pub fn is_relay(copy: &Copy) -> bool {
    copy.app
        .is_some_and(|a| copy.upstreams.values().any(|u| *u == a) || copy.outbound == Some(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Protocol::{Grpc, Http};

    fn of(list: &[Carry]) -> Carries {
        Carries::resolve(list, &[])
    }

    #[test]
    fn nothing_carries_nothing() {
        let c = of(&[]);
        for (s, call) in [(Http, Http), (Http, Grpc), (Grpc, Http), (Grpc, Grpc)] {
            assert!(!c.passes_deadline(s, call));
        }
    }

    #[test]
    fn trace_context_carries_everything_through_the_link() {
        let c = of(&[Carry::TraceContext]);
        assert!(c.passes_deadline(Http, Grpc) && c.passes_deadline(Grpc, Http));
    }

    #[test]
    fn headers_carry_only_the_deadline_they_arrived_in() {
        let h = of(&[Carry::HopwiseHeaders]);
        assert!(h.passes_deadline(Http, Http) && h.passes_deadline(Http, Grpc));
        assert!(!h.passes_deadline(Grpc, Grpc));
        let g = of(&[Carry::GrpcDeadline]);
        assert!(g.passes_deadline(Grpc, Grpc));
        assert!(!g.passes_deadline(Grpc, Http) && !g.passes_deadline(Http, Http));
    }

    #[test]
    fn the_field_is_read_with_line_precise_errors() {
        let m =
            crate::Mesh::from_yaml("services:\n  a: { carries: [trace-context, grpc-deadline] }\n")
                .unwrap();
        assert!(m.services["a"].carries.linked() && m.services["a"].carries.grpc_deadline);
        let bad = "services:\n  a:\n    carries:\n      - trace-context\n      - trace-context\n      - otel\n";
        let d = crate::Mesh::from_yaml(bad).unwrap_err().render("mesh.yaml");
        assert!(
            d.contains("mesh.yaml:5:9: services.a.carries[1]: listed twice"),
            "{d}"
        );
        assert!(d.contains("mesh.yaml:6:9: services.a.carries[2]:"), "{d}");
        assert!(d.contains("`trace-context`"), "{d}");
    }

    #[test]
    fn a_relay_carries_everything() {
        let a = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
        let relay = Copy {
            app: Some(a(2)),
            upstreams: [("next".to_owned(), a(2))].into_iter().collect(),
            ..Copy::default()
        };
        let app = Copy {
            app: Some(a(3)),
            ..relay.clone()
        };
        assert!(Carries::resolve(&[], std::slice::from_ref(&relay)).relay);
        assert!(!Carries::resolve(&[], &[relay, app]).relay);
        assert_eq!(
            of(&[Carry::GrpcDeadline, Carry::TraceContext]).words(),
            ["trace-context", "grpc-deadline"]
        );
    }
}
