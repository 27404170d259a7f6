//! `check`'s routes: a request line parsed, the rule and backends it takes from a mesh file as a
//! user writes it, shadowed rules found (and the ones that only look shadowed left alone), and
//! the property that no request ever takes a rule called shadowed.

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

use hopwise_model::Mesh;
use proptest::prelude::*;

use hopwise_model::route::{Match, PathMatch, StringMatch};

use super::*;

/// A mesh whose `services.b` is `b_yaml` (b-v1, b-v2 and a gRPC `g` beside it).
fn mesh(b_yaml: &str) -> Mesh {
    let yaml = format!(
        "mesh: {{ name: t, trust_domain: t.local }}
services:
  b:
{b_yaml}
  b-v1: {{}}
  b-v2: {{}}
  plain: {{}}
"
    );
    Mesh::from_yaml(&yaml).unwrap_or_else(|d| panic!("{}", d.render("test")))
}

fn routing(m: &Mesh, line: &str) -> Routing {
    take(m, &Probe::parse(line).unwrap()).unwrap()
}

const SPLIT: &str = r#"    routes:
      split:
        rules:
          - name: beta
            matches: [{ path: { value: /quote }, headers: [{ name: x-beta, value: "1" }] }]
            backends: [{ service: b-v2, weight: 90 }, { service: b-v1, weight: 10 }, { service: b, weight: 0 }]
          - matches: [{ path: { type: Exact, value: /old } }]
            filters:
              - type: RequestRedirect
                request_redirect: { path: { type: ReplaceFullPath, replace_full_path: /new }, status_code: 301 }
          - matches: [{ path: { value: /quote } }]
            backends: [{ service: b-v1 }]"#;

