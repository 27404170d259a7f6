//! A service's routes with an index built once, so that [`Table::find`] gives what [`find`]
//! gives at a fraction of the cost on every request. `find` tries every (route, rule, match)
//! in turn, and each of a rule's header matches looks for its header among the request's; with
//! fifty rules on headers that is fifty lookups and fifty trait calls a request (~160
//! instructions a rule, docs/performance.md). The table lists, once, every header name some
//! match requires (at most [`INDEXED`] of them), looks each up once per request, and skips
//! without a second look every match that requires a header the request does not carry — no
//! value of an absent header can hold, whatever the match compares it with. The matches that
//! remain are scored by the same [`Matcher::score`] in the same order, so the precedence and
//! the ties are `find`'s exactly (a property test holds the two together, `tests/table.rs`).
//!
//! Pure and plain, like `find.rs`: no I/O, no allocation per request.

use super::find::{Best, Matcher, host_rank};
use super::request::Request;
use super::values::HeaderName;
use super::{Route, Rule};

#[cfg(doc)]
use super::find;

/// At most this many header names are indexed (one bit each); a match on a name past them is
/// still compared, only not skipped early.
pub const INDEXED: usize = 64;

/// Routes in the order given, and what [`Table::find`] needs to skip most of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Table<M> {
    routes: Vec<Route<M>>,
    /// The header names the matches require, each once, lower case.
    names: Vec<HeaderName>,
    /// Every (route, rule, match) in `find`'s order.
    entries: Vec<Entry>,
}

/// One match of one rule, and the indexed headers it requires.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    route: u32,
    rule: u32,
    /// `None`: the rule has no matches and holds the spec's default ([`Matcher::catch_all`]).
    matched: Option<u32>,
    /// Bit `i`: requires `names[i]`.
    required: u64,
}

impl<M: Matcher> Table<M> {
    /// `routes` indexed. Counts past `u32::MAX` are not routes anyone writes; they saturate,
    /// which would only make a lookup miss.
    pub fn new(routes: Vec<Route<M>>) -> Self {
        let mut names: Vec<HeaderName> = Vec::new();
        let mut entries = Vec::new();
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        for (r, route) in routes.iter().enumerate() {
            for (u, rule) in route.rules.iter().enumerate() {
                if rule.matches.is_empty() {
                    entries.push(Entry {
                        route: index(r),
                        rule: index(u),
                        matched: None,
                        required: 0,
                    });
                }
                for (m, matched) in rule.matches.iter().enumerate() {
                    let mut required = 0u64;
                    for h in matched.headers() {
                        let i = match names.iter().position(|n| n == &h.name) {
                            Some(i) => i,
                            None if names.len() < INDEXED => {
                                names.push(h.name.clone());
                                names.len() - 1
                            }
                            None => continue,
                        };
                        required |= 1 << i;
                    }
                    entries.push(Entry {
                        route: index(r),
                        rule: index(u),
                        matched: Some(index(m)),
                        required,
                    });
                }
            }
        }
        Self {
            routes,
            names,
            entries,
        }
    }

    /// The routes, in the order given.
    pub fn routes(&self) -> &[Route<M>] {
        &self.routes
    }

    /// The header names the index looks up once per request, in the order first required.
    pub fn indexed_headers(&self) -> &[HeaderName] {
        &self.names
    }

    /// What [`find`] gives for `request` among the routes: the rule it takes, with its route
    /// and the match that took it; `None` when no rule does.
    pub fn find(&self, request: &Request<'_>) -> Option<(&Route<M>, &Rule<M>, &M)> {
        let path = crate::path::normalize(request.path).ok()?;
        let host = request.host();
        let mut absent = 0u64;
        for (i, name) in self.names.iter().enumerate() {
            if !request.headers.any_value(name.as_str(), &mut |_| true) {
                absent |= 1 << i;
            }
        }
        let mut best = Best::default();
        // The host rank of the route last looked at: entries come route by route.
        let mut ranked: Option<(u32, Option<(usize, usize)>)> = None;
        for e in &self.entries {
            if e.required & absent != 0 {
                continue;
            }
            let Some(route) = self.routes.get(e.route as usize) else {
                continue;
            };
            let host_rank = match ranked {
                Some((r, rank)) if r == e.route => rank,
                _ => {
                    let rank = host_rank(route, host);
                    ranked = Some((e.route, rank));
                    rank
                }
            };
            let Some(host_rank) = host_rank else {
                continue;
            };
            let Some(rule) = route.rules.get(e.rule as usize) else {
                continue;
            };
            let m = match e.matched {
                None => M::catch_all(),
                Some(i) => match rule.matches.get(i as usize) {
                    Some(m) => m,
                    None => continue,
                },
            };
            best.offer(host_rank, (route, rule, m), request, &path);
        }
        best.found
    }
}
