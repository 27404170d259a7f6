//! Routes read from the mesh file (`services.<name>.routes`): a whole route into the model and
//! `find` over it, a gRPC service's GRPCRoute, and every problem at once with its path and line.

use super::super::*;
use super::{G, to};
use crate::Mesh;

fn routes_of(text: &str, service: &str) -> ServiceRoutes {
    let mesh = Mesh::from_yaml(text).unwrap_or_else(|d| panic!("{}", d.render("mesh.yaml")));
    mesh.services[service].routes.clone()
}

/// Every problem as `line path: message`.
fn problems(text: &str) -> Vec<String> {
    let d = Mesh::from_yaml(text).expect_err("should be refused");
    d.0.iter()
        .map(|d| format!("{} {}: {}", d.pos.map_or(0, |p| p.line), d.path, d.message))
        .collect()
}

const SHOP: &str = r#"
services:
  pricing:
    routes:
      canary:
        hostnames: [pricing, "*.pricing.shop"]
        rules:
          - name: beta
            matches:
              - path: { type: PathPrefix, value: /quote/ }
                headers: [{ name: X-Beta, value: "1" }]
                query_params: [{ type: RegularExpression, name: id, value: "[0-9]+" }]
                method: POST
            filters:
              - type: RequestHeaderModifier
                request_header_modifier: { set: [{ name: x-route, value: beta }], remove: [x-debug] }
              - type: RequestMirror
                request_mirror: { backend: { service: pricing-v2 }, percent: 10 }
            backends:
              - { service: pricing-v2, subset: { version: v2 }, weight: 90 }
              - { service: pricing, weight: 10 }
          - matches: [{ path: { type: Exact, value: /old } }]
            filters:
              - type: RequestRedirect
                request_redirect: { scheme: https, path: { type: ReplaceFullPath, replace_full_path: /new }, status_code: 301 }
          - backends: [{ service: pricing }]
  pricing-v2: {}
"#;

#[test]
fn a_route_is_read_whole() {
    let ServiceRoutes::Http(routes) = routes_of(SHOP, "pricing") else {
        panic!("an HTTP service has HTTPRoutes");
    };
    let route = &routes["canary"];
    assert_eq!(route.hostnames.len(), 2);
    let beta = &route.rules[0];
    assert_eq!(beta.name.as_deref(), Some("beta"));
    assert_eq!(beta.matches[0].path, PathMatch::prefix("/quote").unwrap());
    assert_eq!(beta.matches[0].method, Some(Method::Post));
    assert_eq!(beta.backends[0].target.subset["version"], "v2");
    assert_eq!((beta.backends[0].weight, beta.backends[1].weight), (90, 10));
    assert!(matches!(&beta.filters[1], Filter::RequestMirror(m) if m.percent == 10));
    let Filter::RequestRedirect(r) = &route.rules[1].filters[0] else {
        panic!("a redirect");
    };
    assert_eq!((r.scheme, r.status.code()), (Some(Scheme::Https), 301));
    assert_eq!(route.rules[2].matches, vec![]);

    let routes: Vec<Route> = routes.into_values().collect();
    let h = Some("pricing:8080");
    assert_eq!(
        to(&routes, h, "POST", "/quote/a?id=7", &[("x-beta", "1")]),
        Some("pricing-v2")
    );
    assert_eq!(
        to(&routes, h, G, "/quote/a?id=7", &[("x-beta", "1")]),
        Some("pricing")
    );
    assert_eq!(
        to(&routes, Some("eu.pricing.shop"), G, "/old", &[]),
        Some("(no backend)")
    );
    assert_eq!(to(&routes, Some("other"), G, "/", &[]), None);
}

