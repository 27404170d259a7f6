//! What a proxy holds per upstream, and how it carries it across a live policy change.
//!
//! [`ClusterShared`] is what all workers share about one upstream (its copies with their load
//! and ejections, the retry budget, the caps); each part is kept across a new configuration
//! whose parameters for it are the same (`next`, `kept_from`). [`ClusterState`] is one
//! worker's: the cluster's configuration, its HTTP/1.1 and HTTP/2 pools (connectors and TLS
//! built here, once, not per request) and its routes' metrics handles. No request runs here.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hopwise_model::labels::Labels;
use hopwise_model::{Balancer, Budget, Limits, Outlier};
use http::header::HeaderValue;
use http::uri::Authority;
use rustls_pki_types::ServerName;

use crate::balance::Endpoints;
use crate::budget::RetryBudget;
use crate::config::{Cluster, Target};
use crate::limits::{Connections, Gauges};
use crate::metrics::{Direction, Metrics, RouteMetrics};
use crate::tcp::Tunnels;
use crate::tls::{CertStore, TUNNEL_ALPN, TlsError, external_client_config};
use crate::upstream::{self, Connector, Dest, H1Pool, Pool};

/// What all workers share about one upstream: its copies (load, ejections), the retry budget,
/// the caps. Each part is kept across a live policy change whose parameters for it are the same.
#[derive(Debug)]
pub struct ClusterShared {
    pub endpoints: Arc<Endpoints>,
    pub budget: Option<Arc<RetryBudget>>,
    pub gauges: Arc<Gauges>,
    /// The connections to it (`limits.max_connections`): always carried over, the cap updated.
    pub connections: Arc<Connections>,
    /// Each label subset the configuration's routes send to: the same parts, but for the
    /// copies a view of those carrying its labels ([`Endpoints::view`]).
    pub subsets: BTreeMap<Labels, Arc<ClusterShared>>,
    params: SharedParams,
}

/// The parameters the shared parts were made with: a part whose parameters change is rebuilt.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SharedParams {
    balancer: Balancer,
    outlier: Option<Outlier>,
    budget: Option<Budget>,
    limits: Limits,
}

impl SharedParams {
    /// Per-upstream policies come from its first route.
    fn of(cluster: &Cluster) -> SharedParams {
        let from = |p: &hopwise_model::Policy| SharedParams {
            balancer: p.balancer,
            outlier: p.outlier,
            budget: p.budget,
            limits: p.limits,
        };
        match cluster.routes.first() {
            Some(r) => from(&r.policy),
            None => from(&hopwise_model::Preset::Hopwise.policy()),
        }
    }
}

impl ClusterShared {
    /// One per upstream per proxy; policies that are per-upstream come from its first route.
    pub fn new(cluster: &Cluster) -> Arc<ClusterShared> {
        ClusterShared::next(cluster, None, &BTreeSet::new())
    }

    /// The shared state of `cluster` under a new configuration: what `previous` knows (copies
    /// with their load, latency and ejections; the budget's counts; requests in flight for the
    /// caps) is kept for each part whose parameters did not change, and the copies are those of
    /// `cluster`; a view of them is built for each label subset of `subsets`.
    pub fn next(
        cluster: &Cluster,
        previous: Option<&ClusterShared>,
        subsets: &BTreeSet<Labels>,
    ) -> Arc<ClusterShared> {
        let params = SharedParams::of(cluster);
        let none = BTreeMap::new();
        let (addrs, labels): (&[SocketAddr], _) = match &cluster.target {
            Target::Mesh {
                endpoints, labels, ..
            } => (endpoints, labels),
            Target::External { .. } => (&[], &none),
        };
        let endpoints = match previous {
            Some(p)
                if p.params.balancer == params.balancer && p.params.outlier == params.outlier =>
            {
                p.endpoints.clone()
            }
            _ => Arc::new(Endpoints::new(&[], params.balancer, params.outlier)),
        };
        endpoints.update_labelled(addrs, labels);
        let budget = match previous {
            Some(p) if p.params.budget == params.budget => p.budget.clone(),
            _ => params
                .budget
                .as_ref()
                .map(|b| Arc::new(RetryBudget::new(b))),
        };
        let gauges = match previous {
            Some(p) if p.params.limits == params.limits => p.gauges.clone(),
            _ => Arc::new(Gauges::new(params.limits)),
        };
        // The pools that stay keep their connections, so the count of them stays too.
        let connections = match previous {
            Some(p) => {
                p.connections.set_max(params.limits.max_connections);
                p.connections.clone()
            }
            None => Connections::new(params.limits.max_connections),
        };
        // Each subset shares the budget and the caps: its requests are the upstream's.
        let subsets = (subsets.iter())
            .map(|subset| {
                let view = ClusterShared {
                    endpoints: Arc::new(Endpoints::view(&endpoints, subset)),
                    budget: budget.clone(),
                    gauges: gauges.clone(),
                    connections: connections.clone(),
                    subsets: BTreeMap::new(),
                    params,
                };
                (subset.clone(), Arc::new(view))
            })
            .collect();
        Arc::new(ClusterShared {
            endpoints,
            budget,
            gauges,
            connections,
            subsets,
            params,
        })
    }

