//! Captured connections (`hopwise run`, docs/capture.md): an app in its own network namespace
//! whose outbound TCP the namespace's nftables rules redirect to this proxy's capture
//! listener. This module owns what happens between the accept and the HTTP path: the listener
//! bound inside that namespace ([`in_netns`]), each connection's original destination
//! (`SO_ORIGINAL_DST`, `IP6T_SO_ORIGINAL_DST`), the one mapping of it to a service or the egress
//! rule (`hopwise-model`'s [`Destinations`]), and the decision: a connection to a service is
//! handed back with the service, the port and where that port goes (the service's `ports`;
//! a port they do not list is refused here) (the worker gives it to
//! `opaque::captured::serve`, which tunnels a declared port and detects any other: HTTP takes
//! the HTTP-proxy port's path, `Host` picking cluster and route, with all of its policy);
//! egress is refused or passed through ([`egress`]). Every outcome is counted
//! (`hopwise_captured_connections_total{outcome}`). It never serves a connection to a service
//! itself and never imports the worker.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::path::Path;
use std::time::Duration;

use hopwise_model::capture::{Destination, Destinations, Egress};
use hopwise_model::ports::Target;
use nix::sys::socket::{getsockopt, sockopt};
use tokio::net::TcpStream;

use crate::config::ProxyConfig;
use crate::metrics::Metrics;

mod egress;

/// Runs `f` on a thread that has joined the network namespace at `netns` (`/run/netns/NAME`),
/// so the sockets it makes belong to that namespace (a socket keeps its namespace for life;
/// the proxy's other threads never leave the one it started in). `None`: this namespace.
pub fn in_netns<R: Send>(netns: Option<&Path>, f: impl FnOnce() -> R + Send) -> io::Result<R> {
    let Some(path) = netns else { return Ok(f()) };
    let file = std::fs::File::open(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("network namespace {}: {e}", path.display()),
        )
    })?;
    std::thread::scope(|s| {
        s.spawn(move || {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                io::Error::other(format!(
                    "cannot join {} (root is needed): {e}",
                    path.display()
                ))
            })?;
            Ok(f())
        })
        .join()
        .map_err(|_| io::Error::other("the thread joining the namespace panicked"))?
    })
}

/// Where the app meant to connect. A connection to a service address came by TPROXY: the
/// kernel gave the listener a socket addressed to where the app called, so its own address is
/// the answer (the listener is on loopback, and service addresses never are). Any other came
/// by the rules' redirect: the destination before it, from connection tracking. An error when
/// the connection was neither (someone called the listener directly).
pub fn original_dst(tcp: &TcpStream) -> io::Result<SocketAddr> {
    let local = tcp.local_addr()?;
    if !local.ip().is_loopback() {
        return Ok(local);
    }
    match local {
        SocketAddr::V4(_) => {
            let sin = getsockopt(tcp, sockopt::OriginalDst)?;
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Ok(SocketAddrV4::new(ip, u16::from_be(sin.sin_port)).into())
        }
        SocketAddr::V6(_) => {
            let sin6 = getsockopt(tcp, sockopt::Ip6tOriginalDst)?;
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Ok(SocketAddrV6::new(ip, u16::from_be(sin6.sin6_port), 0, sin6.sin6_scope_id).into())
        }
    }
}

/// What became of a captured connection: the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// To a service: on to detection, the HTTP path or a tunnel.
    Service,
    /// Not redirected by the rules, so no original destination: closed.
    NoDestination,
    /// Outside the mesh, `egress: refuse`: closed.
    EgressRefused,
    /// Outside the mesh, `egress: pass`: carried to the destination.
    EgressPassed,
    /// To a service on a port its `ports` do not list: closed, as a Service refuses a port it
    /// does not expose.
    PortRefused,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Service => "service",
            Outcome::NoDestination => "no-destination",
            Outcome::EgressRefused => "egress-refused",
            Outcome::EgressPassed => "egress-passed",
            Outcome::PortRefused => "port-refused",
        }
    }
}

/// A captured connection's service, the port the app called it on, and where on the callee's
/// side that port goes (the service's `ports`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapped<'c> {
    pub service: &'c str,
    pub port: u16,
    pub target: Target,
}

/// Decides a captured connection. `Some`: for a service, for the caller to serve; `None`:
/// handled here (refused, or passed through until it ended).
pub async fn admit<'c>(
    tcp: TcpStream,
    config: &'c ProxyConfig,
    metrics: &Metrics,
) -> Option<(TcpStream, Mapped<'c>)> {
    let Some(capture) = &config.capture else {
        return None;
    };
    let timeouts = config.timeouts;
    let outcome = |o: Outcome| metrics.captured(o.name());
    let Ok(dst) = original_dst(&tcp) else {
        outcome(Outcome::NoDestination);
        return None;
    };
    match decide(&capture.destinations, dst.ip()) {
        Route::Service(service) => {
            let port = dst.port();
            // A service this proxy does not call has no ports here: the HTTP path refuses it.
            let ports = config.clusters.get(service).map(|c| &c.ports);
            let Some(target) = ports.map_or(Some(Target::App), |p| p.target(port)) else {
                outcome(Outcome::PortRefused);
                return None;
            };
            outcome(Outcome::Service);
            Some((
                tcp,
                Mapped {
                    service,
                    port,
                    target,
                },
            ))
        }
        Route::Refuse => {
            outcome(Outcome::EgressRefused);
            None
        }
        Route::Pass => {
            outcome(Outcome::EgressPassed);
            let limits = egress::Limits {
                connect: EGRESS_CONNECT_TIMEOUT,
                idle: timeouts.idle,
            };
            if let Err(e) = egress::splice(tcp, dst, limits).await {
                tracing::debug!("egress to {dst}: {e}");
            }
            None
        }
    }
}

/// How long a passed-through connection waits for its destination to accept.
const EGRESS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'d> {
    Service(&'d str),
    Refuse,
    Pass,
}

/// The mapping's answer as this module acts on it. Pure.
fn decide(destinations: &Destinations, ip: IpAddr) -> Route<'_> {
    match destinations.get(ip) {
        Destination::Service(s) => Route::Service(s),
        Destination::Egress(Egress::Refuse) => Route::Refuse,
        Destination::Egress(Egress::Pass) => Route::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_go_on_and_the_rest_follows_the_egress_rule() {
        let yaml = |egress: &str| {
            format!("mesh: {{ capture: {{ egress: {egress} }} }}\nservices: {{ fee: {{}} }}")
        };
        let refuse = Destinations::of(&hopwise_model::Mesh::from_yaml(&yaml("refuse")).unwrap());
        let pass = Destinations::of(&hopwise_model::Mesh::from_yaml(&yaml("pass")).unwrap());
        let fee: IpAddr = "100.77.0.1".parse().unwrap();
        let away: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(decide(&refuse, fee), Route::Service("fee"));
        assert_eq!(decide(&refuse, away), Route::Refuse);
        assert_eq!(decide(&pass, away), Route::Pass);
        assert_eq!(decide(&pass, fee), Route::Service("fee"));
    }
}
