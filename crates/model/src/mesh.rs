//! The validated mesh: every call with its fully resolved policy. Stage two of two: presets are
//! applied layer by layer (built-in `hopwise` → `defaults` → service → call → route; a layer's
//! `preset:` restarts from that product's defaults), then the whole graph is checked. Every
//! problem is returned at once, each with its path and line.

use indexmap::IndexMap;
use serde::Serialize;

use crate::capture::Capture;
use crate::carries::Carries;
use crate::diag::{Diagnostic, Diagnostics};
use crate::duration::Dur;
use crate::observe::{self, Observe};
use crate::policy::{Budget, InboundLimits, Policy, Protocol, idempotent_method};
use crate::preset::Preset;
use crate::raw::{
    AllowWord, OrNone, RawAllow, RawCopies, RawInbound, RawMesh, RawPolicy, RawRequest, SampleKind,
    read_mesh,
};
use crate::read::{Locations, Reader};
use crate::topology::{self, Copy, External};
use crate::yaml;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mesh {
    pub name: String,
    pub trust_domain: String,
    /// Certificates directory as written (relative to the mesh file), if any.
    pub certs: Option<String>,
    pub services: IndexMap<String, Service>,
    /// How captured apps reach the mesh (`mesh.capture`): [`crate::capture`].
    pub capture: Capture,
    /// What the proxies record (`mesh.tracing`, `services.<name>.access_log`).
    pub observe: Observe,
    #[serde(skip)]
    pub locations: Locations,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Service {
    pub name: String,
    pub protocol: Protocol,
    /// Set when requests arrive from outside the mesh (or nobody in the mesh calls it).
    pub entry: Option<Entry>,
    pub calls: Vec<Call>,
    pub copies: Vec<Copy>,
    /// The copies were given as a number (`copies: N`): their addresses are assigned by
    /// whoever runs them.
    pub copies_counted: bool,
    /// The built-in sample app `hopwise up` runs for each copy, if any.
    pub sample: Option<SampleKind>,
    /// The service's own command `hopwise up` runs for each copy (`run`), if any.
    pub run: Option<crate::run::Run>,
    pub external: Option<External>,
    /// The address captured apps reach it at (declared, or the capture range's default).
    pub address: Option<std::net::IpAddr>,
    /// The ports captured apps call it on and the app port each reaches (`ports`).
    pub ports: crate::ports::Ports,
    /// On Kubernetes: its pods' namespace and ServiceAccount, whose identity it has.
    pub kubernetes: Option<crate::kubernetes::ServiceAccount>,
    /// Who may call it.
    pub allow: Allow,
    /// Narrower rules by path prefix.
    pub allow_paths: Vec<(String, Vec<String>)>,
    /// What its inbound proxy lets through to the app.
    pub inbound: InboundLimits,
    /// Requests a second its inbound proxy lets through (`inbound.rate_limit`).
    pub rate_limit: crate::rate::RateLimits,
    /// Faults its inbound proxies inject (`fault`), if any.
    pub fault: Option<crate::fault::Fault>,
    /// Opaque TCP ports of its app (`tcp`), if any.
    pub tcp: Option<crate::tcp::Tcp>,
    /// Protocol switches and `CONNECT` its app accepts (`upgrade`), if any.
    pub upgrade: Option<crate::upgrade::Upgrade>,
    /// What its app carries from a request to the calls it makes for it.
    pub carries: Carries,
    /// It is a gateway (`gateway`): a front door for clients outside the mesh, no app.
    pub gateway: Option<crate::gateway::Gateway>,
    /// Its own routes (`routes`), HTTP or gRPC as it speaks, which its callers' proxies route
    /// by (docs/routes.md); not yet in the JSON of the mesh.
    #[serde(skip)]
    pub routes: crate::route::ServiceRoutes,
}

/// Who may call a service (checked by its inbound proxy against the caller's identity).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Allow {
    /// Any identity of the mesh (the default).
    Any,
    /// Only these services (an empty list refuses everyone).
    Only(Vec<String>),
}

/// The client outside the mesh that calls an entry service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub timeout: Option<Dur>,
    pub retries: u32,
}

/// One call (or one route of a call) from `from` to `to`, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    pub from: String,
    pub to: String,
    pub route: Option<String>,
    /// Path prefix of the route, if the call has routes.
    pub route_path: Option<String>,
    /// Where the call is written in the mesh file (`services.a.calls.b[.routes.r]`).
    pub path: String,
    pub protocol: Protocol,
    pub method: String,
    /// Safe to repeat (declared, or by RFC 9110 from the method).
    pub idempotent: bool,
    /// What the file declared, if anything: at run time an undeclared call is judged by each
    /// request's actual method.
    pub idempotent_declared: Option<bool>,
    pub app_retries: u32,
    pub policy: Policy,
}