#[test]
fn a_request_line_is_parsed_as_curl_would_send_it() {
    let p = Probe::parse(r#"GET http://b:80/quote?id=7 -H X-Beta:1 -H 'x-user: a b'"#).unwrap();
    assert_eq!(p.method, "GET");
    assert_eq!(p.authority.as_deref(), Some("b:80"));
    assert_eq!(
        (p.path.as_str(), p.query.as_deref()),
        ("/quote", Some("id=7"))
    );
    assert_eq!(
        p.headers.0,
        vec![
            ("X-Beta".into(), "1".into()),
            ("x-user".into(), "a b".into())
        ]
    );
    let p = Probe::parse("POST /x -H host:b.t.local").unwrap();
    assert_eq!(p.authority.as_deref(), Some("b.t.local"));
    let p = Probe::parse("GET b?q=1").unwrap();
    assert_eq!((p.path.as_str(), p.query.as_deref()), ("/", Some("q=1")));
    for (line, want) in [
        ("GET", ProbeError::Incomplete),
        ("get /x", ProbeError::BadMethod("get".into())),
        ("GET ftp://b/x", ProbeError::BadTarget("ftp://b/x".into())),
        ("GET /x -H nocolon", ProbeError::BadHeader("nocolon".into())),
        ("GET /x --data y", ProbeError::Unexpected("--data".into())),
        ("GET /x -H 'a: b", ProbeError::UnclosedQuote('\'')),
        ("GET /x -H", ProbeError::Incomplete),
    ] {
        assert_eq!(Probe::parse(line), Err(want), "{line}");
    }
}

#[test]
fn the_rule_and_its_weighted_backends() {
    let m = mesh(SPLIT);
    let Routing::Rule(t) = routing(&m, "GET b/quote/x -H x-beta:1") else {
        panic!("no rule")
    };
    assert_eq!(
        (t.route.as_str(), t.rule, t.rule_name.as_deref()),
        ("split", 0, Some("beta"))
    );
    assert_eq!(t.path, "services.b.routes.split.rules[0]");
    let shares: Vec<(&str, u32, f64)> = t
        .backends
        .iter()
        .map(|s| (s.service.as_str(), s.weight, s.percent))
        .collect();
    assert_eq!(
        shares,
        [("b-v2", 90, 90.0), ("b-v1", 10, 10.0), ("b", 0, 0.0)]
    );
    // Without the header, the plain prefix rule; by the trust domain's name too.
    let Routing::Rule(t) = routing(&m, "GET /quote -H host:B.t.local:8080") else {
        panic!("no rule")
    };
    assert_eq!((t.rule, t.backends[0].service.as_str()), (2, "b-v1"));
    let Routing::Rule(t) = routing(&m, "GET b/old") else {
        panic!("no rule")
    };
    assert_eq!(
        (t.redirect, t.filters.as_slice()),
        (Some(301), &["RequestRedirect"][..])
    );
}

#[test]
fn no_rule_no_routes_and_no_service() {
    let m = mesh(SPLIT);
    assert_eq!(
        routing(&m, "GET b/other"),
        Routing::NoMatch {
            service: "b".into()
        }
    );
    assert_eq!(
        routing(&m, "GET plain/x"),
        Routing::NoRoutes {
            service: "plain".into()
        }
    );
    let probe = |l: &str| Probe::parse(l).unwrap();
    assert_eq!(take(&m, &probe("GET /x")), Err(RoutingError::NoHost));
    for host in ["nobody", "b.elsewhere.example"] {
        assert_eq!(
            take(&m, &probe(&format!("GET {host}/x"))),
            Err(RoutingError::UnknownService(host.into()))
        );
    }
}

/// The rules `shadowed` calls shadowed, as `route.rules[i]`.
fn shadowed_in(b_yaml: &str) -> Vec<String> {
    shadowed(&mesh(b_yaml))
        .into_iter()
        .map(|f| {
            assert_eq!(f.code, "shadowed-rule");
            f.path.trim_start_matches("services.b.routes.").to_owned()
        })
        .collect()
}

#[test]
fn shadowed_rules_are_found() {
    let found = shadowed_in(
        r#"    routes:
      r:
        rules:
          - matches: [{ path: { value: /a } }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { value: /a/ } }]          # the same prefix, later
            backends: [{ service: b-v2 }]
          - matches: [{ path: { type: Exact, value: /x }, method: GET }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { type: Exact, value: /x }, method: GET }, { path: { value: /a }, headers: [{ name: k, value: v }] }]
            backends: [{ service: b-v2 }]             # its second match outranks rules[0] (a header)
          - backends: [{ service: b-v1 }]
      later:
        rules:
          - backends: [{ service: b-v2 }]             # a second catch-all, same (no) hostnames"#,
    );
    assert_eq!(found, ["r.rules[1]", "later.rules[0]"]);
}

#[test]
fn rules_that_only_look_shadowed_are_left_alone() {
    let found = shadowed_in(
        r#"    routes:
      r:
        rules:
          - backends: [{ service: b-v1 }]                                   # `/`: the lowest rank
          - matches: [{ path: { value: /a } }]                              # a longer prefix wins
            backends: [{ service: b-v2 }]
          - matches: [{ path: { value: /a }, method: GET }]                 # a method wins
            backends: [{ service: b-v1 }]
          - matches: [{ path: { type: RegularExpression, value: "/a/.*" } }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { type: RegularExpression, value: "/a/[0-9]+" } }]   # not proved
            backends: [{ service: b-v2 }]
          - matches: [{ headers: [{ name: k, type: RegularExpression, value: "v.*" }] }]
            backends: [{ service: b-v1 }]
          - matches: [{ headers: [{ name: k, value: v1 }], query_params: [{ name: q, value: "1" }] }]
            backends: [{ service: b-v2 }]                                   # more to match: ranks higher
      hosted:
        hostnames: [b]
        rules:
          - backends: [{ service: b-v2 }]                                   # a named host ranks first"#,
    );
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn a_finding_in_the_report() {
    let m = mesh(
        r#"    routes:
      r:
        rules:
          - backends: [{ service: b-v1 }]
          - backends: [{ service: b-v2 }]"#,
    );
    let report = crate::check(&m, &crate::Options::default());
    let f = report
        .findings
        .iter()
        .find(|f| f.code == "shadowed-rule")
        .unwrap();
    assert_eq!(f.severity, crate::Severity::Warning);
    assert_eq!(f.path, "services.b.routes.r.rules[1]");
    assert!(
        f.message.contains("services.b.routes.r.rules[0]"),
        "{}",
        f.message
    );
}

