//! What one proxy runs, derived from the mesh file: its listeners, the upstream clusters it
//! forwards to (with their routes and policies, and the callee's own routes), who may call it.
//! `/config` serves this.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hopwise_model::labels::Labels;
use hopwise_model::observe::{AccessLog, Tracing};
use hopwise_model::ports::Ports;
use hopwise_model::rate::RateLimits;
use hopwise_model::{InboundLimits, Mesh, Policy, Protocol, Tcp, TcpPolicy, Upgrade};
use indexmap::IndexMap;
use serde::Serialize;

use crate::route::RouteTable;
use crate::tls::CertFiles;

mod gateway;
pub use gateway::GatewayConfig;

/// Connections one listener holds at once, unless `--listener-connections` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// The command line's say over the listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ListenerPolicy {
    /// Open connections per listener (inbound, the HTTP-proxy port, each per-upstream port).
    pub max_connections: usize,
    /// The outbound listeners may bind a non-loopback address (`--allow-remote-outbound`).
    pub allow_remote_outbound: bool,
    /// The admin listener may bind a non-loopback address (`--allow-remote-admin`).
    pub allow_remote_admin: bool,
}

impl Default for ListenerPolicy {
    fn default() -> Self {
        ListenerPolicy {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            allow_remote_outbound: false,
            allow_remote_admin: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("`{service}` is not a service in the mesh file (services: {known})")]
    UnknownService { service: String, known: String },
    #[error(
        "`{service}` has no copy {copy} (it has {count}); add it under services.{service}.copies"
    )]
    NoCopy {
        service: String,
        copy: usize,
        count: usize,
    },
    #[error("`{0}` is outside the mesh (`external`): it runs no proxy")]
    External(String),
    #[error(
        "no certificates: set mesh.certs in the mesh file or pass --certs (create them with `hopwise certs`)"
    )]
    NoCerts,
}

/// The capture listener of a copy run captured (`hopwise run`, [`crate::capture`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaptureConfig {
    /// The network namespace it is bound in (`/run/netns/NAME`); none: the proxy's own.
    pub netns: Option<PathBuf>,
    /// Where the namespace's rules send the app's outbound TCP (loopback inside it).
    pub listen: SocketAddr,
    /// The mesh's addresses, to map each connection's original destination.
    pub destinations: hopwise_model::capture::Destinations,
}

/// A route within a call: matched by path prefix, named for metrics, with its own policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    pub name: String,
    pub prefix: Option<String>,
    /// Declared safe (or unsafe) to repeat; `None`: judged by each request's method.
    pub idempotent: Option<bool>,
    pub policy: Policy,
}

/// Where a cluster's requests go.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Copies of a mesh service, each behind its proxy's mTLS port.
    Mesh {
        endpoints: Vec<SocketAddr>,
        identity: String,
        /// The labels of the endpoints that carry any (the file's `copies[i].labels`, or what
        /// each copy registered with), which route subsets select by.
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        labels: BTreeMap<SocketAddr, Labels>,
    },
    /// A service outside the mesh, in plain HTTP or with TLS originated by us.
    External {
        address: String,
        tls: Option<ExternalTls>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExternalTls {
    pub ca_file: PathBuf,
    pub server_name: String,
}

/// One upstream service this proxy forwards to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cluster {
    pub service: String,
    pub protocol: Protocol,
    pub target: Target,
    pub routes: Vec<Route>,
    /// The callee's opaque TCP ports (`services.<name>.tcp`), if it has any.
    pub tcp: Option<Tcp>,
    /// The ports captured apps call the callee on, each to an app port (`ports`).
    #[serde(skip_serializing_if = "Ports::is_empty")]
    pub ports: Ports,
    /// Protocol switches and `CONNECT` the callee accepts (`services.<name>.upgrade`).
    pub upgrade: Option<Upgrade>,
    /// The callee's own routes (`services.<name>.routes`), which pick a backend for each
    /// request to it ([`crate::route`]); `None`: it has none, and is called as it is.
    /// `/config` shows their names (`own_routes`).
    #[serde(
        rename = "own_routes",
        skip_serializing_if = "Option::is_none",
        serialize_with = "table_names"
    )]
    pub table: Option<Arc<RouteTable>>,
}

impl Cluster {
    /// Whether every connection to this upstream is opaque TCP (its local port is a TCP one).
    pub fn whole_tcp(&self) -> bool {
        self.tcp.as_ref().is_some_and(Tcp::whole)
    }

