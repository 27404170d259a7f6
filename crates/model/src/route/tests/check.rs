//! Tests of `check`: every problem at once, each with where it stands in the route.

use super::super::*;
use super::{exact, headers, prefix, route, rule};

fn at(problems: &[Problem]) -> Vec<&str> {
    problems.iter().map(|p| p.at.as_str()).collect()
}

#[test]
fn a_good_route_has_no_problem() {
    let mut r = route(vec![rule("v1", vec![prefix("/a")])]);
    r.rules[0].name = Some("named-rule".into());
    r.rules[0].filters = vec![
        Filter::UrlRewrite(Rewrite {
            hostname: Some(Hostname::new("example.com").unwrap()),
            path: Some(PathModifier::ReplacePrefixMatch(
                RoutePath::new("/b").unwrap(),
            )),
        }),
        Filter::RequestMirror(Mirror {
            target: Backend::service("shadow").target,
            percent: 100,
        }),
        Filter::RequestMirror(Mirror {
            target: Backend::service("shadow2").target,
            percent: 5,
        }),
    ];
    assert_eq!(check(&r), vec![]);
}

#[test]
fn every_problem_is_reported_with_its_place() {
    let mut r = route(vec![
        rule("v1", vec![headers(&[("x", "1"), ("X", "2")]), exact("/e")]),
        rule("v2", vec![]),
        rule("v3", vec![]),
    ]);
    r.rules[0].name = Some("dup".into());
    r.rules[1].name = Some("dup".into());
    r.rules[2].name = Some("Bad_Name".into());
    r.rules[0].matches[1].query_params = vec![QueryMatch {
        name: "a&b".into(),
        value: StringMatch::Exact(HeaderValue::new("v").unwrap()),
    }];
    r.rules[0].filters = vec![
        Filter::RequestRedirect(Redirect {
            hostname: Some(Hostname::new("*.example.com").unwrap()),
            path: Some(PathModifier::ReplacePrefixMatch(
                RoutePath::new("/b").unwrap(),
            )),
            ..Redirect::default()
        }),
        Filter::UrlRewrite(Rewrite::default()),
        Filter::RequestHeaderModifier(HeaderModifier {
            remove: vec![HeaderName::new("a").unwrap(), HeaderName::new("A").unwrap()],
            ..HeaderModifier::default()
        }),
        Filter::RequestHeaderModifier(HeaderModifier::default()),
        Filter::RequestMirror(Mirror {
            target: Backend::service("").target,
            percent: 101,
        }),
    ];
    r.rules[1].backends = vec![Backend::service("big").weight(Backend::MAX_WEIGHT + 1)];
    let problems = check(&r);
    assert_eq!(
        at(&problems),
        vec![
            "rules[0].matches[0].headers",
            "rules[0].matches[1].query_params[0].name",
            "rules[0].filters[0].request_redirect.hostname",
            "rules[0].filters[0].request_redirect.path",
            "rules[0].filters[2].request_header_modifier.remove",
            "rules[0].filters[3]",
            "rules[0].filters[4].request_mirror.percent",
            "rules[0].filters[4].request_mirror.backend.service",
            "rules[0].filters",
            "rules[1].name",
            "rules[1].backends[0].weight",
            "rules[2].name",
        ],
        "{problems:#?}"
    );
}

#[test]
fn a_grpc_route_neither_redirects_nor_rewrites() {
    let mut r: GrpcRoute = route(vec![rule("v1", vec![GrpcMatch::default()])]);
    r.rules[0].filters = vec![
        Filter::RequestRedirect(Redirect::default()),
        Filter::UrlRewrite(Rewrite::default()),
        Filter::RequestHeaderModifier(HeaderModifier::default()),
    ];
    let problems = check(&r);
    assert_eq!(
        at(&problems),
        vec![
            "rules[0].filters[0]",
            "rules[0].filters[1]",
            "rules[0].filters"
        ]
    );
    assert!(
        problems[0]
            .message
            .contains("GRPCRoute has no RequestRedirect"),
        "{problems:?}"
    );
}

#[test]
fn bounds_are_the_gateway_apis() {
    let r = route((0..17).map(|_| rule("v", vec![prefix("/")])).collect());
    assert_eq!(at(&check(&r)), vec!["rules"]);
    let r = route(vec![rule("v", (0..65).map(|_| prefix("/")).collect())]);
    assert_eq!(at(&check(&r)), vec!["rules[0].matches"]);
}

#[test]
fn redirect_statuses_are_the_specs() {
    assert_eq!(RedirectStatus::default().code(), 302);
    for code in [301, 302, 303, 307, 308] {
        assert_eq!(RedirectStatus::from_code(code).unwrap().code(), code);
    }
    assert!(RedirectStatus::from_code(304).is_err());
}

/// `ReplacePrefixMatch` needs one `PathPrefix` match; no match is the default `PathPrefix /`.
#[test]
fn replace_prefix_match_needs_one_prefix() {
    let with = |matches: Vec<Match>| {
        let mut r = route(vec![rule("v1", matches)]);
        r.rules[0].filters = vec![Filter::UrlRewrite(Rewrite {
            hostname: None,
            path: Some(PathModifier::ReplacePrefixMatch(
                RoutePath::new("/b").unwrap(),
            )),
        })];
        at(&check(&r)).len()
    };
    assert_eq!(with(vec![]), 0);
    assert_eq!(with(vec![prefix("/a")]), 0);
    assert_eq!(with(vec![exact("/a")]), 1);
    assert_eq!(with(vec![prefix("/a"), prefix("/b")]), 1);
}