impl Call {
    /// `checkout → pricing`, or `checkout → pricing/quote` for a route.
    pub fn label(&self) -> String {
        match &self.route {
            Some(r) => format!("{} → {}/{r}", self.from, self.to),
            None => format!("{} → {}", self.from, self.to),
        }
    }
}

impl Mesh {
    /// Reads and validates a mesh file's text. `Err` holds every problem found.
    pub fn from_yaml(text: &str) -> Result<Mesh, Diagnostics> {
        let tree = yaml::parse(text).map_err(|d| Diagnostics(vec![d]))?;
        let mut reader = Reader::default();
        let raw = read_mesh(&mut reader, &tree);
        let mut mesh = resolve(&raw, reader.locations, &mut reader.diags);
        let mut diags = reader.diags;
        crate::kubernetes::resolve_allowed_accounts(&mut mesh, &mut diags);
        validate(&mesh, &mut diags);
        if diags.is_empty() {
            Ok(mesh)
        } else {
            diags.sort_by_key(|d| d.pos);
            Err(Diagnostics(diags))
        }
    }

    /// The SPIFFE identity of a service's proxies.
    pub fn identity(&self, service: &str) -> String {
        match self
            .services
            .get(service)
            .and_then(|s| s.kubernetes.as_ref())
        {
            Some(account) => account.identity(&self.trust_domain),
            None => format!("spiffe://{}/service/{service}", self.trust_domain),
        }
    }

    /// The service whose identity is `identity`, if one is (validation keeps identities
    /// distinct): what a ServiceAccount token vouched for by Kubernetes may act as.
    pub fn service_of_identity(&self, identity: &str) -> Option<&str> {
        self.services
            .keys()
            .find(|name| self.identity(name) == identity)
            .map(String::as_str)
    }

    /// The service that Kubernetes Service `name` in `namespace` is: the one of that name
    /// whose pods run in that namespace.
    pub fn service_on_kubernetes(&self, namespace: &str, name: &str) -> Option<&str> {
        let (key, service) = self.services.get_key_value(name)?;
        let account = service.kubernetes.as_ref()?;
        (account.namespace == namespace).then_some(key.as_str())
    }

    /// The control plane's SPIFFE identity in this mesh ([`crate::control_port`]).
    pub fn control_identity(&self) -> String {
        crate::control_port::control_identity(&self.trust_domain)
    }

    /// Every call in the mesh, in file order.
    pub fn calls(&self) -> impl Iterator<Item = &Call> {
        self.services.values().flat_map(|s| s.calls.iter())
    }

    /// Services that requests enter the mesh through: marked with `entry`, or called by nobody.
    pub fn entries(&self) -> Vec<&Service> {
        self.services
            .values()
            .filter(|s| s.entry.is_some() || !self.calls().any(|c| c.to == s.name))
            .collect()
    }

    pub(crate) fn diag(&self, path: &str, message: String) -> Diagnostic {
        Diagnostic::new(path, self.locations.of(path), message)
    }
}