    /// What a TCP call to this upstream keeps of its policy (its first route's), if it has
    /// opaque ports.
    pub fn tcp_policy(&self) -> Option<TcpPolicy> {
        let tcp = self.tcp.as_ref()?;
        let preset;
        let policy = match self.routes.first() {
            Some(r) => &r.policy,
            None => {
                preset = hopwise_model::Preset::Hopwise.policy();
                &preset
            }
        };
        Some(TcpPolicy::of(policy, tcp))
    }

    /// The label subsets of this service that the routes of `clusters` send to (a backend's or
    /// a mirror's `subset`), each once.
    pub fn subsets_named<'c>(
        &self,
        clusters: impl IntoIterator<Item = &'c Cluster>,
    ) -> std::collections::BTreeSet<Labels> {
        (clusters.into_iter())
            .filter_map(|c| c.table.as_deref())
            .flat_map(RouteTable::targets)
            .filter(|t| t.service == self.service && !t.subset.is_empty())
            .map(|t| t.subset.clone())
            .collect()
    }

    /// The index of the route for `path` (canonical, [`hopwise_model::path`]): the longest
    /// matching prefix, else the first route without one, else the first route.
    pub fn route_index(&self, path: &str) -> Option<usize> {
        let by_prefix = self
            .routes
            .iter()
            .enumerate()
            .filter(|(_, r)| r.prefix.as_deref().is_some_and(|p| path.starts_with(p)))
            .max_by_key(|(_, r)| r.prefix.as_ref().map_or(0, String::len))
            .map(|(i, _)| i);
        by_prefix
            .or_else(|| self.routes.iter().position(|r| r.prefix.is_none()))
            .or((!self.routes.is_empty()).then_some(0))
    }
}

/// Listener-level timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ListenerTimeouts {
    /// A client must send a request's headers within this (slowloris defence): the first
    /// request's from the accept (TLS handshake included), and each next one's (HTTP/1).
    pub header_read: Duration,
    /// A connection with no request open, started or ended for this long is asked to go away
    /// (HTTP/2: GOAWAY), and closed a `header_read` later if it is still idle.
    pub idle: Duration,
    /// Pooled upstream connections idle longer than this are closed.
    pub pool_idle: Duration,
    /// How long a graceful shutdown waits for requests in flight.
    pub drain: Duration,
}

