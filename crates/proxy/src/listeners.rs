//! What may reach a listener: which addresses it may bind (loopback only, for the listeners
//! that act with this service's identity or tell its topology, unless the command line allows
//! more), how many connections it holds at once (a cap shared by the workers; past it a new
//! connection is closed at once, before any TLS), and the process's open-file limit raised to
//! the hard limit at start so the caps, not the kernel, decide.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

// The command line's say over the listeners lives with the configuration it is part of.
use crate::config::ProxyConfig;
pub use crate::config::{DEFAULT_MAX_CONNECTIONS, ListenerPolicy};

/// Connections the admin listener holds at once (scrapers and probes; never many).
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// A listener that would bind an address others can reach, without the flag that allows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {listener} listener would listen on {addr}, which is not a loopback address: anyone who can reach it {risk}. Bind 127.0.0.1 or ::1{}", allow(*.flag)
)]
pub struct NotLoopback {
    pub listener: String,
    pub addr: SocketAddr,
    pub risk: &'static str,
    /// The flag that allows it; `None`: nothing does.
    pub flag: Option<&'static str>,
}

fn allow(flag: Option<&str>) -> String {
    flag.map(|f| format!(", or pass {f} to allow it"))
        .unwrap_or_default()
}

/// Refuses outbound (per-upstream and HTTP-proxy) and admin addresses that are not loopback,
/// unless `policy` allows them, and capture's always. The inbound listener is mutual TLS: any
/// address. Pure.
pub fn check_loopback(config: &ProxyConfig) -> Result<(), NotLoopback> {
    const RELAY: &str = "could call the mesh with this service's identity";
    let policy = &config.listeners;
    let outbound = config
        .outbound
        .map(|a| ("outbound (HTTP-proxy)".to_owned(), a))
        .into_iter()
        .chain(
            config
                .upstream_ports
                .iter()
                .map(|(name, a)| (format!("upstream {name}"), *a)),
        );
    if !policy.allow_remote_outbound {
        for (listener, addr) in outbound {
            if !addr.ip().is_loopback() {
                return Err(NotLoopback {
                    listener,
                    addr,
                    risk: RELAY,
                    flag: Some("--allow-remote-outbound"),
                });
            }
        }
    }
    // Capture's listener, always: `capture::original_dst` tells a connection TPROXY handed
    // over from one called directly by its own address being on loopback.
    if let Some(c) = &config.capture
        && !c.listen.ip().is_loopback()
    {
        return Err(NotLoopback {
            listener: "capture".to_owned(),
            addr: c.listen,
            risk: "could pass for a captured app (capture's rules send to 127.0.0.1)",
            flag: None,
        });
    }
    if let Some(addr) = config.admin
        && !policy.allow_remote_admin
        && !addr.ip().is_loopback()
    {
        return Err(NotLoopback {
            listener: "admin".to_owned(),
            addr,
            risk: "could read the configuration and the metrics",
            flag: Some("--allow-remote-admin"),
        });
    }
    Ok(())
}

/// The open connections of one listener, shared by its workers.
#[derive(Debug)]
pub struct ConnCap {
    open: AtomicUsize,
    max: usize,
}

/// One place under a [`ConnCap`], given back on drop.
#[derive(Debug)]
pub struct Place(Arc<ConnCap>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnCap {
    pub fn new(max: usize) -> Arc<ConnCap> {
        Arc::new(ConnCap {
            open: AtomicUsize::new(0),
            max,
        })
    }

    /// A place for one more connection, or `None` when the listener is full.
    pub fn take(self: &Arc<Self>) -> Option<Place> {
        let before = self.open.fetch_add(1, Ordering::AcqRel);
        let place = Place(self.clone());
        (before < self.max).then_some(place)
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// Raises the soft limit on open files to the hard limit; returns the limit now in force.
pub fn raise_open_files() -> Result<u64, nix::Error> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(getrlimit(Resource::RLIMIT_NOFILE)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_listener_refuses_until_a_place_comes_back() {
        let cap = ConnCap::new(2);
        let a = cap.take().unwrap();
        let _b = cap.take().unwrap();
        assert!(cap.take().is_none());
        assert_eq!(cap.open(), 2, "a refusal gives its place back");
        drop(a);
        assert!(cap.take().is_some());
    }
}
