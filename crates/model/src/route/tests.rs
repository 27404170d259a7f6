//! Table tests of `find` on HTTPRoutes. The Gateway API's conformance cases, each route
//! re-expressed with the model's types and each case's request and expected backend (or none:
//! the spec's 404) kept, are in `tests/paths.rs` (matching, exact paths, path order),
//! `tests/request_fields.rs` (methods, headers, query parameters) and `tests/hosts.rs`
//! (matching across routes, hostname precedence); gRPC, picks and checks in `tests/grpc.rs`,
//! `tests/pick.rs`, `tests/check.rs`; properties in `tests/props.rs`; `Table::find` against
//! `find` in `tests/table.rs` (and in every case here: [`to`] asks both). Here: the helpers they
//! share, and hopwise's own choices (regular-expression rank, canonical paths).

mod check;
mod grpc;
mod hosts;
mod paths;
mod pick;
mod policy;
mod props;
mod read;
mod request_fields;
mod table;

use super::*;

/// A request's headers in a table.
pub(super) type Hs<'a> = &'a [(&'a str, &'a str)];

pub(super) fn prefix(p: &str) -> Match {
    Match {
        path: PathMatch::prefix(p).unwrap(),
        ..Match::default()
    }
}

pub(super) fn exact(p: &str) -> Match {
    Match {
        path: PathMatch::exact(p).unwrap(),
        ..Match::default()
    }
}

pub(super) fn header(name: &str, value: &str) -> HeaderMatch {
    HeaderMatch {
        name: HeaderName::new(name).unwrap(),
        value: StringMatch::Exact(HeaderValue::new(value).unwrap()),
    }
}

pub(super) fn query(name: &str, value: &str) -> QueryMatch {
    QueryMatch {
        name: name.into(),
        value: StringMatch::Exact(HeaderValue::new(value).unwrap()),
    }
}

/// A match on headers only (the path defaults to `PathPrefix /`).
pub(super) fn headers(hs: &[(&str, &str)]) -> Match {
    Match {
        headers: hs.iter().map(|(n, v)| header(n, v)).collect(),
        ..Match::default()
    }
}

pub(super) fn queries(m: Match, qs: &[(&str, &str)]) -> Match {
    Match {
        query_params: qs.iter().map(|(n, v)| query(n, v)).collect(),
        ..m
    }
}

pub(super) fn method(m: Match, method: Method) -> Match {
    Match {
        method: Some(method),
        ..m
    }
}

pub(super) fn rule<M>(to: &str, matches: Vec<M>) -> Rule<M> {
    Rule {
        name: None,
        matches,
        filters: vec![],
        backends: vec![Backend::service(to)],
        policy: None,
    }
}

pub(super) fn route<M>(rules: Vec<Rule<M>>) -> Route<M> {
    Route {
        hostnames: vec![],
        rules,
    }
}

/// The service of the first backend of the rule `method path?query` with `headers` takes from
/// `host` (`(no backend)` for a rule without one), `None` for no rule.
pub(super) fn to<'r, M: Matcher + Clone>(
    routes: &'r [Route<M>],
    host: Option<&str>,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> Option<&'r str> {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let request = Request {
        method,
        authority: host,
        path,
        query,
        headers: &headers,
    };
    let found = find(routes, &request);
    // Every table test holds `Table::find` to `find` too.
    let indexed = Table::new(routes.to_vec());
    assert_eq!(
        indexed
            .find(&request)
            .map(|f| position(indexed.routes(), f)),
        found.map(|f| position(routes, f)),
        "Table::find and find disagree on {request:?}"
    );
    found.map(|(_, rule, _)| {
        rule.backends
            .first()
            .map_or("(no backend)", |b| b.target.service.as_str())
    })
}

