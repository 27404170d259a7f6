//! `services.<name>.gateway` read from a mesh file (what it resolves to; every mistake at its
//! line), and which certificate answers which server name.

use crate::Mesh;

use super::*;

const EDGE: &str = r"
mesh: { trust_domain: shop.local }
services:
  edge:
    gateway:
      http: { listen: 0.0.0.0:8080 }
      https:
        listen: 127.0.0.1:8443
        certificates:
          - { hostnames: [shop.example], cert: shop.pem, key: shop-key.pem }
          - { hostnames: [api.example, '*.api.example'], cert: api.pem, key: api-key.pem }
      rate_limit: { total: { rate: 100, burst: 20 }, per_client: { rate: 5 } }
    routes:
      front:
        hostnames: [shop.example]
        rules: [{ backends: [{ service: web }] }]
    calls: { web: { timeout: 2s } }
  web:
    allow: [edge]
";

#[test]
fn a_gateway_reads_with_its_listeners_certificates_and_limits() {
    let mesh = Mesh::from_yaml(EDGE).expect("valid");
    let g = mesh.services["edge"].gateway.as_ref().expect("a gateway");
    assert_eq!(g.http, Some("0.0.0.0:8080".parse().unwrap()));
    let https = g.https.as_ref().expect("https");
    assert_eq!(https.listen, "127.0.0.1:8443".parse().unwrap());
    assert_eq!(https.certificates.len(), 2);
    assert_eq!(https.certificates[1].cert, "api.pem");
    assert_eq!(
        g.total,
        Some(Limit {
            rate: 100,
            burst: 20
        })
    );
    assert_eq!(g.per_client, Some(Limit { rate: 5, burst: 5 }));
    assert_eq!(g.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    assert_eq!(g.body_timeout, DEFAULT_BODY_TIMEOUT);
    // Its identity is a service's, which `allow` names.
    assert_eq!(mesh.identity("edge"), "spiffe://shop.local/service/edge");
    assert!(mesh.services["web"].gateway.is_none());
}

#[test]
fn the_server_name_picks_exact_then_the_longest_wildcard_and_nothing_else() {
    let mesh = Mesh::from_yaml(EDGE).expect("valid");
    let https = mesh.services["edge"]
        .gateway
        .clone()
        .unwrap()
        .https
        .unwrap();
    let pick = |name: Option<&str>| https.certificate_for(name);
    assert_eq!(pick(Some("shop.example")), Some(0));
    assert_eq!(
        pick(Some("SHOP.Example.")),
        Some(0),
        "any case, a final dot"
    );
    assert_eq!(pick(Some("api.example")), Some(1));
    assert_eq!(pick(Some("v1.api.example")), Some(1), "the wildcard");
    assert_eq!(pick(Some("a.b.api.example")), Some(1), "one or more labels");
    // Unknown, a suffix trick, none at all: no certificate (the handshake is refused).
    assert_eq!(pick(Some("evil.example")), None);
    assert_eq!(pick(Some("xshop.example")), None);
    assert_eq!(pick(Some("shop.example.evil")), None);
    assert_eq!(pick(None), None);
    // An exact name outranks a wildcard written first.
    let both = Https {
        listen: "127.0.0.1:1".parse().unwrap(),
        certificates: vec![
            cert(&["*.example"]),
            cert(&["*.a.example"]),
            cert(&["b.a.example"]),
        ],
    };
    assert_eq!(both.certificate_for(Some("b.a.example")), Some(2));
    assert_eq!(both.certificate_for(Some("c.a.example")), Some(1));
    assert_eq!(both.certificate_for(Some("c.example")), Some(0));
}

fn cert(names: &[&str]) -> Certificate {
    Certificate {
        hostnames: names.iter().map(|n| Hostname::new(n).unwrap()).collect(),
        cert: String::new(),
        key: String::new(),
    }
}

#[test]
fn a_body_timeout_is_a_duration_longer_than_zero() {
    let with = |value: &str| {
        EDGE.replace(
            "      rate_limit:",
            &format!("      body_timeout: {value}\n      rate_limit:"),
        )
    };
    let mesh = Mesh::from_yaml(&with("5s")).expect("valid");
    let g = mesh.services["edge"].gateway.as_ref().expect("a gateway");
    assert_eq!(
        g.body_timeout,
        crate::Dur(std::time::Duration::from_secs(5))
    );
    for (bad, says) in [("0s", "longer than zero"), ("30", "has no unit")] {
        let errors = Mesh::from_yaml(&with(bad)).expect_err(bad).0;
        let (line, message) =
            crate::diag::problem_at(&errors, "services.edge.gateway.body_timeout");
        assert_eq!(line, Some(12), "{bad}");
        assert!(message.contains(says), "{bad}: {message}");
    }
}

#[test]
fn every_mistake_is_reported_with_its_line() {
    let text = r"
services:
  edge:
    sample: chain
    gateway:
      http: { listen: 'localhost:80' }
      https:
        listen: 127.0.0.1:8443
        certificates:
          - { hostnames: [shop.example, Bad_Name], cert: a.pem, key: a-key.pem }
          - { hostnames: [shop.example], cert: b.pem }
      rate_limit: { total: { burst: 3 } }
      max_body: 10
    routes:
      r:
        rules: [{ backends: [{ service: web }, { service: api }] }]
    calls: { web: {} }
  web: {}
  api:
    calls: { edge: {} }
";
    let errors = Mesh::from_yaml(text).expect_err("refused").0;
    let at = |path: &str| crate::diag::problem_at(&errors, path);
    let (line, message) = at("services.edge.sample");
    assert_eq!(line, Some(4));
    assert!(message.contains("no app"), "{message}");
    let (line, message) = at("services.edge.gateway.http.listen");
    assert_eq!(line, Some(6));
    assert!(message.contains("not an address"), "{message}");
    let (line, message) = at("services.edge.gateway.https.certificates[0].hostnames[1]");
    assert_eq!(line, Some(10));
    assert!(message.contains("not a hostname"), "{message}");
    let (line, message) = at("services.edge.gateway.https.certificates[1]");
    assert_eq!(line, Some(11));
    assert!(message.contains("`key` is missing"), "{message}");
    let (line, message) = at("services.edge.gateway.rate_limit.total");
    assert_eq!(line, Some(12));
    assert!(message.contains("needs `rate`"), "{message}");
    let (line, message) = at("services.edge.gateway.max_body");
    assert_eq!(line, Some(13));
    assert!(message.contains("max_body_bytes"), "{message}");
    let (line, message) = at("services.edge.routes.r.rules[0].backends[1].service");
    assert_eq!(line, Some(16));
    assert!(message.contains("does not call `api`"), "{message}");
    let (line, message) = at("services.api.calls.edge");
    assert_eq!(line, Some(20));
    assert!(message.contains("is a gateway"), "{message}");
}

#[test]
fn a_name_served_twice_and_a_gateway_without_listener_or_routes_are_refused() {
    let text = r"
services:
  edge:
    gateway:
      https:
        listen: 127.0.0.1:0
        certificates:
          - { hostnames: [shop.example], cert: a.pem, key: a-key.pem }
          - { hostnames: [shop.example], cert: b.pem, key: b-key.pem }
  other:
    gateway: {}
";
    let errors = Mesh::from_yaml(text).expect_err("refused").0;
    let at = |path: &str| crate::diag::problem_at(&errors, path);
    let (line, message) = at("services.edge.gateway.https.certificates[1].hostnames[0]");
    assert_eq!(line, Some(9));
    assert!(message.contains("certificates[0] already"), "{message}");
    let (line, message) = at("services.edge.gateway");
    assert_eq!(line, Some(4));
    assert!(message.contains("has none"), "{message}");
    let (line, message) = at("services.other.gateway");
    assert_eq!(line, Some(11));
    assert!(
        errors
            .iter()
            .any(|d| d.message.contains("needs a listener")),
        "{message}"
    );
}

#[test]
fn trusted_proxies_are_address_ranges_each_checked_at_its_line() {
    let with = |value: &str| {
        EDGE.replace(
            "      rate_limit:",
            &format!("      trusted_proxies: {value}\n      rate_limit:"),
        )
    };
    let mesh = Mesh::from_yaml(&with("[10.0.0.0/8, '2001:db8::/32']")).expect("valid");
    let g = mesh.services["edge"].gateway.as_ref().expect("a gateway");
    assert_eq!(g.trusted_proxies.len(), 2);
    assert!(g.trusted_proxies[0].contains([10, 1, 2, 3].into()));
    assert!(
        Mesh::from_yaml(EDGE).unwrap().services["edge"]
            .gateway
            .as_ref()
            .unwrap()
            .trusted_proxies
            .is_empty()
    );
    let errors = Mesh::from_yaml(&with("[10.0.0.0/8, 10.0.0.1]"))
        .expect_err("no prefix")
        .0;
    let (line, _) = crate::diag::problem_at(&errors, "services.edge.gateway.trusted_proxies[1]");
    assert_eq!(line, Some(12));
}
