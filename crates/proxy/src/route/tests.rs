//! The routing decision, table-tested in memory: routes read from a mesh file as a user writes
//! them, requests as plain views, draws given. The Gateway API's mesh conformance cases are
//! re-expressed here where they test the decision (which backend, which `Location`, which
//! rewritten path; the filters' cases in `tests/filters.rs`); `tests/routes.rs` runs them
//! through real proxies.

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

use hopwise_model::Mesh;
use hopwise_model::route::Request;
use http::HeaderMap;

use super::{Decision, RouteTable, decide};

mod filters;
mod policy;

/// The routes of service `b` in a mesh whose `services.b` is `b_yaml`.
pub(super) fn table(b_yaml: &str) -> RouteTable {
    let yaml = format!(
        "mesh: {{ name: t, trust_domain: t.local }}
services:
  a: {{ calls: {{ b: {{}}, b-v1: {{}}, b-v2: {{}} }} }}
  b:
{b_yaml}
  b-v1: {{}}
  b-v2: {{}}
  g: {{ protocol: grpc }}
"
    );
    let mesh = Mesh::from_yaml(&yaml).unwrap_or_else(|d| panic!("{}", d.render("test")));
    RouteTable::of(&mesh.services["b"].routes).unwrap()
}

pub(super) const NONE: &[(&str, &str)] = &[];

pub(super) fn get<'a>(path: &'a str, headers: &'a &'a [(&'a str, &'a str)]) -> Request<'a> {
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    Request {
        method: "GET",
        authority: Some("b"),
        path,
        query,
        headers,
    }
}

/// The backend service a request goes to, or what else happens to it.
pub(super) fn outcome(t: &RouteTable, req: &Request<'_>, draw: u32) -> String {
    match decide(t, req, draw) {
        Decision::Forward(f) => f.backend.service.clone(),
        Decision::Redirect { status, location } => format!("{status} {location}"),
        Decision::NoBackend { route, rule, .. } => {
            format!("500 {route}/{}", rule.unwrap_or("-"))
        }
        Decision::NoMatch => "404".into(),
    }
}

/// mesh/httproute-matching: a path prefix or a header, either match of a rule.
#[test]
fn conformance_mesh_matching() {
    let t = table(
        r#"    routes:
      matching:
        rules:
          - matches: [{ path: { value: / } }, { headers: [{ name: version, value: one }] }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { value: /v2 } }, { headers: [{ name: version, value: two }] }]
            backends: [{ service: b-v2 }]"#,
    );
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(&str, Headers<'_>, &str)] = &[
        ("/", &[], "b-v1"),
        ("/example", &[], "b-v1"),
        ("/", &[("Version", "one")], "b-v1"),
        ("/v2", &[], "b-v2"),
        ("/v2/example", &[], "b-v2"),
        ("/", &[("Version", "two")], "b-v2"),
        ("/v2/", &[], "b-v2"),
        ("/v2example", &[], "b-v1"),
        ("/foo/v2/example", &[], "b-v1"),
    ];
    for (path, headers, want) in cases {
        assert_eq!(
            outcome(&t, &get(path, headers), 0),
            *want,
            "{path} {headers:?}"
        );
    }
}

/// mesh/mesh-split and mesh/httproute-named-rule: exact paths to two services, the rule's
/// name carried; a path no rule takes is the spec's 404.
#[test]
fn conformance_mesh_split_named_rule_and_no_match() {
    let t = table(
        r#"    routes:
      split:
        rules:
          - name: named-rule
            matches: [{ path: { type: Exact, value: /v1 } }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { type: Exact, value: /v2 } }]
            backends: [{ service: b-v2 }]"#,
    );
    let Decision::Forward(f) = decide(&t, &get("/v1", &NONE), 0) else {
        panic!("not forwarded")
    };
    assert_eq!(
        (f.route, f.rule, &*f.backend.service),
        ("split", Some("named-rule"), "b-v1")
    );
    let Decision::Forward(f) = decide(&t, &get("/v2", &NONE), 0) else {
        panic!("not forwarded")
    };
    assert_eq!((f.rule, &*f.backend.service), (None, "b-v2"));
    assert_eq!(outcome(&t, &get("/v3", &NONE), 0), "404");
    // A path with no canonical form matches nothing.
    assert_eq!(outcome(&t, &get("/v1%2F", &NONE), 0), "404");
}

/// mesh/httproute-weight: 70/30 over one period of draws, exactly; all weights 0 is 500.
#[test]
fn weights_pick_by_the_draw_and_all_zero_is_500() {
    let t = table(
        r#"    routes:
      w:
        rules:
          - matches: [{ path: { value: /zero } }]
            name: nothing
            backends: [{ service: b-v1, weight: 0 }, { service: b-v2, weight: 0 }]
          - backends: [{ service: b-v1, weight: 70 }, { service: b-v2, weight: 30 }]"#,
    );
    let v1 = (0..100)
        .filter(|d| outcome(&t, &get("/", &NONE), *d) == "b-v1")
        .count();
    assert_eq!(v1, 70);
    assert_eq!(outcome(&t, &get("/zero/x", &NONE), 7), "500 w/nothing");
}

