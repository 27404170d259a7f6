//! `shadowed-rule`: a rule that can never take a request, because for each of its matches
//! some match of another rule takes every request it would take, and wins it by `find`'s
//! precedence — a higher rank, or an equal one given first. Routes compete only when their
//! hostnames are the same names (so the host ranks them equally for every request).
//!
//! Conservative: a rule is called shadowed only when that is proved from the matches alone —
//! paths by prefix, equality or a pattern that takes an exact path; methods; headers and query
//! parameters compared with the same value or a pattern that takes it. Regular expressions are
//! compared by their text only (equal patterns), never by what they take. What is not proved
//! is not claimed. A property test (`tests.rs`) holds it: no request ever takes a rule called
//! shadowed.

use hopwise_model::route::{
    GrpcMatch, GrpcMethodMatch, HeaderMatch, Match, Matcher, PathMatch, QueryMatch, Route,
    ServiceRoutes, StringMatch,
};
use hopwise_model::{Mesh, Service};
use indexmap::IndexMap;

use crate::findings::{Finding, Severity};

/// Every rule of every service's routes that can never take a request, as a warning.
pub fn shadowed(mesh: &Mesh) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, service) in &mesh.services {
        findings(name, service, &mut out);
    }
    out
}

fn findings(name: &str, service: &Service, out: &mut Vec<Finding>) {
    let pairs = match &service.routes {
        ServiceRoutes::Http(r) => shadowed_rules(r),
        ServiceRoutes::Grpc(r) => shadowed_rules(r),
    };
    for ((route, rule), (by_route, by_rule)) in pairs {
        let at = |r: &str, u: usize| format!("services.{name}.routes.{r}.rules[{u}]");
        out.push(Finding {
            code: "shadowed-rule",
            severity: Severity::Warning,
            subject: format!("{name} routes.{route}.rules[{rule}]"),
            path: at(route, rule),
            message: format!(
                "rule {} can never take a request: {} takes every request it would, at equal or higher precedence",
                at(route, rule),
                at(by_route, by_rule)
            ),
            fix: "remove the rule, or make it more specific than the one before it (a longer path, a method, another header)".to_owned(),
        });
    }
}

/// A rule, by its route's name and its index.
pub(super) type At<'r> = (&'r str, usize);

/// Each shadowed rule, with the first rule found to take one of its matches' requests.
pub(super) fn shadowed_rules<M: Covers>(
    routes: &IndexMap<String, Route<M>>,
) -> Vec<(At<'_>, At<'_>)> {
    // Every (route, rule, match) in `find`'s order; a rule without matches holds the default.
    let mut entries = Vec::new();
    for (r, (name, route)) in routes.iter().enumerate() {
        for (u, rule) in route.rules.iter().enumerate() {
            let matches = if rule.matches.is_empty() {
                std::slice::from_ref(M::catch_all())
            } else {
                &rule.matches[..]
            };
            for m in matches {
                entries.push(((name.as_str(), u), r, route, m));
            }
        }
    }
    let mut out = Vec::new();
    for (i, &(at, _, route, _)) in entries.iter().enumerate() {
        if i > 0 && entries[i - 1].0 == at {
            continue; // a rule is judged once, at its first match
        }
        let own: Vec<usize> = (i..entries.len())
            .take_while(|&k| entries[k].0 == at)
            .collect();
        let mut by = None;
        let all = own.iter().all(|&k| {
            let (_, _, _, m) = entries[k];
            let winner = entries
                .iter()
                .enumerate()
                .find(|&(w, &(wat, _, wroute, wm))| {
                    wat != at
                        && same_hosts(wroute, route)
                        && wm.covers(m)
                        && (wm.rank() > m.rank() || wm.rank() == m.rank() && w < k)
                });
            if let Some((_, &(wat, ..))) = winner {
                by.get_or_insert(wat);
            }
            winner.is_some()
        });
        if let (true, Some(by)) = (all, by) {
            out.push((at, by));
        }
    }
    out
}

/// Whether two routes name the same hostnames (so every request's host ranks them alike).
fn same_hosts<M>(a: &Route<M>, b: &Route<M>) -> bool {
    std::ptr::eq(a, b) || names(a) == names(b)
}

/// A route's hostnames, sorted, each once.
fn names<M>(r: &Route<M>) -> Vec<&str> {
    let mut v: Vec<&str> = r.hostnames.iter().map(|h| h.as_str()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A match that can be proved to take every request another takes.
pub(super) trait Covers: Matcher {
    /// `true` only if every request `other` takes, `self` takes too.
    fn covers(&self, other: &Self) -> bool;
}

impl Covers for Match {
    fn covers(&self, other: &Self) -> bool {
        path_covers(&self.path, &other.path)
            && self.method.is_none_or(|m| other.method == Some(m))
            && headers_cover(&self.headers, &other.headers)
            && self.query_params.iter().all(|q| {
                other
                    .query_params
                    .iter()
                    .any(|o: &QueryMatch| o.name == q.name && value_covers(&q.value, &o.value))
            })
    }
}

impl Covers for GrpcMatch {
    fn covers(&self, other: &Self) -> bool {
        let method = match (&self.method, &other.method) {
            (None, _) => true,
            (Some(_), None) => false,
            (
                Some(GrpcMethodMatch::Exact { service, method }),
                Some(GrpcMethodMatch::Exact {
                    service: s,
                    method: m,
                }),
            ) => {
                service.as_ref().is_none_or(|x| s.as_ref() == Some(x))
                    && method.as_ref().is_none_or(|x| m.as_ref() == Some(x))
            }
            (Some(a), Some(b)) => a == b,
        };
        method && headers_cover(&self.headers, &other.headers)
    }
}

/// Every path `b` takes, `a` takes.
fn path_covers(a: &PathMatch, b: &PathMatch) -> bool {
    match (a, b) {
        (PathMatch::PathPrefix(p), PathMatch::RegularExpression(_)) => p.as_str() == "/",
        // A prefix's own path is canonical; every path under it is under `a` if it is.
        (PathMatch::PathPrefix(_), PathMatch::PathPrefix(q) | PathMatch::Exact(q)) => {
            a.takes(q.as_str())
        }
        (PathMatch::RegularExpression(_), PathMatch::Exact(e)) => a.takes(e.as_str()),
        (PathMatch::Exact(_), PathMatch::Exact(_))
        | (PathMatch::RegularExpression(_), PathMatch::RegularExpression(_)) => a == b,
        _ => false,
    }
}

/// Every header `a` requires is required by `b` with a value `a`'s comparison takes.
fn headers_cover(a: &[HeaderMatch], b: &[HeaderMatch]) -> bool {
    a.iter().all(|h| {
        b.iter()
            .any(|o| o.name == h.name && value_covers(&h.value, &o.value))
    })
}

/// Every value `b` takes, `a` takes.
fn value_covers(a: &StringMatch, b: &StringMatch) -> bool {
    match (a, b) {
        (StringMatch::Exact(x), StringMatch::Exact(y)) => x == y,
        (StringMatch::RegularExpression(p), StringMatch::Exact(y)) => p.matches(y.as_str()),
        (StringMatch::RegularExpression(p), StringMatch::RegularExpression(q)) => p == q,
        (StringMatch::Exact(_), StringMatch::RegularExpression(_)) => false,
    }
}
