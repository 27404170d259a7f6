//! The configuration in force, and changing it while requests run.
//!
//! Everything a request reads that comes from the mesh file — clusters with their routes and
//! policies, who may call, each worker's pools and metrics handles — hangs off one [`Live`],
//! which [`crate::state::State`] holds behind an atomic pointer. A request loads it once (one
//! atomic load and a reference count, no lock, no allocation) and keeps it to its end, so a
//! request in flight finishes under the configuration it started with while new requests see the
//! new one.
//!
//! A new mesh file is applied live only when nothing the running process fixed at start would
//! have to change ([`next_config`]): its listeners, its per-upstream local ports, its app, its
//! certificates, its identity. Otherwise it is refused whole, with the reasons, and the
//! configuration in force stays as it was. What each upstream has learnt (copies with their
//! load, latency and ejections, the retry budget, requests in flight for the caps) is carried
//! into the new configuration for each part whose parameters did not change
//! ([`ClusterShared::next`]).

use std::sync::Arc;

use indexmap::IndexMap;

use crate::cluster::ClusterShared;
use crate::config::ProxyConfig;
use crate::inbound::Inbound;
use crate::inbound::limits::InboundGauges;
use crate::inbound::rate::RateLimiter;
use crate::link::Links;
use crate::metrics::Metrics;
use crate::outbound::Outbound;
use crate::tls::{CertStore, TlsError};

/// One configuration in force: the configuration, what the workers share about each upstream,
/// and each worker's forwarding state.
#[derive(Debug)]
pub struct Live {
    pub config: Arc<ProxyConfig>,
    pub clusters: IndexMap<String, Arc<ClusterShared>>,
    /// The caps on requests to the local app, shared by the workers.
    pub inbound: Arc<InboundGauges>,
    /// The rate limits on requests to the local app, shared by the workers (none set: none).
    pub rates: Option<Arc<RateLimiter>>,
    /// Inbound requests linked to the app's calls through trace context (kept across changes).
    pub links: Arc<Links>,
    workers: Vec<Handlers>,
}

/// One worker's forwarding state under one configuration: its own pools, shared metrics.
#[derive(Debug)]
pub struct Handlers {
    pub outbound: Outbound,
    pub inbound: Inbound,
}

impl Live {
    /// Builds every worker's state for `config`. With `previous` (the configuration it
    /// replaces), upstreams that stay keep what they learnt and their pooled connections.
    pub fn build(
        config: ProxyConfig,
        certs: Option<&Arc<CertStore>>,
        metrics: &Arc<Metrics>,
        workers: usize,
        ports: &[String],
        previous: Option<&Live>,
    ) -> Result<Live, TlsError> {
        let config = Arc::new(config);
        let clusters: IndexMap<String, Arc<ClusterShared>> = config
            .clusters
            .iter()
            .map(|(name, c)| {
                let old = previous.and_then(|p| p.clusters.get(name));
                let subsets = c.subsets_named(config.clusters.values());
                (
                    name.clone(),
                    ClusterShared::next(c, old.map(Arc::as_ref), &subsets),
                )
            })
            .collect();
        let inbound = InboundGauges::next(config.inbound_limits, previous.map(|p| &p.inbound));
        let rates = RateLimiter::next(&config, previous.and_then(|p| p.rates.as_ref()));
        let links = previous.map_or_else(
            || {
                let counters = metrics.carried.counters(&config.service);
                Links::with_counters(config.inbound_limits.max_requests as usize, counters)
            },
            |p| p.links.clone(),
        );
        let mut handlers = Vec::with_capacity(workers);
        for w in 0..workers.max(1) {
            let old = previous.and_then(|p| p.workers.get(w));
            handlers.push(Handlers {
                outbound: Outbound::new(
                    config.clone(),
                    certs,
                    metrics.clone(),
                    &clusters,
                    ports,
                    old.map(|h| &h.outbound),
                )?
                .linked(links.clone()),
                inbound: Inbound::new(
                    config.clone(),
                    metrics.clone(),
                    inbound.clone(),
                    old.map(|h| &h.inbound),
                )
                .linked(links.clone())
                .rate_limited(rates.clone()),
            });
        }
        Ok(Live {
            config,
            clusters,
            inbound,
            rates,
            links,
            workers: handlers,
        })
    }

    /// Worker `w`'s state (workers are numbered from 0 below the count it was built with).
    pub fn worker(&self, w: usize) -> &Handlers {
        &self.workers[w % self.workers.len()]
    }
}

