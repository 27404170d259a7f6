//! The Gateway API's HTTPRoute path cases: httproute-matching (and mesh/httproute-matching),
//! httproute-exact-path-matching, httproute-path-match-order.

use super::*;

/// httproute-matching (and mesh/httproute-matching): path OR header, segment prefixes.
#[test]
fn conformance_matching() {
    let r = route(vec![
        rule("v1", vec![prefix("/"), headers(&[("version", "one")])]),
        rule("v2", vec![prefix("/v2"), headers(&[("version", "two")])]),
    ]);
    table(
        &[r],
        &[
            (G, "/", &[], Some("v1")),
            (G, "/example", &[], Some("v1")),
            (G, "/", &[("Version", "one")], Some("v1")),
            (G, "/v2", &[], Some("v2")),
            (G, "/v2/example", &[], Some("v2")),
            (G, "/", &[("Version", "two")], Some("v2")),
            (G, "/v2/", &[], Some("v2")),
            // Not on a segment boundary: not under `/v2`.
            (G, "/v2example", &[], Some("v1")),
            (G, "/foo/v2/example", &[], Some("v1")),
        ],
    );
}

/// httproute-exact-path-matching.
#[test]
fn conformance_exact_path() {
    let r = route(vec![
        rule("v1", vec![exact("/one")]),
        rule("v2", vec![exact("/two")]),
    ]);
    table(
        &[r],
        &[
            (G, "/one", &[], Some("v1")),
            (G, "/two", &[], Some("v2")),
            (G, "/", &[], None),
            (G, "/one/example", &[], None),
            (G, "/two/", &[], None),
            (G, "/Two", &[], None),
        ],
    );
}

/// httproute-path-match-order: exact over prefix, the longest prefix first, trailing `/` ignored.
#[test]
fn conformance_path_match_order() {
    let r = route(vec![
        rule("v1", vec![exact("/match")]),
        rule("v2", vec![exact("/match/exact")]),
        rule("v3", vec![exact("/match/exact/one")]),
        rule("v3", vec![prefix("/match/")]),
        rule("v1", vec![prefix("/match/prefix/")]),
        rule("v2", vec![prefix("/match/prefix/one")]),
    ]);
    table(
        &[r],
        &[
            (G, "/match/exact/one", &[], Some("v3")),
            (G, "/match/exact", &[], Some("v2")),
            (G, "/match", &[], Some("v1")),
            (G, "/match/prefix/one/any", &[], Some("v2")),
            (G, "/match/prefix/any", &[], Some("v1")),
            (G, "/match/any", &[], Some("v3")),
        ],
    );
}

/// A prefix is checked as written, then its trailing `/` dropped.
#[test]
fn prefixes_are_checked_before_their_slash_is_dropped() {
    assert!(PathMatch::prefix("//").is_err());
    assert!(PathMatch::prefix("/a//").is_err());
    assert_eq!(PathMatch::prefix("/a/"), PathMatch::prefix("/a"));
    assert_eq!(PathMatch::prefix("/"), Ok(PathMatch::default()));
}