/// A GRPCRoute: the service and method pick the backend; nothing else matches is 404
/// (UNIMPLEMENTED in the proxy's gRPC answer).
#[test]
fn a_grpc_route_picks_by_service_and_method() {
    let yaml = "mesh: { name: t, trust_domain: t.local }
services:
  a: { calls: { g: {}, g2: {} } }
  g:
    protocol: grpc
    routes:
      split:
        rules:
          - matches: [{ method: { service: shop.Ledger, method: Post } }]
            backends: [{ service: g2 }]
  g2: { protocol: grpc }
";
    let mesh = Mesh::from_yaml(yaml).unwrap_or_else(|d| panic!("{}", d.render("test")));
    let t = RouteTable::of(&mesh.services["g"].routes).unwrap();
    let post = Request {
        method: "POST",
        ..get("/shop.Ledger/Post", &NONE)
    };
    assert_eq!(outcome(&t, &post, 0), "g2");
    let other = Request {
        method: "POST",
        ..get("/shop.Ledger/Get", &NONE)
    };
    assert_eq!(outcome(&t, &other, 0), "404");
    assert_eq!(t.names(), ["split"]);
}

/// The header view finds every value of a header, by comparing names when there are few and
/// by the map's lookup when there are many: the same answers either way.
#[test]
fn the_header_view_answers_alike_for_few_and_many_headers() {
    for filler in [0, 40] {
        let mut map = HeaderMap::new();
        for i in 0..filler {
            map.insert(
                http::HeaderName::from_bytes(format!("x-fill-{i}").as_bytes()).unwrap(),
                http::HeaderValue::from_static("f"),
            );
        }
        map.append("x-beta", http::HeaderValue::from_static("1"));
        map.append("x-beta", http::HeaderValue::from_static("2"));
        map.append("x-bin", http::HeaderValue::from_bytes(b"\xff").unwrap());
        let view = super::HeaderView(&map);
        let has = |name: &str, want: &str| {
            hopwise_model::route::Headers::any_value(&view, name, &mut |v| v == want)
        };
        assert!(has("x-beta", "1") && has("x-beta", "2"), "{filler}");
        assert!(!has("x-beta", "3") && !has("x-gamma", "1"), "{filler}");
        // A value that is not UTF-8 satisfies nothing.
        assert!(!hopwise_model::route::Headers::any_value(
            &view,
            "x-bin",
            &mut |_| true
        ));
    }
}

/// A `RequestMirror` takes its percentage of the draws, with its own bits of the draw: the
/// copy goes beside the backend the weights picked, never in its place.
#[test]
fn a_mirror_takes_its_share_of_the_draws_beside_the_backend() {
    let t = table(
        r#"    routes:
      shadow:
        rules:
          - filters:
              - type: RequestMirror
                request_mirror: { backend: { service: b-v2 }, percent: 25 }
            backends: [{ service: b-v1 }]"#,
    );
    let mut mirrored = 0;
    for draw in 0..100u32 {
        // Draws whose mirror bits run over 0..100 (the mirror reads the draw turned by 16).
        let draw = draw.rotate_right(16);
        let Decision::Forward(f) = decide(&t, &get("/x", &NONE), draw) else {
            panic!("not forwarded")
        };
        assert_eq!(&*f.backend.service, "b-v1");
        match f.mirrors.as_slice() {
            [] => {}
            [m] => {
                assert_eq!(&*m.service, "b-v2");
                mirrored += 1;
            }
            more => panic!("{more:?}"),
        }
    }
    assert_eq!(mirrored, 25);
}

/// Every rule has a place among the table's rules, across routes, which a decision names (its
/// metrics' handle): a named rule by its name, an unnamed one as `rules[i]` of its route.
#[test]
fn each_decision_names_the_rules_place_in_the_table() {
    let t = table(
        r#"    routes:
      first:
        hostnames: [other.example]
        rules:
          - backends: [{ service: b-v1 }]
      second:
        rules:
          - name: one
            matches: [{ path: { type: Exact, value: /one } }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { type: Exact, value: /two } }]
            backends: [{ service: b-v2, weight: 0 }]"#,
    );
    let labels: Vec<(String, String)> = (t.rules().into_iter())
        .map(|(r, l)| (r.to_owned(), l))
        .collect();
    let pair = |r: &str, l: &str| (r.to_owned(), l.to_owned());
    assert_eq!(
        labels,
        [
            pair("first", "rules[0]"),
            pair("second", "one"),
            pair("second", "rules[1]")
        ]
    );
    let Decision::Forward(f) = decide(&t, &get("/one", &NONE), 0) else {
        panic!("not forwarded")
    };
    assert_eq!(f.index, 1);
    let Decision::NoBackend { index, .. } = decide(&t, &get("/two", &NONE), 0) else {
        panic!("not a 500")
    };
    assert_eq!(index, 2);
}