/// Why a new mesh file cannot be applied to a running proxy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("needs a restart: {}", .0.join("; "))]
pub struct NeedsRestart(pub Vec<String>);

fn addr(a: Option<std::net::SocketAddr>) -> String {
    a.map_or_else(|| "none".to_owned(), |a| a.to_string())
}

/// The configuration to put in force when the mesh file changes, or why it needs a restart.
///
/// `old` and `new` are what the old and the new file give this copy (as at start, before the
/// command line's overrides); `running` is the configuration in force. What the running process
/// fixed at start — listeners, per-upstream local ports, the app's address, certificates,
/// identity, workers — must not change in the file; it is taken from `running`, so overrides
/// from the command line stay. Everything else (clusters, routes, policies, authorization,
/// inbound route names) comes from `new`. Pure.
pub fn next_config(
    running: &ProxyConfig,
    old: &ProxyConfig,
    new: ProxyConfig,
) -> Result<ProxyConfig, NeedsRestart> {
    let mut why = Vec::new();
    if old.identity != new.identity {
        why.push(format!(
            "this proxy's identity changed ({} → {}): a new trust domain or mesh name",
            old.identity, new.identity
        ));
    }
    for (what, a, b) in [
        ("inbound listener", old.inbound, new.inbound),
        ("outbound (HTTP-proxy) listener", old.outbound, new.outbound),
        ("admin listener", old.admin, new.admin),
        ("app's address", old.app, new.app),
    ] {
        if a != b {
            why.push(format!("the {what} changed ({} → {})", addr(a), addr(b)));
        }
    }
    for (name, a) in &old.upstream_ports {
        match new.upstream_ports.get(name) {
            None => why.push(format!("the local port for {name} ({a}) was removed")),
            Some(b) if b != a => {
                why.push(format!("the local port for {name} changed ({a} → {b})"));
            }
            Some(_) => {}
        }
    }
    for (name, b) in &new.upstream_ports {
        if !old.upstream_ports.contains_key(name) {
            why.push(format!("a new local port for {name} ({b})"));
        }
    }
    for name in running.upstream_ports.keys() {
        // A local port's kind (HTTP, or opaque TCP for a whole-TCP upstream) is fixed at start.
        let tcp = |c: &ProxyConfig| c.clusters.get(name).is_some_and(|c| c.whole_tcp());
        if tcp(running) != tcp(&new) && new.clusters.contains_key(name) {
            why.push(format!(
                "the local port for {name} would change between HTTP and opaque TCP"
            ));
        }
        if !new.clusters.contains_key(name) {
            why.push(format!(
                "this proxy listens on a local port for {name}, which it would no longer call"
            ));
        }
    }
    if old.certs != new.certs {
        why.push("the certificates' directory changed".to_owned());
    }
    // Its listeners, certificates and limits are bound and loaded at start; its routes and
    // calls change live, as any caller's.
    if old.gateway != new.gateway {
        why.push("the gateway's block changed (listeners, certificates or limits)".to_owned());
    }
    // The span exporter is started with the proxy; the sampling ratio changes live.
    let export = |c: &ProxyConfig| {
        c.tracing
            .as_ref()
            .map(|t| (t.collector.clone(), t.protocol, t.queue))
    };
    if export(old) != export(&new) {
        why.push("mesh.tracing's collector, protocol or queue changed".to_owned());
    }
    // The access log's writer too; its format, routes and query change live.
    let writer = |c: &ProxyConfig| {
        c.access_log
            .as_ref()
            .map(|l| (l.file.clone(), l.max_bytes, l.queue))
    };
    if writer(old) != writer(&new) {
        why.push(
            "access_log's file, max_bytes or queue changed (or it was switched on or off)"
                .to_owned(),
        );
    }
    if !why.is_empty() {
        why.dedup();
        return Err(NeedsRestart(why));
    }
    Ok(ProxyConfig {
        copy: running.copy,
        app: running.app,
        inbound: running.inbound,
        outbound: running.outbound,
        admin: running.admin,
        upstream_ports: running.upstream_ports.clone(),
        capture: running.capture.clone(),
        certs: running.certs.clone(),
        workers: running.workers,
        timeouts: running.timeouts,
        plaintext: running.plaintext,
        listeners: running.listeners,
        app_probes: running.app_probes.clone(),
        ..new
    })
}

#[cfg(test)]
mod tests;