fn resolve(raw: &RawMesh, locations: Locations, diags: &mut Vec<Diagnostic>) -> Mesh {
    let mut base = Preset::Hopwise.policy();
    if let Some(d) = &raw.defaults {
        apply(&mut base, d);
    }
    let info = raw.mesh.clone().unwrap_or_default();
    let (capture, addresses) =
        crate::capture::resolve(info.capture.as_ref(), &raw.services, &locations, diags);
    let mut services = IndexMap::new();
    for ((name, rs), address) in raw.services.iter().zip(addresses) {
        let mut service_policy = base.clone();
        apply(&mut service_policy, &rs.policy);
        let mut calls = Vec::new();
        for (to, rc) in &rs.calls {
            let mut call_policy = service_policy.clone();
            apply(&mut call_policy, &rc.policy);
            let callee_protocol = raw
                .services
                .get(to)
                .and_then(|s| s.protocol)
                .unwrap_or(Protocol::Http);
            let path = format!("services.{name}.calls.{to}");
            let call = |route: Option<(&String, &RawRequest, Option<String>)>, policy: Policy| {
                let mut req = rc.request.clone();
                if let Some((_, r, _)) = &route {
                    overlay(&mut req, r);
                }
                let protocol = req.protocol.unwrap_or(callee_protocol);
                let method = req.method.clone().unwrap_or_else(|| match protocol {
                    Protocol::Http => "GET".to_owned(),
                    Protocol::Grpc => "POST".to_owned(),
                });
                Call {
                    from: name.clone(),
                    to: to.clone(),
                    route: route.as_ref().map(|(n, _, _)| (*n).clone()),
                    route_path: route.as_ref().and_then(|(_, _, p)| p.clone()),
                    path: match &route {
                        Some((n, _, _)) => format!("{path}.routes.{n}"),
                        None => path.clone(),
                    },
                    protocol,
                    idempotent_declared: req.idempotent,
                    idempotent: req.idempotent.unwrap_or_else(|| {
                        protocol == Protocol::Http && idempotent_method(&method)
                    }),
                    method,
                    app_retries: req.app_retries.unwrap_or(0),
                    policy,
                }
            };
            if rc.routes.is_empty() {
                calls.push(call(None, call_policy));
            } else {
                for (rname, rr) in &rc.routes {
                    let mut p = call_policy.clone();
                    apply(&mut p, &rr.policy);
                    calls.push(call(Some((rname, &rr.request, rr.path.clone())), p));
                }
            }
        }
        let entry = rs.entry.as_ref().map(|e| Entry {
            timeout: e.timeout.and_then(OrNone::option),
            retries: e.retries.unwrap_or(0),
        });
        let copies = match &rs.copies {
            None => Vec::new(),
            Some(RawCopies::Count(n)) => vec![Copy::default(); *n as usize],
            Some(RawCopies::List(list)) => topology::copies(list, name, &locations, diags),
        };
        let external = rs
            .external
            .as_ref()
            .and_then(|e| topology::external(e, name, &locations, diags));
        if !rs.ports.is_empty() && rs.external.is_some() {
            let path = format!("services.{name}.ports");
            diags.push(Diagnostic::new(
                &path,
                locations.of(&path),
                "a service outside the mesh runs no proxy to reach its app's ports: remove `ports` or `external`",
            ));
        }
        if rs.tcp.is_some() && rs.external.is_some() {
            let path = format!("services.{name}.tcp");
            diags.push(Diagnostic::new(
                &path,
                locations.of(&path),
                "a service outside the mesh runs no proxy to end a TCP tunnel: remove `tcp` or `external`",
            ));
        }
        let allow = match &rs.allow {
            None | Some(RawAllow::Word(AllowWord::Any)) => Allow::Any,
            Some(RawAllow::Word(AllowWord::None)) => Allow::Only(Vec::new()),
            Some(RawAllow::Services(list)) => Allow::Only(list.clone()),
        };
        services.insert(
            name.clone(),
            Service {
                name: name.clone(),
                protocol: rs.protocol.unwrap_or(Protocol::Http),
                entry,
                calls,
                copies_counted: matches!(rs.copies, Some(RawCopies::Count(_))),
                sample: rs.sample,
                run: crate::run::Run::read(rs, name, &locations, diags),
                external,
                address,
                ports: crate::ports::Ports::of(&rs.ports),
                kubernetes: crate::kubernetes::resolve(
                    info.kubernetes.as_ref(),
                    rs.kubernetes.as_ref(),
                    name,
                    rs.external.is_some(),
                    &locations,
                    diags,
                ),
                allow,
                allow_paths: rs
                    .allow_paths
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                inbound: inbound_limits(rs.inbound.as_ref()),
                rate_limit: crate::rate::resolve(
                    rs.inbound.as_ref().and_then(|i| i.rate_limit.as_ref()),
                    name,
                    &raw.services,
                    &locations,
                    diags,
                ),
                fault: crate::fault::resolve(
                    rs.fault.as_ref(),
                    name,
                    rs.protocol.unwrap_or(Protocol::Http),
                    &locations,
                    diags,
                ),
                tcp: rs.tcp.as_ref().map(crate::tcp::Tcp::of),
                upgrade: crate::upgrade::Upgrade::read(rs, name, &locations, diags),
                carries: Carries::resolve(rs.carries.as_deref().unwrap_or_default(), &copies),
                gateway: crate::gateway::resolve(rs, name, &locations, diags),
                routes: crate::route::resolve(rs, name, &raw.services, &locations, diags),
                copies,
            },
        );
    }
    let trust_domain = info
        .trust_domain
        .unwrap_or_else(|| "hopwise.local".to_owned());
    if !trust_domain
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        || trust_domain.is_empty()
    {
        diags.push(Diagnostic::new(
            "mesh.trust_domain",
            locations.of("mesh.trust_domain"),
            format!("`{trust_domain}` is not a valid SPIFFE trust domain (lowercase letters, digits, `.`, `-`)"),
        ));
    }
    Mesh {
        name: info.name.unwrap_or_else(|| "mesh".to_owned()),
        trust_domain,
        certs: info.certs,
        services,
        capture,
        observe: observe::resolve(raw),
        locations,
    }
}

