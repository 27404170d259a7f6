//! The Gateway API's HTTPRoute cases on the rest of a request: httproute-method-matching,
//! httproute-header-matching, httproute-query-param-matching (and mesh/…), each with the
//! spec's precedence between them.

use super::super::*;
use super::*;

/// httproute-method-matching: method alone, with other matches, OR of ANDs, and precedence
/// (a longer path beats a method; a method beats a header).
#[test]
fn conformance_method_matching() {
    let r = route(vec![
        rule("v1", vec![method(Match::default(), Method::Post)]),
        rule("v2", vec![method(Match::default(), Method::Get)]),
        rule("v1", vec![method(prefix("/path1"), Method::Get)]),
        rule(
            "v2",
            vec![method(headers(&[("version", "one")]), Method::Put)],
        ),
        rule(
            "v3",
            vec![method(
                Match {
                    headers: vec![header("version", "two")],
                    ..prefix("/path2")
                },
                Method::Post,
            )],
        ),
        rule(
            "v1",
            vec![
                method(prefix("/path3"), Method::Patch),
                method(
                    Match {
                        headers: vec![header("version", "three")],
                        ..prefix("/path4")
                    },
                    Method::Delete,
                ),
            ],
        ),
        rule("v1", vec![prefix("/path5")]),
        rule("v2", vec![method(Match::default(), Method::Patch)]),
        rule("v3", vec![headers(&[("version", "four")])]),
    ]);
    table(
        &[r],
        &[
            ("POST", "/", &[], Some("v1")),
            ("GET", "/", &[], Some("v2")),
            ("HEAD", "/", &[], None),
            ("GET", "/path1", &[], Some("v1")),
            ("PUT", "/", &[("version", "one")], Some("v2")),
            ("POST", "/path2", &[("version", "two")], Some("v3")),
            ("PATCH", "/path3", &[], Some("v1")),
            ("DELETE", "/path4", &[("version", "three")], Some("v1")),
            ("PUT", "/", &[], None),
            ("DELETE", "/path4", &[], None),
            ("PATCH", "/path5", &[], Some("v1")),
            ("PATCH", "/", &[("version", "four")], Some("v2")),
        ],
    );
}

/// httproute-header-matching (and grpcroute-header-matching, the same rules and cases): each
/// rule's backend and its matches, each match's headers.
pub(super) const HEADER_RULES: &[(&str, &[Hs<'static>])] = &[
    ("v1", &[&[("version", "one")]]),
    ("v2", &[&[("version", "two")]]),
    ("v1", &[&[("version", "two"), ("color", "orange")]]),
    ("v1", &[&[("color", "blue")], &[("color", "green")]]),
    ("v2", &[&[("color", "red")], &[("color", "yellow")]]),
];

/// The request headers of each case and the backend expected (none: 404, or UNIMPLEMENTED).
pub(super) const HEADER_CASES: &[(Hs<'static>, Option<&str>)] = &[
    (&[("Version", "one")], Some("v1")),
    (&[("Version", "two")], Some("v2")),
    (&[("Version", "two"), ("Color", "orange")], Some("v1")),
    // Both rules match one header: the one given first wins.
    (&[("Version", "two"), ("Color", "blue")], Some("v2")),
    (&[("Color", "orange")], None),
    (&[("Some-Other-Header", "one")], None),
    (&[("Color", "blue")], Some("v1")),
    (&[("Color", "green")], Some("v1")),
    (&[("Color", "red")], Some("v2")),
    (&[("Color", "yellow")], Some("v2")),
    (&[("Color", "purple")], None),
];

/// [`HEADER_RULES`] as one route of matches built by `build`.
pub(super) fn header_route<M>(build: impl Fn(Hs<'_>) -> M) -> Route<M> {
    route(
        HEADER_RULES
            .iter()
            .map(|(to, ms)| rule(to, ms.iter().map(|hs| build(hs)).collect()))
            .collect(),
    )
}

/// httproute-header-matching: names case-insensitive, AND within a match, OR across, ties to
/// the rule given first.
#[test]
fn conformance_header_matching() {
    let routes = [header_route(headers)];
    for (hs, want) in HEADER_CASES {
        assert_eq!(to(&routes, None, G, "/", hs), *want, "{hs:?}");
    }
}

/// httproute-query-param-matching (and mesh/…): names exact, the first value, combinations,
/// and precedence (a longer path beats a query; a header beats a query).
#[test]
fn conformance_query_param_matching() {
    let d = Match::default;
    let r = route(vec![
        rule("v1", vec![queries(d(), &[("animal", "whale")])]),
        rule("v2", vec![queries(d(), &[("animal", "dolphin")])]),
        rule(
            "v3",
            vec![
                queries(d(), &[("animal", "dolphin"), ("color", "blue")]),
                queries(d(), &[("ANIMAL", "Whale")]),
            ],
        ),
        rule(
            "v1",
            vec![queries(prefix("/path1"), &[("animal", "whale")])],
        ),
        rule(
            "v2",
            vec![queries(
                headers(&[("version", "one")]),
                &[("animal", "whale")],
            )],
        ),
        rule(
            "v3",
            vec![queries(
                Match {
                    headers: vec![header("version", "two")],
                    ..prefix("/path2")
                },
                &[("animal", "whale")],
            )],
        ),
        rule(
            "v1",
            vec![
                queries(prefix("/path3"), &[("animal", "shark")]),
                queries(
                    Match {
                        headers: vec![header("version", "three")],
                        ..prefix("/path4")
                    },
                    &[("animal", "kraken")],
                ),
            ],
        ),
        rule("v1", vec![prefix("/path5")]),
        rule("v2", vec![queries(d(), &[("animal", "hydra")])]),
        rule("v3", vec![headers(&[("version", "four")])]),
    ]);
    table(
        &[r],
        &[
            (G, "/?animal=whale", &[], Some("v1")),
            (G, "/?animal=dolphin", &[], Some("v2")),
            (G, "/?animal=dolphin&color=blue", &[], Some("v3")),
            (G, "/?ANIMAL=Whale", &[], Some("v3")),
            (G, "/?animal=whale&otherparam=irrelevant", &[], Some("v1")),
            (G, "/?animal=dolphin&color=yellow", &[], Some("v2")),
            (G, "/?color=blue", &[], None),
            (G, "/?animal=dog", &[], None),
            (G, "/?animal=whaledolphin", &[], None),
            (G, "/", &[], None),
            (G, "/path1?animal=whale", &[], Some("v1")),
            (G, "/?animal=whale", &[("version", "one")], Some("v2")),
            (G, "/path2?animal=whale", &[("version", "two")], Some("v3")),
            (G, "/path3?animal=shark", &[], Some("v1")),
            (
                G,
                "/path4?animal=kraken",
                &[("version", "three")],
                Some("v1"),
            ),
            (G, "/?animal=shark", &[], None),
            (G, "/path4?animal=kraken", &[], None),
            (G, "/path5?animal=hydra", &[], Some("v1")),
            (G, "/?animal=hydra", &[("version", "four")], Some("v3")),
        ],
    );
}
