//! Which rule a request takes: every (route, rule, match) that matches is ranked, and the best
//! wins, ties going to the one given first. The ranking is the Gateway API's, in order:
//!
//! 1. the route's hostname: most characters in a matching non-wildcard hostname, then most
//!    characters in a matching hostname (a route without hostnames matches any, ranking last);
//! 2. for HTTPRoute: an `Exact` path, then a `RegularExpression` path (the spec leaves its place
//!    to implementations; hopwise puts it above every prefix, so a pattern is not lost behind a
//!    catch-all `/`), then the longest `PathPrefix`; then a method match; then the most header
//!    matches; then the most query-parameter matches;
//!    for GRPCRoute: most characters in a matching service, then in a matching method (a
//!    `RegularExpression` counts none), then the most header matches;
//! 3. the route given first, then the rule, then the match.
//!
//! Paths are compared in hopwise's canonical form (`crate::path`); a path that has none matches
//! nothing. Decides only; what the rule then does is the caller's. This is the plain walk, the
//! reference; the proxy asks a [`super::Table`] (`table.rs`), which gives the same answer
//! without trying the rules a request's missing headers rule out.

use std::sync::LazyLock;

use super::matches::{GrpcMatch, GrpcMethodMatch, HeaderMatch, Match, PathMatch};
use super::request::Request;
use super::{Route, Rule};

/// A kind of match (HTTP's or gRPC's): whether it takes a request, and how specifically.
pub trait Matcher: Sized + 'static {
    /// Greater is more specific.
    type Score: Ord + Copy;
    /// `None` if the match does not take the request, else its rank. `path` is the request's
    /// canonical path.
    fn score(&self, request: &Request<'_>, path: &str) -> Option<Self::Score>;
    /// The rank the match has whenever it takes a request: `score`'s `Some`, which depends on
    /// the match alone (what `check` compares to prove a rule shadowed).
    fn rank(&self) -> Self::Score;
    /// What a rule without matches holds: the spec's default match.
    fn catch_all() -> &'static Self;
    /// The header matches, each of which must hold (what `Table` indexes by name).
    fn headers(&self) -> &[HeaderMatch];
}

/// The rule `request` takes among `routes`, and the route and match that gave it; `None` when
/// none does (the spec answers 404, or UNIMPLEMENTED for gRPC).
pub fn find<'r, M: Matcher>(
    routes: &'r [Route<M>],
    request: &Request<'_>,
) -> Option<(&'r Route<M>, &'r Rule<M>, &'r M)> {
    let path = crate::path::normalize(request.path).ok()?;
    let host = request.host();
    let mut best = Best::default();
    for route in routes {
        let Some(host_rank) = host_rank(route, host) else {
            continue;
        };
        for rule in &route.rules {
            let matches = if rule.matches.is_empty() {
                std::slice::from_ref(M::catch_all())
            } else {
                &rule.matches[..]
            };
            for m in matches {
                best.offer(host_rank, (route, rule, m), request, &path);
            }
        }
    }
    best.found
}

/// The best (route, rule, match) so far, and its rank: what `find` and `Table::find` keep as
/// they walk.
pub(super) struct Best<'r, M: Matcher> {
    pub(super) found: Option<(&'r Route<M>, &'r Rule<M>, &'r M)>,
    key: Option<((usize, usize), M::Score)>,
}

impl<M: Matcher> Default for Best<'_, M> {
    fn default() -> Self {
        Self {
            found: None,
            key: None,
        }
    }
}

impl<'r, M: Matcher> Best<'r, M> {
    /// `candidate` (its route of rank `host_rank`) scored against `request`, kept if it takes
    /// the request and ranks strictly higher: a tie stays with the one given first.
    pub(super) fn offer(
        &mut self,
        host_rank: (usize, usize),
        candidate: (&'r Route<M>, &'r Rule<M>, &'r M),
        request: &Request<'_>,
        path: &str,
    ) {
        let Some(score) = candidate.2.score(request, path) else {
            return;
        };
        let key = (host_rank, score);
        if self.key.is_none_or(|b| key > b) {
            self.key = Some(key);
            self.found = Some(candidate);
        }
    }
}

/// (characters of the matching non-wildcard hostname, characters of the matching hostname),
/// the best over the route's hostnames; `None` if the route has hostnames and none matches.
pub(super) fn host_rank<M>(route: &Route<M>, host: Option<&str>) -> Option<(usize, usize)> {
    if route.hostnames.is_empty() {
        return Some((0, 0));
    }
    let host = host?;
    route
        .hostnames
        .iter()
        .filter(|h| h.covers(host))
        .map(|h| {
            let len = h.as_str().len();
            (if h.is_wildcard() { 0 } else { len }, len)
        })
        .max()
}

/// How specific an HTTP path match is; the derived order is the precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathRank {
    /// Its length in characters.
    Prefix(usize),
    RegularExpression,
    Exact,
}