    /// New copies of the upstream (the control plane's), with their labels: the whole set and
    /// every subset's view follow at once.
    pub fn update_copies(&self, addrs: &[SocketAddr], labels: &BTreeMap<SocketAddr, Labels>) {
        self.endpoints.update_labelled(addrs, labels);
        for (subset, view) in &self.subsets {
            view.endpoints.refresh(&self.endpoints, subset);
        }
    }

    /// Whether `next` kept `previous`'s copies, budget and caps (for tests and logs).
    pub fn kept_from(&self, previous: &ClusterShared) -> [bool; 3] {
        [
            Arc::ptr_eq(&self.endpoints, &previous.endpoints),
            match (&self.budget, &previous.budget) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            },
            Arc::ptr_eq(&self.gauges, &previous.gauges),
        ]
    }
}

#[derive(Debug)]
pub struct ClusterState {
    pub cluster: Cluster,
    /// Shared with the next configuration's when the connection parameters stay the same.
    pub h1: Arc<H1Pool>,
    pub h2: Pool,
    /// A service outside the mesh: where HTTP/1.1 connections go, and the `Host` they carry
    /// (none if its address is not a valid authority). Built once, not per request.
    pub external_dest: Option<Dest>,
    pub external_host: Option<HeaderValue>,
    pub shared: Arc<ClusterShared>,
    /// The metrics handles of its routes, by route index.
    pub routes: Vec<RouteMetrics>,
    /// Its own routes' rules' request counters, by a decision's `index` (none without routes).
    pub rules: Vec<prometheus_client::metrics::counter::Counter>,
    /// An upstream with opaque TCP ports, between proxies with certificates: this worker's
    /// tunnel connections to its copies, and what a TCP call keeps of the policy.
    pub tunnels: Option<(Tunnels, hopwise_model::TcpPolicy)>,
    /// An upstream that accepts protocol switches or CONNECT, between proxies with
    /// certificates: HTTP/1.1 over mutual TLS, one connection per upgrade ([`crate::upgrade`]).
    pub upgrades: Option<Connector>,
}