fn a_match() -> impl Strategy<Value = Match> {
    use hopwise_model::route::{HeaderMatch, HeaderName, HeaderValue, Method, Pattern, QueryMatch};
    let path = prop_oneof![
        Just(PathMatch::prefix("/").unwrap()),
        Just(PathMatch::prefix("/a").unwrap()),
        Just(PathMatch::exact("/a/b").unwrap()),
        Just(PathMatch::RegularExpression(
            Pattern::new("/a/[a-z]").unwrap()
        )),
    ];
    let value = prop_oneof![
        Just(StringMatch::Exact(HeaderValue::new("1").unwrap())),
        Just(StringMatch::Exact(HeaderValue::new("2").unwrap())),
        Just(StringMatch::RegularExpression(
            Pattern::new("[12]").unwrap()
        )),
    ];
    let header =
        (prop_oneof![Just("x-a"), Just("x-b")], value.clone()).prop_map(|(n, value)| HeaderMatch {
            name: HeaderName::new(n).unwrap(),
            value,
        });
    let method = prop::option::of(prop_oneof![Just(Method::Get), Just(Method::Post)]);
    let query = prop::option::of(value).prop_map(|v| {
        v.map(|value| QueryMatch {
            name: "q".into(),
            value,
        })
        .into_iter()
        .collect()
    });
    (path, method, prop::collection::vec(header, 0..2), query).prop_map(
        |(path, method, headers, query_params)| Match {
            path,
            method,
            headers,
            query_params,
        },
    )
}

fn routes() -> impl Strategy<Value = IndexMap<String, Route>> {
    use hopwise_model::route::{Backend, Hostname, Rule};
    let hosts = prop_oneof![
        Just(vec![]),
        Just(vec!["a.example"]),
        Just(vec!["*.example"])
    ];
    let rules = prop::collection::vec(prop::collection::vec(a_match(), 0..3), 1..5);
    let route = (hosts, rules).prop_map(|(hosts, rules)| Route {
        hostnames: hosts.iter().map(|h| Hostname::new(h).unwrap()).collect(),
        rules: rules
            .into_iter()
            .map(|matches| Rule {
                matches,
                backends: vec![Backend::service("s")],
                ..Rule::default()
            })
            .collect(),
    });
    prop::collection::vec(route, 1..3).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, r)| (format!("r{i}"), r))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// No request takes a rule called shadowed.
    #[test]
    fn no_request_takes_a_shadowed_rule(routes in routes()) {
        let shadowed = shadow::shadowed_rules(&routes);
        let list: Vec<Route> = routes.values().cloned().collect();
        let sent: [(&str, &str); 3] = [("x-a", "1"), ("x-a", "2"), ("x-b", "1")];
        for host in [None, Some("a.example"), Some("b.example")] {
            for method in ["GET", "POST"] {
                for path in ["/", "/a", "/a/b", "/a/c", "/x"] {
                    for query in [None, Some("q=1"), Some("q=2")] {
                        for set in 0..8u8 {
                            let hs: Vec<(&str, &str)> = (0..3)
                                .filter(|i| set & (1 << i) != 0)
                                .map(|i| sent[i])
                                .collect();
                            let hs: &[(&str, &str)] = &hs;
                            let request = hopwise_model::route::Request {
                                method, authority: host, path, query, headers: &hs,
                            };
                            if let Some((route, rule, _)) = route::find(&list, &request) {
                                let r = list.iter().position(|x| std::ptr::eq(x, route)).unwrap();
                                let u = route.rules.iter().position(|x| std::ptr::eq(x, rule)).unwrap();
                                let at = (routes.get_index(r).unwrap().0.as_str(), u);
                                prop_assert!(
                                    !shadowed.iter().any(|(s, _)| *s == at),
                                    "{at:?} called shadowed, but takes {request:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
