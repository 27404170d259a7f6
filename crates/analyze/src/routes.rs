//! A service's own routes (`services.<name>.routes`, docs/routes.md) as `check` reads them:
//! which route, rule and backends a given request takes ([`take`], `hopwise check --request`),
//! and which rules can never take one because an earlier rule of higher or equal precedence
//! always takes their requests first ([`shadowed`], `shadow.rs`: `shadowed-rule` findings),
//! and which regular expressions can never match ([`never_matching`], `never.rs`:
//! `regex-never-matches` findings).
//!
//! The rule is `model`'s `find`, the walk the proxy's `Table::find` is held to, so `check`
//! answers what the proxy does. Pure: a request written on a line ([`Probe`], `probe.rs`) in,
//! a value out; printing is the binary's (`render::routing`).

mod never;
#[cfg(test)]
mod never_tests;
mod policy;
#[cfg(test)]
mod policy_tests;
pub mod probe;
mod reach;
mod shadow;

use std::collections::BTreeMap;

use hopwise_model::Mesh;
use hopwise_model::route::{self, Backend, Filter, Matcher, Route, ServiceRoutes};
use indexmap::IndexMap;
use serde::Serialize;

pub use never::never_matching;
pub use policy::under_rules;
pub use probe::{Probe, ProbeError};
pub use reach::unreachable;
pub use shadow::shadowed;

/// What happens to a request sent to a service.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Routing {
    /// The service has no routes: the request goes to the service itself, unchanged.
    NoRoutes { service: String },
    /// No rule takes it: the caller's proxy answers 404 (gRPC: UNIMPLEMENTED), `no-route`.
    NoMatch { service: String },
    /// A rule takes it.
    Rule(Taken),
}

/// The rule a request takes, and where the rule sends it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Taken {
    pub service: String,
    pub route: String,
    /// The rule's place in its route, counted as the mesh file's paths count (`rules[0]`).
    pub rule: usize,
    /// Its `name`, if it has one.
    pub rule_name: Option<String>,
    /// Where the rule is written (`services.b.routes.r.rules[0]`).
    pub path: String,
    /// Its filters' `type`s, in order.
    pub filters: Vec<&'static str>,
    /// A `RequestRedirect`'s status: the caller's proxy answers it, and no backend is called.
    pub redirect: Option<u16>,
    /// Its backends by weight; none with weight: the proxy answers 500 (`no-backend`).
    pub backends: Vec<Share>,
}

/// One backend of a rule and its part of the rule's requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Share {
    pub service: String,
    /// The labels its copies must carry; empty: every copy.
    pub subset: BTreeMap<String, String>,
    pub weight: u32,
    /// Per cent of the rule's requests (weight over the sum of weights; 0 when all are 0).
    pub percent: f64,
}

/// Why a request cannot be routed at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    #[error("the request names no host: write `GET pricing/path` or add `-H host:pricing`")]
    NoHost,
    #[error(
        "`{0}` names no service of the mesh (a service's name, with a port or `.<trust domain>`)"
    )]
    UnknownService(String),
}

/// What happens to `probe`, sent to the service its host names (`pricing`, `pricing:80`,
/// `pricing.<trust domain>`, as the proxy reads a `Host`).
pub fn take(mesh: &Mesh, probe: &Probe) -> Result<Routing, RoutingError> {
    let authority = probe.authority.as_deref().ok_or(RoutingError::NoHost)?;
    let service = service_of(mesh, authority)
        .ok_or_else(|| RoutingError::UnknownService(authority.to_owned()))?;
    let routes = &mesh.services[service].routes;
    let service = service.to_owned();
    Ok(match routes {
        _ if routes.is_empty() => Routing::NoRoutes { service },
        ServiceRoutes::Http(r) => take_in(service, r, probe),
        ServiceRoutes::Grpc(r) => take_in(service, r, probe),
    })
}

fn take_in<M: Matcher + Clone>(
    service: String,
    routes: &IndexMap<String, Route<M>>,
    probe: &Probe,
) -> Routing {
    let list: Vec<Route<M>> = routes.values().cloned().collect();
    let Some((found, rule, _)) = route::find(&list, &probe.view()) else {
        return Routing::NoMatch { service };
    };
    let r = list.iter().position(|x| std::ptr::eq(x, found));
    let u = found.rules.iter().position(|x| std::ptr::eq(x, rule));
    let (Some((name, _)), Some(u)) = (r.and_then(|r| routes.get_index(r)), u) else {
        return Routing::NoMatch { service };
    };
    let backends = shares(&rule.backends);
    let redirect = rule.filters.iter().find_map(|f| match f {
        Filter::RequestRedirect(r) => Some(r.status.code()),
        _ => None,
    });
    Routing::Rule(Taken {
        path: format!("services.{service}.routes.{name}.rules[{u}]"),
        service,
        route: name.clone(),
        rule: u,
        rule_name: rule.name.clone(),
        filters: rule.filters.iter().map(Filter::kind).collect(),
        redirect,
        backends,
    })
}

/// A rule's backends and their parts of its requests (weight over the sum of weights).
pub(crate) fn shares(backends: &[Backend]) -> Vec<Share> {
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    (backends.iter())
        .map(|b| Share {
            service: b.target.service.clone(),
            subset: b.target.subset.clone(),
            weight: b.weight,
            percent: if total == 0 {
                0.0
            } else {
                100.0 * f64::from(b.weight) / total as f64
            },
        })
        .collect()
}

/// The service an authority names, as the proxy reads a `Host`: the name, with or without a
/// port or a final `.`, or the name followed by `.<trust domain>`; any case.
pub fn service_of<'m>(mesh: &'m Mesh, authority: &str) -> Option<&'m str> {
    let host = authority.to_ascii_lowercase();
    let name = match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => &host,
    };
    let name = name.trim_end_matches('.');
    let service = match name.split_once('.') {
        None => name,
        Some((first, rest)) if rest == mesh.trust_domain => first,
        Some(_) => return None,
    };
    mesh.services
        .get_key_value(service)
        .map(|(k, _)| k.as_str())
}

#[cfg(test)]
mod tests;
