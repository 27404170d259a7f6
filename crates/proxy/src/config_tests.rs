#![allow(clippy::unwrap_used)]

use std::path::Path;

use hopwise_model::Mesh;

use super::ProxyConfig;

fn config() -> ProxyConfig {
    let mesh = Mesh::from_yaml(
        "mesh: { name: names, trust_domain: shop.local }
services:
  web:
    copies: [{ inbound: 127.0.0.1:7001, upstreams: { pricing: 127.0.0.1:7003 } }]
    calls: { pricing: { timeout: 2s } }
  pricing:
    copies: [{ inbound: 127.0.0.1:7101, app: 127.0.0.1:7102 }]
",
    )
    .unwrap();
    ProxyConfig::from_mesh(&mesh, "web", 0, Path::new("/tmp"), Some(Path::new("/c"))).unwrap()
}

/// The forms a caller's `Host` takes for a service (captured and `http_proxy` calls are
/// routed by it), in any case, and the ones that must not reach it.
#[test]
fn a_host_names_its_service_in_every_form_and_nothing_else() {
    let c = config();
    let named = |host: &str| c.cluster_for_host(host).map(|c| c.service.as_str());
    for host in [
        "pricing",
        "pricing:80",
        "pricing.",
        "pricing.shop.local",
        "pricing.shop.local.:8080",
        "PRICING",
        "Pricing.Shop.Local:80",
    ] {
        assert_eq!(named(host), Some("pricing"), "{host}");
    }
    for host in [
        "pricing.elsewhere.example",
        "pricing.shop.local.evil",
        "web-pricing",
        "",
        "pricing:http",
        "127.0.0.1:7003",
    ] {
        assert_eq!(named(host), None, "{host}");
    }
}
