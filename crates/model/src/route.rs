//! Routes as a layer of their own, in the Gateway API's words (HTTPRoute, GRPCRoute): a route
//! has hostnames and rules; a rule has matches, filters and weighted backends. This module owns
//! the types and the two decisions made on them — which rule a request takes ([`find`], with
//! the spec's precedence) and which backend of that rule serves it ([`pick_backend`], from a
//! draw the caller makes) — plus the checks a route must pass ([`check`]). [`Table`] holds a
//! service's routes with an index built once, and finds what `find` finds, cheaper.
//!
//! Pure and plain: no I/O, no clock, no randomness, nothing of the proxy. Values that can be
//! wrong on their own (header names and values, hostnames, paths, regular expressions) are
//! checked when they are built, so a `Route` holds nothing a request could smuggle through;
//! what depends on several fields at once is [`check`]'s. Read from the mesh file
//! (`services.<name>.routes`, `resolve.rs`); the proxy routes by them (its `route` module,
//! docs/routes.md).

mod backend;
mod check;
mod filter;
mod find;
mod matches;
mod pattern;
mod policy;
mod request;
mod resolve;
mod resolve_match;
mod table;
mod values;

pub use backend::{Backend, Pick, Target, pick_backend};
pub use check::{Checked, Problem, check};
pub use filter::{
    Filter, HeaderModifier, Mirror, PathModifier, Redirect, RedirectStatus, Rewrite, Scheme,
};
pub use find::{Matcher, PathRank, find};
pub use matches::{
    GrpcMatch, GrpcMethodMatch, HeaderMatch, Match, Method, PathMatch, QueryMatch, StringMatch,
};
pub use pattern::Pattern;
pub use policy::{RulePolicy, RuleRetry};
pub use request::{Headers, Request};
pub use resolve::ServiceRoutes;
pub(crate) use resolve::resolve;
pub use table::{INDEXED, Table};
pub use values::{HeaderName, HeaderValue, Hostname, RoutePath};

/// A set of rules for the requests to some hostnames: an HTTPRoute (`Route<Match>`, the
/// default) or a GRPCRoute ([`GrpcRoute`]). Rules of several routes compete by the spec's
/// precedence; a tie goes to the route given first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Route<M = Match> {
    /// The `Host` (`:authority`) names this route answers; empty: every name.
    pub hostnames: Vec<Hostname>,
    pub rules: Vec<Rule<M>>,
}

/// A GRPCRoute: the same shape, matched on the gRPC service and method.
pub type GrpcRoute = Route<GrpcMatch>;

/// One rule: what requests it takes (any of `matches`; none means every request), what it does
/// to them (`filters`, in order) and where it sends them (`backends`, by weight).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rule<M = Match> {
    /// The rule's name (`sectionName`), unique within its route.
    pub name: Option<String>,
    pub matches: Vec<M>,
    pub filters: Vec<Filter>,
    pub backends: Vec<Backend>,
    /// HTTPRoute's `timeouts` and `retry`, over the caller's policy (none: the call's alone).
    pub policy: Option<RulePolicy>,
}

#[cfg(test)]
mod tests;
