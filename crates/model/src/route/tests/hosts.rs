//! Hostnames: the Gateway API's httproute-matching-across-routes, and the spec's hostname
//! precedence (before any match is compared).

use super::super::*;
use super::*;

/// httproute-matching-across-routes: two routes with hostnames; the rules of both compete.
#[test]
fn conformance_matching_across_routes() {
    let host = |h: &str| Hostname::new(h).unwrap();
    let routes = [
        Route {
            hostnames: vec![host("example.com"), host("example.net")],
            rules: vec![rule(
                "v1",
                vec![prefix("/"), headers(&[("version", "one")])],
            )],
        },
        Route {
            hostnames: vec![host("example.com")],
            rules: vec![rule(
                "v2",
                vec![prefix("/v2"), headers(&[("version", "two")])],
            )],
        },
    ];
    let cases: &[(&str, &str, Hs<'_>, &str)] = &[
        ("example.com", "/", &[], "v1"),
        ("example.com", "/example", &[], "v1"),
        ("example.net", "/example", &[], "v1"),
        ("example.com", "/example", &[("Version", "one")], "v1"),
        ("example.com", "/v2", &[], "v2"),
        ("example.net", "/v2", &[], "v1"),
        ("example.com", "/v2/example", &[], "v2"),
        ("example.com:8080", "/", &[("Version", "two")], "v2"),
    ];
    for (h, path, hs, want) in cases {
        assert_eq!(
            to(&routes, Some(h), G, path, hs),
            Some(*want),
            "{h} {path} {hs:?}"
        );
    }
    assert_eq!(to(&routes, Some("example.org"), G, "/", &[]), None);
    assert_eq!(to(&routes, None, G, "/", &[]), None);
}

/// Hostname precedence: an exact name beats a wildcard, a longer wildcard a shorter one, a
/// route with hostnames one without — before any path is compared.
#[test]
fn hostname_specificity_comes_first() {
    let named = |hosts: &[&str], to: &str, m: Match| Route {
        hostnames: hosts.iter().map(|h| Hostname::new(h).unwrap()).collect(),
        rules: vec![rule(to, vec![m])],
    };
    let routes = [
        named(&[], "any", exact("/x")),
        named(&["*.com"], "wild-short", prefix("/x")),
        named(&["*.example.com"], "wild", prefix("/")),
        named(&["api.example.com"], "exact", prefix("/")),
    ];
    let at = |h| to(&routes, Some(h), G, "/x", &[]);
    assert_eq!(at("api.example.com"), Some("exact"));
    assert_eq!(at("web.example.com"), Some("wild"));
    assert_eq!(at("example.com"), Some("wild-short"));
    assert_eq!(at("example.org"), Some("any"));
}