impl Matcher for Match {
    /// (path, method given, header matches, query matches).
    type Score = (PathRank, bool, usize, usize);

    fn score(&self, request: &Request<'_>, path: &str) -> Option<Self::Score> {
        if !self.path.takes(path) {
            return None;
        }
        if let Some(m) = self.method
            && m.as_str() != request.method
        {
            return None;
        }
        if !headers_hold(&self.headers, request) {
            return None;
        }
        let query_hold = self.query_params.iter().all(|q| {
            request
                .query_param(&q.name)
                .is_some_and(|v| q.value.is_match(&v))
        });
        if !query_hold {
            return None;
        }
        Some(self.rank())
    }

    fn rank(&self) -> Self::Score {
        let path = match &self.path {
            PathMatch::Exact(_) => PathRank::Exact,
            PathMatch::PathPrefix(p) => PathRank::Prefix(p.as_str().len()),
            PathMatch::RegularExpression(_) => PathRank::RegularExpression,
        };
        (
            path,
            self.method.is_some(),
            self.headers.len(),
            self.query_params.len(),
        )
    }

    fn catch_all() -> &'static Self {
        static DEFAULT: LazyLock<Match> = LazyLock::new(Match::default);
        &DEFAULT
    }

    fn headers(&self) -> &[HeaderMatch] {
        &self.headers
    }
}

impl PathMatch {
    /// Whether the match takes the canonical `path`.
    pub fn takes(&self, path: &str) -> bool {
        match self {
            Self::Exact(p) => p.as_str() == path,
            Self::PathPrefix(p) => under_prefix(path, p.as_str()),
            Self::RegularExpression(p) => p.matches(path),
        }
    }
}

/// Whether `path` is `prefix` or below it, on a segment boundary (`prefix` has no trailing
/// `/`, or is `/`).
pub(super) fn under_prefix(path: &str, prefix: &str) -> bool {
    prefix == "/"
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn headers_hold(headers: &[HeaderMatch], request: &Request<'_>) -> bool {
    headers.iter().all(|h| {
        request
            .headers
            .any_value(h.name.as_str(), &mut |v| h.value.is_match(v))
    })
}

impl Matcher for GrpcMatch {
    /// (service characters, method characters, header matches).
    type Score = (usize, usize, usize);

    fn score(&self, request: &Request<'_>, path: &str) -> Option<Self::Score> {
        if let Some(m) = &self.method {
            // `/pkg.Service/Method`, and nothing else.
            let (service, method) = path.strip_prefix('/')?.split_once('/')?;
            if method.contains('/') || !grpc_method(m, service, method) {
                return None;
            }
        }
        if !headers_hold(&self.headers, request) {
            return None;
        }
        Some(self.rank())
    }

    fn rank(&self) -> Self::Score {
        let (service_len, method_len) = match &self.method {
            // A `RegularExpression` counts no characters: the spec does not say how to.
            None | Some(GrpcMethodMatch::RegularExpression { .. }) => (0, 0),
            Some(GrpcMethodMatch::Exact { service, method }) => (
                service.as_ref().map_or(0, String::len),
                method.as_ref().map_or(0, String::len),
            ),
        };
        (service_len, method_len, self.headers.len())
    }

    fn catch_all() -> &'static Self {
        static DEFAULT: LazyLock<GrpcMatch> = LazyLock::new(GrpcMatch::default);
        &DEFAULT
    }

    fn headers(&self) -> &[HeaderMatch] {
        &self.headers
    }
}

/// Whether `m` takes the service and method of a request.
fn grpc_method(m: &GrpcMethodMatch, service: &str, method: &str) -> bool {
    match m {
        GrpcMethodMatch::Exact {
            service: s,
            method: me,
        } => s.as_deref().is_none_or(|s| s == service) && me.as_deref().is_none_or(|m| m == method),
        GrpcMethodMatch::RegularExpression {
            service: s,
            method: me,
        } => {
            s.as_ref().is_none_or(|p| p.matches(service))
                && me.as_ref().is_none_or(|p| p.matches(method))
        }
    }
}