#[test]
fn a_grpc_service_has_grpc_routes() {
    let text = r"
services:
  ledger:
    protocol: grpc
    routes:
      split:
        rules:
          - matches: [{ method: { service: shop.Ledger, method: Post }, headers: [{ name: v, value: two }] }]
            backends: [{ service: ledger-v2 }]
          - matches: [{ method: { type: RegularExpression, method: Get.* } }]
            backends: [{ service: ledger }]
  ledger-v2: { protocol: grpc }
";
    let ServiceRoutes::Grpc(routes) = routes_of(text, "ledger") else {
        panic!("a gRPC service has GRPCRoutes");
    };
    let routes: Vec<GrpcRoute> = routes.into_values().collect();
    assert_eq!(
        to(&routes, None, "POST", "/shop.Ledger/Post", &[("v", "two")]),
        Some("ledger-v2")
    );
    assert_eq!(
        to(&routes, None, "POST", "/shop.Ledger/GetAll", &[]),
        Some("ledger")
    );
    assert_eq!(to(&routes, None, "POST", "/shop.Ledger/Post", &[]), None);
}

#[test]
fn every_problem_at_once_with_its_path_and_line() {
    let text = r#"
services:
  a:
    routes:
      r:
        hostnames: [Bad_Host]
        rules:
          - name: same
            matches:
              - path: { type: Exact, value: "/a//b" }
                headers: [{ name: x, value: "a\r\nx-evil: 1" }]
                query_params: [{ type: RegularExpression, name: q, value: "(" }]
                method: { service: x.Y }
            filters:
              - type: URLRewrite
                request_redirect: {}
              - { request_mirror: {} }
            backends: [{ service: nowhere, wieght: 2 }]
          - name: same
  g:
    protocol: grpc
    routes:
      s:
        rules: [{ matches: [{ path: { value: /x }, method: GET }] }]
"#;
    assert_eq!(
        problems(text),
        vec![
            "6 services.a.routes.r.hostnames[0]: `Bad_Host` is not a hostname: each label is 1 to 63 lower-case letters, digits or `-`, not starting or ending with `-` (`*.` only in front)",
            "10 services.a.routes.r.rules[0].matches[0].path.value: `/a//b` is not in canonical form; write `/a/b`",
            "11 services.a.routes.r.rules[0].matches[0].headers[0].value: a header value cannot hold a carriage return (CR): `a\\r\\nx-evil: 1`",
            "12 services.a.routes.r.rules[0].matches[0].query_params[0].value: `(` is not a regular expression: regex parse error:\n    (\n    ^\nerror: unclosed group",
            "13 services.a.routes.r.rules[0].matches[0].method: a gRPC method match (`{ service, method }`) on a service that speaks HTTP: write an HTTP method (`GET`), or `protocol: grpc`",
            "15 services.a.routes.r.rules[0].filters[0]: a filter of this type holds `url_rewrite`",
            "16 services.a.routes.r.rules[0].filters[0].request_redirect: unknown field `request_redirect`; known fields: type, url_rewrite",
            "17 services.a.routes.r.rules[0].filters[1]: a filter names its `type`: RequestHeaderModifier, ResponseHeaderModifier, RequestRedirect, URLRewrite or RequestMirror",
            "18 services.a.routes.r.rules[0].backends[0].service: no service `nowhere` in the file",
            "18 services.a.routes.r.rules[0].backends[0].wieght: unknown field `wieght` — did you mean `weight`?",
            "19 services.a.routes.r.rules[1].name: a second rule named `same`",
            "24 services.g.routes.s.rules[0].matches[0].path: a gRPC service's routes match its service and method (`method: { service, method }`) and headers, not `path`",
            "24 services.g.routes.s.rules[0].matches[0].method: `GET`: a gRPC service's routes match `method: { service, method }`",
        ]
    );
}

#[test]
fn a_call_routes_keep_their_meaning() {
    let text = "
services:
  a: { calls: { b: { routes: { read: { path: /r } } } } }
  b: { routes: { all: { rules: [{ backends: [{ service: b }] }] } } }
";
    let mesh = Mesh::from_yaml(text).unwrap();
    let call = mesh.calls().next().unwrap();
    assert_eq!(
        (call.route.as_deref(), call.route_path.as_deref()),
        (Some("read"), Some("/r"))
    );
    assert!(mesh.services["a"].routes.is_empty());
    assert!(!mesh.services["b"].routes.is_empty());
}
