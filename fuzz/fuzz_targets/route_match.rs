//! The route model (`hopwise_model::route::find`) on arbitrary requests against a small fixed
//! table of HTTPRoutes and GRPCRoutes (read from a mesh file, as the proxy will read them):
//! never a panic; a rule found matches the request by its own matchers and its route's
//! hostnames, and when none is found no match of a route whose hostnames cover the request does.
//!
//! Input: the method, the authority (empty: none) and `path?query` on the first three lines,
//! then one header a line, `name: value`.
#![no_main]

use std::sync::LazyLock;

use hopwise_model::Mesh;
use hopwise_model::route::{Matcher, Request, Route, ServiceRoutes, find};
use libfuzzer_sys::fuzz_target;

/// docs/routes.md's example (as in `route/tests/read.rs`), with a regular-expression path, a
/// wildcard hostname, a method-only match and a gRPC regular expression added.
const TABLE: &str = r#"
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
            backends: [{ service: pricing-v2 }]
          - matches:
              - path: { type: Exact, value: /old }
              - path: { type: RegularExpression, value: "/v[0-9]+/.*" }
                headers: [{ type: RegularExpression, name: x-tier, value: "gold|silver" }]
            backends: [{ service: pricing }]
          - backends: [{ service: pricing }]
      admin:
        hostnames: [admin.pricing.shop]
        rules:
          - matches:
              - path: { type: PathPrefix, value: /admin }
                query_params: [{ name: debug, value: "on" }]
              - method: DELETE
            backends: [{ service: pricing-v2 }]
  pricing-v2: {}
  ledger:
    protocol: grpc
    routes:
      split:
        rules:
          - matches:
              - method: { service: shop.Ledger, method: Post }
              - method: { type: RegularExpression, service: "shop\\..*", method: "Get.*" }
                headers: [{ name: x-canary, value: "yes" }]
            backends: [{ service: ledger-v2 }]
          - matches: [{ headers: [{ name: x-region, value: eu }] }]
            backends: [{ service: ledger }]
  ledger-v2: { protocol: grpc }
"#;

static TABLES: LazyLock<(Vec<Route>, Vec<hopwise_model::route::GrpcRoute>)> = LazyLock::new(|| {
    let mesh = Mesh::from_yaml(TABLE).expect("the table is a valid mesh file");
    let ServiceRoutes::Http(http) = mesh.services["pricing"].routes.clone() else {
        panic!("pricing speaks HTTP");
    };
    let ServiceRoutes::Grpc(grpc) = mesh.services["ledger"].routes.clone() else {
        panic!("ledger speaks gRPC");
    };
    (http.into_values().collect(), grpc.into_values().collect())
});

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let method = lines.next().unwrap_or_default();
    let authority = lines.next().filter(|a| !a.is_empty());
    let target = lines.next().unwrap_or_default();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let headers: Vec<(&str, &str)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n, v.trim()))
        .collect();
    let headers = &headers[..];
    let request = Request {
        method,
        authority,
        path,
        query,
        headers: &headers,
    };
    let (http, grpc) = &*TABLES;
    check(http, &request);
    check(grpc, &request);
});

fn check<M: Matcher + PartialEq>(routes: &[Route<M>], request: &Request<'_>) {
    let canonical = hopwise_model::path::normalize(request.path);
    let found = find(routes, request);
    let Ok(path) = canonical else {
        assert!(found.is_none(), "a path with no canonical form matched");
        return;
    };
    let covered = |route: &Route<M>| {
        route.hostnames.is_empty()
            || request
                .host()
                .is_some_and(|h| route.hostnames.iter().any(|n| n.covers(h)))
    };
    match found {
        Some((route, rule, m)) => {
            assert!(covered(route), "a route whose hostnames miss {request:?}");
            assert!(
                m.score(request, &path).is_some(),
                "{request:?}: found a match that does not take it"
            );
            let own = rule.matches.is_empty() && m == M::catch_all() || rule.matches.contains(m);
            assert!(own, "the match found is not its rule's");
        }
        None => {
            for route in routes.iter().filter(|r| covered(r)) {
                for rule in &route.rules {
                    if rule.matches.is_empty() {
                        assert!(M::catch_all().score(request, &path).is_none());
                    }
                    for m in &rule.matches {
                        assert!(
                            m.score(request, &path).is_none(),
                            "{request:?}: nothing found, but a match takes it"
                        );
                    }
                }
            }
        }
    }
}