impl Default for ListenerTimeouts {
    fn default() -> Self {
        ListenerTimeouts {
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            // Below every server's keep-alive idle timeout we know of (ours 10 s, Node's 5 s), so
            // the pool drops a connection before the server does, not while we reuse it.
            pool_idle: Duration::from_secs(4),
            drain: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProxyConfig {
    pub mesh: String,
    pub service: String,
    pub copy: usize,
    pub identity: String,
    /// What the local app speaks: HTTP/1.1, or gRPC over h2c.
    pub protocol: Protocol,
    pub app: Option<SocketAddr>,
    pub inbound: Option<SocketAddr>,
    pub outbound: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    /// Local ports, one per upstream, by cluster name.
    pub upstream_ports: IndexMap<String, SocketAddr>,
    /// The capture listener, when the copy runs captured (set from the command line).
    pub capture: Option<CaptureConfig>,
    pub clusters: IndexMap<String, Cluster>,
    /// Identities allowed to call this service; empty: any identity of the mesh.
    pub allowed_callers: Vec<String>,
    /// Nobody may call it (`allow: none`).
    pub deny_all: bool,
    /// Narrower rules by path prefix: identities allowed on paths under it.
    pub allowed_paths: Vec<(String, Vec<String>)>,
    /// Route names for inbound metrics, from every caller's routes to this service.
    pub inbound_routes: Vec<(String, String)>,
    /// Caps on requests to the local app and how long it may take (`services.<name>.inbound`).
    pub inbound_limits: InboundLimits,
    /// Requests a second let through to the app (`services.<name>.inbound.rate_limit`), its
    /// named callers by SPIFFE identity ([`crate::inbound::rate`]).
    pub rate_limit: RateLimits,
    /// Faults injected into requests to the app (`services.<name>.fault`, [`crate::inbound::fault`]).
    pub fault: Option<hopwise_model::fault::Fault>,
    /// This service's opaque TCP ports, which tunnels may reach (`services.<name>.tcp`).
    pub tcp: Option<Tcp>,
    /// The ports this service is called on and the app port each reaches (`ports`): what a
    /// caller's `x-hopwise-service-port` may lead to.
    #[serde(skip_serializing_if = "Ports::is_empty")]
    pub ports: Ports,
    /// Protocol switches and `CONNECT` this service's app accepts ([`crate::upgrade`]).
    pub upgrade: Option<Upgrade>,
    /// `mesh.tracing`: sampling, and where spans go ([`crate::trace`]).
    pub tracing: Option<Tracing>,
    /// `services.<name>.access_log`, if this service logs its requests.
    pub access_log: Option<AccessLog>,
    /// This service is a gateway (`services.<name>.gateway`): its front-door listeners.
    pub gateway: Option<GatewayConfig>,
    #[serde(skip)]
    pub certs: Option<CertFiles>,
    pub workers: usize,
    pub timeouts: ListenerTimeouts,
    /// Run without TLS between proxies (benchmarks of the plain path, local experiments).
    pub plaintext: bool,
    /// Connection caps and which listeners may bind non-loopback addresses (command line).
    pub listeners: ListenerPolicy,
    /// The app's kubelet probes this proxy runs on the admin port (an injected pod's, from
    /// its environment: [`crate::app_probe`]).
    pub app_probes: Option<crate::app_probe::AppProbeTarget>,
}

impl ProxyConfig {
    /// The configuration of copy `copy` of `service`. Relative paths are resolved against
    /// `base` (the mesh file's directory); `certs_dir` overrides `mesh.certs`.
    pub fn from_mesh(
        mesh: &Mesh,
        service: &str,
        copy: usize,
        base: &Path,
        certs_dir: Option<&Path>,
    ) -> Result<ProxyConfig, ConfigError> {
        let s = mesh
            .services
            .get(service)
            .ok_or_else(|| ConfigError::UnknownService {
                service: service.to_owned(),
                known: mesh.services.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        if s.external.is_some() {
            return Err(ConfigError::External(service.to_owned()));
        }
        let c = match s.copies.get(copy) {
            Some(c) => c.clone(),
            None if s.copies.is_empty() && copy == 0 => Default::default(),
            None => {
                return Err(ConfigError::NoCopy {
                    service: service.to_owned(),
                    copy,
                    count: s.copies.len(),
                });
            }
        };
        let mut clusters: IndexMap<String, Cluster> = IndexMap::new();
        for call in &s.calls {
            let Some(callee) = mesh.services.get(&call.to) else {
                continue;
            };
            let cluster = clusters.entry(call.to.clone()).or_insert_with(|| Cluster {
                service: call.to.clone(),
                protocol: call.protocol,
                target: match &callee.external {
                    Some(e) => Target::External {
                        address: e.address.clone(),
                        tls: e.tls.as_ref().map(|t| ExternalTls {
                            ca_file: match &t.ca_file {
                                Some(f) => base.join(f),
                                None => certs_path(mesh, base, certs_dir)
                                    .map_or_else(|| base.join("ca.pem"), |d| d.join("ca.pem")),
                            },
                            server_name: t.server_name.clone(),
                        }),
                    },
                    None => Target::Mesh {
                        endpoints: callee.copies.iter().filter_map(|c| c.inbound).collect(),
                        identity: mesh.identity(&callee.name),
                        labels: (callee.copies.iter())
                            .filter(|c| !c.labels.is_empty())
                            .filter_map(|c| Some((c.inbound?, c.labels.clone())))
                            .collect(),
                    },
                },
                routes: Vec::new(),
                tcp: callee.tcp.clone(),
                ports: callee.ports.clone(),
                upgrade: callee.upgrade.clone(),
                table: RouteTable::of(&callee.routes).map(Arc::new),
            });
            cluster.routes.push(Route {
                name: call.route.clone().unwrap_or_else(|| call.to.clone()),
                prefix: call.route_path.clone(),
                idempotent: call.idempotent_declared,
                policy: call.policy.clone(),
            });
        }
        // A gateway's listeners go to the gateway itself, whose routes pick among its calls
        // (a gateway is never called, so the name is free).
        if s.gateway.is_some() {
            let parent = GatewayConfig::parent(mesh, s);
            clusters.insert(service.to_owned(), parent);
        }
        let (allowed_callers, deny_all) = match &s.allow {
            hopwise_model::Allow::Any => (Vec::new(), false),
            hopwise_model::Allow::Only(list) => (
                list.iter().map(|c| mesh.identity(c)).collect::<Vec<_>>(),
                list.is_empty(),
            ),
        };
        let allowed_paths = s
            .allow_paths
            .iter()
            .map(|(p, list)| (p.clone(), list.iter().map(|c| mesh.identity(c)).collect()))
            .collect();
        let inbound_routes = mesh
            .calls()
            .filter(|call| call.to == service)
            .filter_map(|call| Some((call.route.clone()?, call.route_path.clone()?)))
            .collect();
        Ok(ProxyConfig {
            mesh: mesh.name.clone(),
            service: service.to_owned(),
            copy,
            identity: mesh.identity(service),
            protocol: s.protocol,
            app: c.app,
            inbound: c.inbound,
            outbound: c.outbound,
            admin: c.admin,
            upstream_ports: c.upstreams.clone(),
            capture: None,
            clusters,
            allowed_callers,
            deny_all,
            allowed_paths,
            inbound_routes,
            inbound_limits: s.inbound,
            rate_limit: RateLimits {
                callers: (s.rate_limit.callers.iter())
                    .map(|(name, limit)| (mesh.identity(name), *limit))
                    .collect(),
                ..s.rate_limit.clone()
            },
            fault: s.fault.clone(),
            tcp: s.tcp.clone(),
            ports: s.ports.clone(),
            upgrade: s.upgrade.clone(),
            tracing: mesh.observe.tracing.clone(),
            access_log: mesh.observe.access_logs.get(service).cloned(),
            gateway: GatewayConfig::of(s, base),
            certs: certs_path(mesh, base, certs_dir).map(|d| CertFiles::in_dir(&d, service)),
            workers: 1,
            timeouts: ListenerTimeouts::default(),
            plaintext: false,
            listeners: ListenerPolicy::default(),
            app_probes: None,
        })
    }

    pub fn plaintext(&self) -> bool {
        self.plaintext
    }

    /// The cluster a `Host` (or `:authority`) names: `pricing`, `pricing:80`,
    /// `pricing.<trust-domain>`.
    pub fn cluster_for_host(&self, host: &str) -> Option<&Cluster> {
        // Names are lowercase in the mesh file; a caller's `Host` is lowercased only when it
        // is not already (the captured path looks up every request: no allocation then).
        let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            std::borrow::Cow::Owned(host.to_ascii_lowercase())
        } else {
            std::borrow::Cow::Borrowed(host)
        };
        let name = match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => &host,
        };
        let name = name.trim_end_matches('.');
        // `pricing`, or `pricing.<trust-domain>`; never `pricing.elsewhere.example`.
        let trust_domain = self
            .identity
            .strip_prefix("spiffe://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_default();
        let service = match name.split_once('.') {
            None => name,
            Some((first, rest)) if rest == trust_domain => first,
            Some(_) => return None,
        };
        self.clusters.get(service)
    }

    /// May `identity` open a TCP tunnel to this service? `allow` decides: a connection has no
    /// path for `allow_paths` to match.
    pub fn authorizes_tcp(&self, identity: &str) -> bool {
        // Path prefixes start with `/`: none matches the empty path, so `allow` alone decides.
        self.authorizes(identity, "")
    }

    /// May `identity` call `path` on this service? The longest matching `allow_paths` prefix
    /// decides; otherwise `allow`. `path` must be canonical ([`hopwise_model::path`]), as the
    /// prefixes are: the inbound proxy normalizes it first.
    pub fn authorizes(&self, identity: &str, path: &str) -> bool {
        if let Some((_, list)) = self
            .allowed_paths
            .iter()
            .filter(|(p, _)| path.starts_with(p.as_str()))
            .max_by_key(|(p, _)| p.len())
        {
            return list.iter().any(|a| a == identity);
        }
        // `any` is any service of this mesh: `spiffe://<trust-domain>/service/<name>`, not
        // another trust domain's or the control plane's identity from the same CA.
        let of_this_mesh = || {
            self.identity
                .rsplit_once('/')
                .and_then(|(services, _)| identity.strip_prefix(services))
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|name| !name.is_empty() && !name.contains('/'))
        };
        !self.deny_all
            && if self.allowed_callers.is_empty() {
                of_this_mesh()
            } else {
                self.allowed_callers.iter().any(|a| a == identity)
            }
    }

    /// The inbound route name for metrics: the longest matching prefix among callers' routes.
    pub fn inbound_route(&self, path: &str) -> &str {
        self.inbound_route_index(path)
            .map_or("inbound", |i| self.inbound_routes[i].0.as_str())
    }

    /// The index in `inbound_routes` of the longest matching prefix, if any matches.
    pub fn inbound_route_index(&self, path: &str) -> Option<usize> {
        self.inbound_routes
            .iter()
            .enumerate()
            .filter(|(_, (_, p))| path.starts_with(p.as_str()))
            .max_by_key(|(_, (_, p))| p.len())
            .map(|(i, _)| i)
    }
}

fn table_names<S: serde::Serializer>(t: &Option<Arc<RouteTable>>, s: S) -> Result<S::Ok, S::Error> {
    t.as_deref().map(RouteTable::names).serialize(s)
}

fn certs_path(mesh: &Mesh, base: &Path, over: Option<&Path>) -> Option<PathBuf> {
    over.map(Path::to_owned)
        .or_else(|| mesh.certs.as_ref().map(|c| base.join(c)))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