impl ClusterState {
    /// One worker's state for `cluster` (named `name`). `previous` (this cluster under the
    /// configuration being replaced) lends its pools when it connects the same way, so a policy
    /// change does not drop warm connections.
    pub fn new(
        name: &str,
        cluster: &Cluster,
        certs: Option<&Arc<CertStore>>,
        metrics: &Arc<Metrics>,
        shared: Arc<ClusterShared>,
        idle: Duration,
        previous: Option<&ClusterState>,
    ) -> Result<ClusterState, TlsError> {
        let connect_timeout = connect_timeout(cluster);
        let reuse = previous.filter(|p| connects_alike(&p.cluster, cluster));
        let (h1, h2) = match reuse {
            Some(p) => (p.h1.clone(), p.h2.clone()),
            None => {
                let slots = &shared.connections;
                pools(cluster, certs, metrics, connect_timeout, idle, slots)?
            }
        };
        let routes = cluster
            .routes
            .iter()
            .map(|r| metrics.route(Direction::Outbound, name, &r.name))
            .collect();
        let rules = (cluster.table.as_deref())
            .map(|t| metrics.rules.counters(&cluster.service, t.rules()))
            .unwrap_or_default();
        let (external_dest, external_host) = match &cluster.target {
            Target::External { address, .. } => (
                Some(Dest::Name(Arc::from(address.as_str()))),
                address
                    .parse::<Authority>()
                    .ok()
                    .and_then(|a| HeaderValue::from_str(a.as_str()).ok()),
            ),
            Target::Mesh { .. } => (None, None),
        };
        let tunnels = match (cluster.tcp_policy(), &cluster.target, certs) {
            (Some(policy), Target::Mesh { identity, .. }, Some(store)) => {
                let tls = store.client_config(identity, TUNNEL_ALPN)?;
                let connector = Connector::tls(tls, None, connect_timeout, metrics.clone());
                Some((Tunnels::new(connector, &cluster.service), policy))
            }
            // Tunnels are mutual TLS only: without certificates a TCP call is refused.
            _ => None,
        };
        let upgrades = match (&cluster.upgrade, &cluster.target, certs) {
            (Some(_), Target::Mesh { identity, .. }, Some(store)) => {
                let tls = store.client_config(identity, b"http/1.1")?;
                Some(Connector::tls(tls, None, connect_timeout, metrics.clone()))
            }
            _ => None,
        };
        Ok(ClusterState {
            tunnels,
            upgrades,
            cluster: cluster.clone(),
            h1,
            h2,
            external_dest,
            external_host,
            shared,
            routes,
            rules,
        })
    }
}

fn connect_timeout(cluster: &Cluster) -> Duration {
    cluster
        .routes
        .first()
        .map_or(Duration::from_secs(1), |r| r.policy.connect_timeout.get())
}

/// Whether two versions of a cluster connect the same way (same identity or address, TLS and
/// connect timeout), so the new one may use the old one's pooled connections.
fn connects_alike(old: &Cluster, new: &Cluster) -> bool {
    let target = match (&old.target, &new.target) {
        (Target::Mesh { identity: a, .. }, Target::Mesh { identity: b, .. }) => a == b,
        (a @ Target::External { .. }, b @ Target::External { .. }) => a == b,
        _ => false,
    };
    target && connect_timeout(old) == connect_timeout(new)
}

/// A cluster's HTTP/1.1 pool and its HTTP/2 (and gRPC) pool.
fn pools(
    cluster: &Cluster,
    certs: Option<&Arc<CertStore>>,
    metrics: &Arc<Metrics>,
    connect_timeout: Duration,
    idle: Duration,
    slots: &Arc<Connections>,
) -> Result<(Arc<H1Pool>, Pool), TlsError> {
    let h1 = |c: Connector| Arc::new(H1Pool::capped(c, idle, slots.clone()));
    Ok(match &cluster.target {
        Target::Mesh { identity, .. } => match certs {
            Some(store) => {
                let c1 = Connector::tls(
                    store.client_config(identity, b"http/1.1")?,
                    None,
                    connect_timeout,
                    metrics.clone(),
                );
                let c2 = Connector::tls(
                    store.client_config(identity, b"h2")?,
                    None,
                    connect_timeout,
                    metrics.clone(),
                );
                (h1(c1), upstream::pool(c2, true, idle))
            }
            // Without certificates the mesh runs in plain text (tests, benchmarks).
            None => {
                let c = Connector::plain(connect_timeout);
                (h1(c.clone()), upstream::pool(c, true, idle))
            }
        },
        Target::External { tls, .. } => {
            let connector = |alpn: &[u8]| -> Result<Connector, TlsError> {
                Ok(match tls {
                    Some(t) => {
                        let name = ServerName::try_from(t.server_name.clone()).map_err(|_| {
                            TlsError::Bundle {
                                path: t.ca_file.clone(),
                                reason: format!("`{}` is not a server name", t.server_name),
                            }
                        })?;
                        Connector::tls(
                            external_client_config(&t.ca_file, alpn)?,
                            Some(name),
                            connect_timeout,
                            metrics.clone(),
                        )
                    }
                    None => Connector::plain(connect_timeout),
                })
            };
            (
                h1(connector(b"http/1.1")?),
                upstream::pool(connector(b"h2")?, true, idle),
            )
        }
    })
}
