//! What the translators produce and the writer consumes: per destination host, the routes with
//! the policy each writes, and the caps and ejection the destination rule (or its absence)
//! gives — every value beside where it was written ([`At`]), every absence beside the object
//! that would have held it, so a finding about a default still names a place.

use hopwise_model::{Dur, Protocol};
use indexmap::IndexMap;
use serde::Serialize;

use crate::node::{At, Ctx};
use hopwise_model::yaml::Node;

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Field<T> {
    pub value: T,
    pub at: At,
}

/// Whose configuration it is: it decides the defaults of what is absent (the model's presets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    Istio,
    Linkerd,
}

impl Flavor {
    pub fn preset(self) -> &'static str {
        match self {
            Flavor::Istio => "istio",
            Flavor::Linkerd => "linkerd",
        }
    }
}

/// A retry budget as Linkerd writes one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Budget {
    pub ratio: Option<f64>,
    pub min_per_second: Option<u64>,
    pub window: Option<Dur>,
}

/// Outlier ejection as a destination rule writes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outlier {
    pub consecutive: Option<u64>,
    pub base_ejection_time: Option<Dur>,
    pub max_ejection_percent: Option<u64>,
}

/// One route to a host: how requests are matched, and the policy its object writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    /// The route's own name, if it has one.
    pub name: Option<String>,
    /// A path prefix (an exact path counts as its own prefix).
    pub path: Option<String>,
    pub method: Option<String>,
    /// `Some(None)`: switched off (`0s`).
    pub timeout: Option<Field<Option<Dur>>>,
    pub per_try_timeout: Option<Field<Option<Dur>>>,
    pub retry_count: Option<Field<u64>>,
    /// hopwise's (Envoy's) condition names.
    pub retry_on: Option<Field<Vec<String>>>,
    pub status_codes: Option<Field<Vec<u16>>>,
    pub budget: Option<Field<Budget>>,
    pub backoff_base: Option<Field<Dur>>,
    /// Retry what may have been processed only when the call is safe to repeat (a fix's; no
    /// mesh here writes it).
    pub only_if_safe: Option<Field<bool>>,
    /// Where the route stands: what a finding about a field it leaves out points at.
    pub holder: At,
    /// The subset of the host all its traffic goes to, if one.
    pub subset: Option<String>,
}

impl Route {
    pub fn new(holder: At) -> Route {
        Route {
            name: None,
            path: None,
            method: None,
            timeout: None,
            per_try_timeout: None,
            retry_count: None,
            retry_on: None,
            status_codes: None,
            budget: None,
            backoff_base: None,
            only_if_safe: None,
            holder,
            subset: None,
        }
    }
}

/// The caps, connect timeout and ejection toward one host (an Istio DestinationRule).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Destination {
    pub max_connections: Option<Field<u64>>,
    pub max_pending: Option<Field<u64>>,
    pub max_requests: Option<Field<u64>>,
    pub max_retries: Option<Field<u64>>,
    pub connect_timeout: Option<Field<Dur>>,
    pub outlier: Option<Field<Outlier>>,
    pub holder: At,
}

impl Destination {
    pub fn new(holder: At) -> Destination {
        Destination {
            max_connections: None,
            max_pending: None,
            max_requests: None,
            max_retries: None,
            connect_timeout: None,
            outlier: None,
            holder,
        }
    }
}

/// Everything said about one host (a service, by [`crate::names::key`]: `reviews.bookinfo`).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Host {
    /// What applies to every route of the host (a Service's Linkerd annotations).
    pub base: Option<Route>,
    /// The routes, in the order their objects give them; empty: the mesh's defaults.
    pub routes: Vec<Route>,
    pub destination: Option<Destination>,
    /// Subsets' own destination settings, by subset name.
    pub subsets: IndexMap<String, Destination>,
    pub protocol: Option<Field<Protocol>>,
}

/// An object read but not translated, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub at: At,
    pub why: String,
}

/// The translation of every object.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Translation {
    pub hosts: IndexMap<String, Host>,
    /// The mesh-wide default route policy (Istio's `meshConfig.defaultHttpRetryPolicy`).
    pub mesh_default: Option<Route>,
    /// Objects translated, as `kind/name (file:line)`.
    pub read: Vec<At>,
    pub skipped: Vec<Skipped>,
    /// The flavors whose objects were seen.
    pub seen: Vec<Flavor>,
}

impl Translation {
    pub fn host(&mut self, name: &str) -> &mut Host {
        self.hosts.entry(name.to_owned()).or_default()
    }

    pub fn saw(&mut self, flavor: Flavor) {
        if !self.seen.contains(&flavor) {
            self.seen.push(flavor);
        }
    }
}

/// A duration where `0s` means unset (a back-off, a connect timeout): `None` for zero, and with
/// a problem when it is not a duration.
pub fn nonzero(cx: &mut Ctx, node: &Node, field: &str) -> Option<Field<Dur>> {
    let d = cx.duration(node, field).filter(|d| !d.get().is_zero())?;
    Some(Field {
        value: d,
        at: cx.at(node, field),
    })
}

/// A timeout field as every mesh here writes one: a duration, `0s` switching it off (Istio,
/// the Gateway API, Linkerd alike); `None` with a problem when it is not a duration.
pub fn timeout(cx: &mut Ctx, node: &Node, field: &str) -> Option<Field<Option<Dur>>> {
    let d = cx.duration(node, field)?;
    Some(Field {
        value: (!d.get().is_zero()).then_some(d),
        at: cx.at(node, field),
    })
}
