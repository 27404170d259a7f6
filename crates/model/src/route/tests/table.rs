//! `Table::find` against `find`, the plain walk it stands in for: the same rule, route and
//! match for any routes and any request (hostnames, paths, methods, headers present, absent or
//! with other values, query parameters), and past the [`INDEXED`] header names the index holds.

use proptest::prelude::*;

use super::super::*;
use super::{header, position, route, rule};

const NAMES: [&str; 4] = ["x-a", "x-b", "X-C", "version"];
const VALUES: [&str; 2] = ["1", "2"];

fn a_match() -> impl Strategy<Value = Match> {
    let path = prop_oneof![
        Just(PathMatch::prefix("/").unwrap()),
        Just(PathMatch::prefix("/a").unwrap()),
        Just(PathMatch::prefix("/a/b").unwrap()),
        Just(PathMatch::exact("/a/b").unwrap()),
        Just(PathMatch::RegularExpression(
            Pattern::new("/a/[a-z]+").unwrap()
        )),
    ];
    let method = prop::option::of(prop_oneof![Just(Method::Get), Just(Method::Post)]);
    let headers = prop::collection::vec((0..NAMES.len(), 0..VALUES.len()), 0..3);
    let query = prop::option::of(0..VALUES.len());
    (path, method, headers, query).prop_map(|(path, method, hs, q)| Match {
        path,
        method,
        headers: hs
            .iter()
            .map(|&(n, v)| header(NAMES[n], VALUES[v]))
            .collect(),
        query_params: q
            .map(|v| super::query("q", VALUES[v]))
            .into_iter()
            .collect(),
    })
}

fn routes() -> impl Strategy<Value = Vec<Route>> {
    let hostnames = prop::collection::vec(
        prop_oneof![Just("a.example"), Just("*.example"), Just("b.example")],
        0..2,
    );
    let rules = prop::collection::vec(prop::collection::vec(a_match(), 0..3), 1..4);
    let one = (hostnames, rules).prop_map(|(hosts, rules)| Route {
        hostnames: hosts.iter().map(|h| Hostname::new(h).unwrap()).collect(),
        rules: rules
            .into_iter()
            .enumerate()
            .map(|(i, ms)| rule(&format!("r{i}"), ms))
            .collect(),
    });
    prop::collection::vec(one, 1..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn the_table_finds_what_find_finds(
        routes in routes(),
        host in prop::option::of(prop_oneof![
            Just("a.example"), Just("b.example:80"), Just("c.example"), Just("A.Example.")
        ]),
        post in any::<bool>(),
        path in prop_oneof![
            Just("/"), Just("/a"), Just("/a/b"), Just("/a/b/c"), Just("/x"), Just("//a/./b")
        ],
        headers in prop::collection::vec((0..NAMES.len(), 0..VALUES.len(), any::<bool>()), 0..4),
        query in prop::option::of(prop_oneof![Just("q=1"), Just("q=2&q=1"), Just("r=1")]),
    ) {
        // Names sent in either case, some with values no match compares (`0`).
        let sent: Vec<(String, &str)> = headers
            .iter()
            .map(|&(n, v, upper)| {
                let name = if upper { NAMES[n].to_uppercase() } else { NAMES[n].to_lowercase() };
                (name, if v == 0 && upper { "0" } else { VALUES[v] })
            })
            .collect();
        let pairs: Vec<(&str, &str)> = sent.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let hs: &[(&str, &str)] = &pairs;
        let request = Request {
            method: if post { "POST" } else { "GET" },
            authority: host,
            path,
            query,
            headers: &hs,
        };
        let table = Table::new(routes.clone());
        prop_assert_eq!(
            table.find(&request).map(|f| position(table.routes(), f)),
            find(&routes, &request).map(|f| position(&routes, f)),
        );
    }
}

/// Header names past the ones indexed are compared as `find` compares them.
#[test]
fn names_past_the_index_still_match() {
    let n = INDEXED + 6;
    let routes = [route(
        (0..n)
            .map(|i| {
                rule(
                    &format!("r{i}"),
                    vec![super::headers(&[(&format!("x-{i}"), "1")])],
                )
            })
            .collect(),
    )];
    let table = Table::new(routes.to_vec());
    assert_eq!(table.indexed_headers().len(), INDEXED);
    for i in [0, 3, INDEXED - 1, INDEXED, n - 1] {
        let name = format!("X-{i}");
        let pairs = [(name.as_str(), "1")];
        let hs: &[(&str, &str)] = &pairs;
        let request = Request {
            method: "GET",
            authority: None,
            path: "/",
            query: None,
            headers: &hs,
        };
        let (_, rule, _) = table.find(&request).unwrap();
        assert_eq!(rule.backends[0].target.service, format!("r{i}"));
        assert_eq!(table.find(&request), find(&routes, &request));
    }
}

/// GRPCRoutes: a header rule skipped when its header is absent, taken when it is there.
#[test]
fn grpc_header_rules_through_the_table() {
    let on = |n: &str, v: &str| GrpcMatch {
        method: None,
        headers: vec![header(n, v)],
    };
    let routes = vec![route(vec![
        rule("one", vec![on("version", "one")]),
        rule("two", vec![on("version", "two")]),
        rule("any", vec![]),
    ])];
    let table = Table::new(routes);
    let to = |hs: &[(&str, &str)]| {
        let request = Request {
            method: "POST",
            authority: None,
            path: "/pkg.Svc/Call",
            query: None,
            headers: &hs,
        };
        table
            .find(&request)
            .map(|(_, r, _)| r.backends[0].target.service.clone())
    };
    assert_eq!(to(&[("Version", "two")]).as_deref(), Some("two"));
    assert_eq!(to(&[("version", "three")]).as_deref(), Some("any"));
    assert_eq!(to(&[]).as_deref(), Some("any"));
}