/// Where a found (route, rule, match) stands: route and rule by index, the match by index or
/// `None` for a rule without matches.
pub(super) fn position<M: Matcher>(
    routes: &[Route<M>],
    (route, rule, m): (&Route<M>, &Rule<M>, &M),
) -> (usize, usize, Option<usize>) {
    let r = routes.iter().position(|x| std::ptr::eq(x, route));
    let u = route.rules.iter().position(|x| std::ptr::eq(x, rule));
    let i = rule.matches.iter().position(|x| std::ptr::eq(x, m));
    (r.unwrap_or(usize::MAX), u.unwrap_or(usize::MAX), i)
}

pub(super) type Case<'a> = (&'a str, &'a str, Hs<'a>, Option<&'a str>);

pub(super) fn table(routes: &[Route], cases: &[Case<'_>]) {
    for (method, target, hs, want) in cases {
        let got = to(routes, None, method, target, hs);
        assert_eq!(got, *want, "{method} {target} {hs:?}");
    }
}

pub(super) const G: &str = "GET";
/// Regular-expression paths rank between `Exact` and every `PathPrefix`; ties go to the first.
#[test]
fn regex_paths_rank_between_exact_and_prefix() {
    let re = |p: &str| Match {
        path: PathMatch::RegularExpression(Pattern::new(p).unwrap()),
        ..Match::default()
    };
    let r = route(vec![
        rule("prefix", vec![prefix("/users/1")]),
        rule("regex", vec![re("/users/[0-9]+")]),
        rule("regex-later", vec![re("/users/[a-z0-9]+")]),
        rule("exact", vec![exact("/users/7")]),
    ]);
    table(
        &[r],
        &[
            (G, "/users/7", &[], Some("exact")),
            (G, "/users/1", &[], Some("regex")),
            (G, "/users/abc", &[], Some("regex-later")),
            (G, "/users/1/x", &[], Some("prefix")),
        ],
    );
}

/// Paths are matched canonical: no spelling gets around a rule, an unusable path takes none.
#[test]
fn paths_are_matched_canonical() {
    let r = route(vec![
        rule("admin", vec![prefix("/admin")]),
        rule("v1", vec![exact("/a")]),
    ]);
    table(
        &[r],
        &[
            (G, "//admin/x", &[], Some("admin")),
            (G, "/x/../admin", &[], Some("admin")),
            (G, "/%61dmin", &[], Some("admin")),
            (G, "/./a", &[], Some("v1")),
            (G, "/admin%2Fx", &[], None),
        ],
    );
}

/// A rule without matches takes every request, at the rank of `PathPrefix /`.
#[test]
fn a_rule_without_matches_is_prefix_slash() {
    let r = route(vec![rule("all", vec![]), rule("exact", vec![exact("/x")])]);
    table(
        &[r],
        &[
            (G, "/x", &[], Some("exact")),
            ("POST", "/y?z", &[], Some("all")),
        ],
    );
}

/// `RegularExpression` header and query matches compare whole values; a header sent twice
/// matches if either value does.
#[test]
fn regex_values_and_repeated_headers() {
    let re = |p: &str| StringMatch::RegularExpression(Pattern::new(p).unwrap());
    let m = Match {
        headers: vec![HeaderMatch {
            name: HeaderName::new("x-version").unwrap(),
            value: re("v[0-9]+"),
        }],
        query_params: vec![QueryMatch {
            name: "id".into(),
            value: re("[a-f0-9]{4}"),
        }],
        ..Match::default()
    };
    let r = route(vec![rule("v", vec![m])]);
    table(
        &[r],
        &[
            (G, "/?id=beef", &[("X-Version", "v2")], Some("v")),
            (
                G,
                "/?id=beef",
                &[("x-version", "x"), ("x-version", "v10")],
                Some("v"),
            ),
            (G, "/?id=beef", &[("x-version", "v2-beta")], None),
            (G, "/?id=beefy", &[("x-version", "v2")], None),
            (G, "/?id=be%65f", &[("x-version", "v2")], Some("v")),
        ],
    );
}
