//! The route layer on the outbound side: a callee's own routes (`services.<name>.routes`, the
//! Gateway API's HTTPRoute or GRPCRoute, GAMMA: the callee the `Host` names is their parent) as
//! each cluster holds them ([`RouteTable`]), the routing decision made from plain data
//! ([`decide`], in `decide.rs`), and what a decision does to a request and its answer
//! (`apply.rs`: header edits, the URL rewrite, the redirect's local reply).
//!
//! A cluster without routes has no table, and a request to it never comes here: the routed path
//! costs nothing where no route is written. Nothing here picks a copy, sends or retries (that is
//! [`crate::attempts`]'), or records (the lifecycle in [`crate::outbound`] does).

mod apply;
mod decide;

use hopwise_model::route::{
    Filter, GrpcMatch, Headers, Match, Matcher, Request, ServiceRoutes, Table, Target,
};
use http::HeaderMap;

pub(crate) use apply::{REDIRECT, redirect, request as apply_request, response as apply_response};
pub use decide::{Decision, Forward, UrlRewrite, decide};

/// A service's routes, in the order written, with their names: what [`decide`] reads. Built
/// once per configuration, when the routes are not empty.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteTable {
    /// The routes' names, by the index of the route in `routes`.
    names: Vec<String>,
    /// Where each route's rules start among every rule of the table, by route index.
    offsets: Vec<usize>,
    routes: Routes,
}

/// HTTPRoutes for an HTTP service, GRPCRoutes for a gRPC one, each with `model`'s index (the
/// header names the rules require, looked up once per request: `Table::find`).
#[derive(Debug, Clone, PartialEq)]
enum Routes {
    Http(Table<Match>),
    Grpc(Table<GrpcMatch>),
}

impl RouteTable {
    /// The table of `routes`; `None` when there are none (the service is called as before).
    pub fn of(routes: &ServiceRoutes) -> Option<Self> {
        if routes.is_empty() {
            return None;
        }
        let (names, routes) = match routes {
            ServiceRoutes::Http(r) => (
                r.keys().cloned().collect(),
                Routes::Http(Table::new(r.values().cloned().collect())),
            ),
            ServiceRoutes::Grpc(r) => (
                r.keys().cloned().collect(),
                Routes::Grpc(Table::new(r.values().cloned().collect())),
            ),
        };
        let counts: Vec<usize> = match &routes {
            Routes::Http(t) => t.routes().iter().map(|r| r.rules.len()).collect(),
            Routes::Grpc(t) => t.routes().iter().map(|r| r.rules.len()).collect(),
        };
        let offsets = (counts.iter())
            .scan(0, |at, n| {
                let start = *at;
                *at += n;
                Some(start)
            })
            .collect();
        Some(Self {
            names,
            offsets,
            routes,
        })
    }

    /// Every rule of the table, in order (a decision's `index` is a place here): its route's
    /// name and its own — its `name`, or `rules[i]` for one without.
    pub fn rules(&self) -> Vec<(&str, String)> {
        fn of<'t, M: Matcher>(names: &'t [String], table: &'t Table<M>) -> Vec<(&'t str, String)> {
            (table.routes().iter().zip(names))
                .flat_map(|(route, name)| {
                    (route.rules.iter().enumerate()).map(move |(i, rule)| {
                        let label = rule.name.clone().unwrap_or_else(|| format!("rules[{i}]"));
                        (name.as_str(), label)
                    })
                })
                .collect()
        }
        match &self.routes {
            Routes::Http(t) => of(&self.names, t),
            Routes::Grpc(t) => of(&self.names, t),
        }
    }

    /// The routes' names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Every backend and mirror its rules send to (with repeats): the label subsets a
    /// configuration builds a view of copies for, once ([`crate::cluster::ClusterShared`]).
    pub fn targets(&self) -> Box<dyn Iterator<Item = &Target> + '_> {
        fn of<M: Matcher>(table: &Table<M>) -> impl Iterator<Item = &Target> {
            let rules = table.routes().iter().flat_map(|r| &r.rules);
            rules.flat_map(|rule| {
                let mirrors = rule.filters.iter().filter_map(|f| match f {
                    Filter::RequestMirror(m) => Some(&m.target),
                    _ => None,
                });
                rule.backends.iter().map(|b| &b.target).chain(mirrors)
            })
        }
        match &self.routes {
            Routes::Http(t) => Box::new(of(t)),
            Routes::Grpc(t) => Box::new(of(t)),
        }
    }
}

/// A request's header map as routing asks it, lent without copying.
#[derive(Debug)]
pub struct HeaderView<'a>(pub &'a HeaderMap);

impl Headers for HeaderView<'_> {
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&str) -> bool) -> bool {
        let mut test = |v: &http::HeaderValue| v.to_str().is_ok_and(&mut *test);
        // A lookup by `&str` parses and hashes the name (~270 instructions, callgrind), once per
        // header match of every rule tried; most requests carry few headers, and comparing
        // their names (lower case, as `name` is) costs less than that.
        if self.0.len() <= SCAN {
            return self.0.iter().any(|(n, v)| n.as_str() == name && test(v));
        }
        self.0.get_all(name).iter().any(test)
    }
}

/// Up to this many header values, a header is looked for by comparing names in turn.
const SCAN: usize = 16;

/// What routing sees of `req`: its method, authority (the absolute URI's, else `Host`), path
/// (already canonical: the lifecycle made it so on arrival), query and headers.
pub fn view<'a, B>(req: &'a http::Request<B>, headers: &'a HeaderView<'a>) -> Request<'a> {
    Request {
        method: req.method().as_str(),
        authority: crate::headers::host_of(req),
        path: req.uri().path(),
        query: req.uri().query(),
        headers,
    }
}

#[cfg(test)]
mod tests;