fn inbound_limits(raw: Option<&RawInbound>) -> InboundLimits {
    let d = InboundLimits::DEFAULT;
    let Some(raw) = raw else { return d };
    InboundLimits {
        max_requests: raw.max_requests.unwrap_or(d.max_requests),
        max_requests_per_caller: raw
            .max_requests_per_caller
            .unwrap_or(d.max_requests_per_caller),
        timeout: raw.timeout.map_or(d.timeout, OrNone::option),
    }
}

fn overlay(req: &mut RawRequest, over: &RawRequest) {
    req.protocol = over.protocol.or(req.protocol);
    req.method = over.method.clone().or(req.method.take());
    req.idempotent = over.idempotent.or(req.idempotent);
    req.app_retries = over.app_retries.or(req.app_retries);
}

/// Applies one layer of settings on top of `p`.
pub(crate) fn apply(p: &mut Policy, raw: &RawPolicy) {
    if let Some(preset) = raw.preset {
        *p = preset.policy();
    }
    if let Some(t) = raw.timeout {
        p.timeout = t.option();
    }
    if let Some(t) = raw.per_try_timeout {
        p.per_try_timeout = t.option();
    }
    if let Some(t) = raw.connect_timeout {
        p.connect_timeout = t;
    }
    if let Some(r) = &raw.retries {
        if let Some(c) = r.count {
            p.retry.count = c;
        }
        if let Some(on) = &r.on {
            p.retry.on = on.iter().copied().collect();
        }
        if let Some(codes) = &r.status_codes {
            p.retry.status_codes = codes.iter().copied().collect();
        }
        if let Some(b) = &r.backoff {
            if let Some(s) = b.strategy {
                p.retry.backoff.strategy = s;
            }
            if let Some(base) = b.base {
                p.retry.backoff.base = base;
                // Envoy: max defaults to 10 × base unless set.
                if b.max.is_none() {
                    p.retry.backoff.max = Dur(base.0 * 10);
                }
            }
            if let Some(max) = b.max {
                p.retry.backoff.max = max;
            }
        }
        if let Some(s) = r.only_if_safe {
            p.retry.only_if_safe = s;
        }
        if let Some(v) = r.honor_idempotency_key {
            p.retry.honor_idempotency_key = v;
        }
        if let Some(v) = r.single_hop {
            p.retry.single_hop = v;
        }
        if let Some(v) = r.max_replay_bytes {
            p.retry.max_replay_bytes = v;
        }
    }
    match &raw.budget {
        None => {}
        Some(OrNone::None) => p.budget = None,
        Some(OrNone::Some(b)) => {
            let mut budget = p.budget.unwrap_or_else(|| {
                Preset::Hopwise.policy().budget.unwrap_or(Budget {
                    ratio: 0.2,
                    min_per_second: 10,
                    window: Dur::from_millis(10_000),
                })
            });
            if let Some(r) = b.ratio {
                budget.ratio = r;
            }
            if let Some(m) = b.min_per_second {
                budget.min_per_second = m;
            }
            if let Some(w) = b.window {
                budget.window = w;
            }
            p.budget = Some(budget);
        }
    }
    if let Some(l) = &raw.limits {
        let lim = &mut p.limits;
        lim.max_connections = l.max_connections.unwrap_or(lim.max_connections);
        lim.max_pending = l.max_pending.unwrap_or(lim.max_pending);
        lim.max_requests = l.max_requests.unwrap_or(lim.max_requests);
        lim.max_retries = l.max_retries.unwrap_or(lim.max_retries);
    }
    if let Some(g) = raw.grpc_status_on_timeout {
        p.grpc_status_on_timeout = g.code();
    }
    if let Some(v) = raw.propagate_deadline {
        p.propagate_deadline = v;
    }
    if let Some(b) = raw.balancer {
        p.balancer = b;
    }
    match &raw.outlier {
        None => {}
        Some(OrNone::None) => p.outlier = None,
        Some(OrNone::Some(o)) => {
            let mut out = p.outlier.unwrap_or(crate::policy::Outlier {
                consecutive_gateway_failures: 5,
                base_ejection_time: Dur::from_millis(30_000),
                max_ejection_percent: 10,
            });
            if let Some(v) = o.consecutive_gateway_failures {
                out.consecutive_gateway_failures = v;
            }
            if let Some(v) = o.base_ejection_time {
                out.base_ejection_time = v;
            }
            if let Some(v) = o.max_ejection_percent {
                out.max_ejection_percent = v;
            }
            p.outlier = Some(out);
        }
    }
}

mod validate;
use validate::validate;

#[cfg(test)]
mod tests;
