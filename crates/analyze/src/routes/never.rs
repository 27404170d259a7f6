//! `regex-never-matches`: a route's regular expression that can never match, so the match that
//! holds it never takes a request — and when every match of its rule is such, the rule never
//! does. Two reasons, both proved by `model`'s `Pattern::never_matches_starting` on the
//! pattern's automaton, never guessed:
//!
//! - no value at all matches it (`[^\s\S]`, `$a`: a character after the end, `a\bb`: a word
//!   boundary between two letters) — a path's, a header's, a query parameter's, a gRPC service's
//!   or method's pattern;
//! - a path's pattern that no path matches: the proxy matches the whole canonical path, which
//!   starts with `/` (`api/.*`, `^api/.*`, `\w+`). The two paths that do not — `*` (`OPTIONS *`)
//!   and the empty one (CONNECT) — are asked of the pattern directly, so `\*` is not flagged.
//!
//! Pure: the mesh in, one finding per pattern out.

use hopwise_model::Mesh;
use hopwise_model::route::{
    GrpcMatch, GrpcMethodMatch, Match, PathMatch, Pattern, Route, ServiceRoutes, StringMatch,
};
use indexmap::IndexMap;

use crate::findings::{Finding, Severity};

/// Every pattern of every service's routes that can never match, as a warning (like a
/// shadowed rule: the rule or match is dead, the file still works).
pub fn never_matching(mesh: &Mesh) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, service) in &mesh.services {
        let dead = match &service.routes {
            ServiceRoutes::Http(r) => dead_patterns(r),
            ServiceRoutes::Grpc(r) => dead_patterns(r),
        };
        out.extend(dead.into_iter().map(|d| finding(name, d)));
    }
    out
}

/// Why a pattern can never match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// No value at all matches it.
    Nothing,
    /// It is a path's, and no path (`/…`, `*` or empty) matches it.
    NoPath,
}

/// One pattern that can never match, and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dead<'r> {
    pub route: &'r str,
    pub rule: usize,
    pub at_match: usize,
    /// Its field under the match (`path.value`, `headers[0].value`, `method.service`).
    pub field: String,
    pub pattern: &'r Pattern,
    pub why: Why,
    /// Every match of its rule holds such a pattern: the rule never takes a request.
    pub rule_dead: bool,
}

/// The patterns a kind of match holds, each with its field under the match and whether it
/// is a path's.
trait Patterns {
    fn patterns(&self) -> Vec<(String, &Pattern, bool)>;
}

impl Patterns for Match {
    fn patterns(&self) -> Vec<(String, &Pattern, bool)> {
        let mut out = Vec::new();
        if let PathMatch::RegularExpression(p) = &self.path {
            out.push(("path.value".to_owned(), p, true));
        }
        let headers = self.headers.iter().map(|h| &h.value);
        out.extend(values("headers", headers));
        out.extend(values(
            "query_params",
            self.query_params.iter().map(|q| &q.value),
        ));
        out
    }
}

impl Patterns for GrpcMatch {
    fn patterns(&self) -> Vec<(String, &Pattern, bool)> {
        let mut out = Vec::new();
        if let Some(GrpcMethodMatch::RegularExpression { service, method }) = &self.method {
            let sides = [("method.service", service), ("method.method", method)];
            for (field, p) in sides {
                out.extend(p.as_ref().map(|p| (field.to_owned(), p, false)));
            }
        }
        out.extend(values("headers", self.headers.iter().map(|h| &h.value)));
        out
    }
}

/// `{list}[i].value` for each value compared by a pattern.
fn values<'m>(
    list: &str,
    values: impl Iterator<Item = &'m StringMatch>,
) -> Vec<(String, &'m Pattern, bool)> {
    (values.enumerate())
        .filter_map(|(i, v)| match v {
            StringMatch::RegularExpression(p) => Some((format!("{list}[{i}].value"), p, false)),
            StringMatch::Exact(_) => None,
        })
        .collect()
}

/// Why `p` can never match, if it is proved.
fn why(p: &Pattern, path: bool) -> Option<Why> {
    if p.never_matches_starting("") {
        Some(Why::Nothing)
    } else if path && p.never_matches_starting("/") && !p.matches("*") && !p.matches("") {
        Some(Why::NoPath)
    } else {
        None
    }
}

/// Every pattern of `routes` that can never match, in the file's order.
fn dead_patterns<M: Patterns>(routes: &IndexMap<String, Route<M>>) -> Vec<Dead<'_>> {
    let mut out = Vec::new();
    for (route, r) in routes {
        for (rule, u) in r.rules.iter().enumerate() {
            let first = out.len();
            let mut dead_matches = 0;
            for (at_match, m) in u.matches.iter().enumerate() {
                let before = out.len();
                for (field, pattern, path) in m.patterns() {
                    if let Some(why) = why(pattern, path) {
                        out.push(Dead {
                            route,
                            rule,
                            at_match,
                            field,
                            pattern,
                            why,
                            rule_dead: false, // known once all its matches are seen
                        });
                    }
                }
                dead_matches += usize::from(out.len() > before);
            }
            // A rule without matches takes every request; with some, it needs one alive.
            let rule_dead = !u.matches.is_empty() && dead_matches == u.matches.len();
            out[first..]
                .iter_mut()
                .for_each(|d| d.rule_dead = rule_dead);
        }
    }
    out
}

fn finding(service: &str, d: Dead<'_>) -> Finding {
    let rule = format!("services.{service}.routes.{}.rules[{}]", d.route, d.rule);
    let path = format!("{rule}.matches[{}].{}", d.at_match, d.field);
    let (why, fix) = match d.why {
        Why::Nothing => (
            "no value matches it".to_owned(),
            "rewrite the pattern so that it can match (or remove the match)",
        ),
        Why::NoPath => (
            "no path matches it: the proxy matches the whole path, which starts with `/`"
                .to_owned(),
            "start the pattern with `/` (`/api/.*`), or remove the match",
        ),
    };
    let then = if d.rule_dead {
        format!("rule {rule} can never take a request")
    } else {
        format!("matches[{}] of {rule} never takes a request", d.at_match)
    };
    Finding {
        code: "regex-never-matches",
        severity: Severity::Warning,
        subject: format!("{service} routes.{}.rules[{}]", d.route, d.rule),
        message: format!(
            "the regular expression `{}` at {path} can never match — {why} — so {then}",
            d.pattern.as_str()
        ),
        path,
        fix: fix.to_owned(),
    }
}
