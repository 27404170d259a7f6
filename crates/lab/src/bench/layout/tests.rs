//! `bench/layout.rs`'s tests: every configuration names the right ports and certificates.

use super::*;
use hopwise_model::Mesh;
use hopwise_proxy::ProxyConfig;
use hopwise_proxy::config::Target;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[test]
fn a_chain_links_each_inbound_to_the_next_outbound_and_the_last_to_the_backend() {
    let ports: Vec<SocketAddr> = (1..=6).map(addr).collect();
    let c = chain(&ports, addr(9));
    assert_eq!(c.len(), 3);
    assert_eq!(
        (c[0].out, c[0].inbound, c[0].app),
        (addr(1), addr(2), addr(3))
    );
    assert_eq!(
        (c[1].out, c[1].inbound, c[1].app),
        (addr(3), addr(4), addr(5))
    );
    assert_eq!(
        (c[2].out, c[2].inbound, c[2].app),
        (addr(5), addr(6), addr(9))
    );
    assert!(chain(&[], addr(9)).is_empty());
}

#[test]
fn the_opaque_hop_mesh_makes_the_callee_tcp() {
    let ports = HopPorts {
        out: addr(4001),
        inbound: addr(4002),
        app: addr(4003),
    };
    let text = hop_mesh(1, &ports, Path::new("/tmp/hop-1"), true);
    let mesh = Mesh::from_yaml(&text).unwrap_or_else(|d| panic!("{}\n{text}", d.render("hop")));
    let out = ProxyConfig::from_mesh(&mesh, CALLER, 0, Path::new("/tmp"), None).unwrap();
    assert!(out.clusters[CALLEE].whole_tcp(), "{text}");
}

#[test]
fn the_hop_mesh_is_a_valid_mesh_with_both_proxies_configured() {
    let ports = HopPorts {
        out: addr(4001),
        inbound: addr(4002),
        app: addr(4003),
    };
    let certs = Path::new("/tmp/some dir/hop-1");
    let text = hop_mesh(1, &ports, certs, false);
    let mesh = match Mesh::from_yaml(&text) {
        Ok(m) => m,
        Err(d) => panic!("{}\n{text}", d.render("hop-1.yaml")),
    };
    assert_eq!(mesh.certs.as_deref(), Some("/tmp/some dir/hop-1"));
    assert_eq!(mesh.identity(CALLEE), callee_identity());

    let base = Path::new("/tmp");
    let out = ProxyConfig::from_mesh(&mesh, CALLER, 0, base, None).unwrap();
    assert_eq!(out.upstream_ports.get(CALLEE), Some(&addr(4001)));
    assert_eq!(out.inbound, None);
    match &out.clusters[CALLEE].target {
        Target::Mesh {
            endpoints,
            identity,
            ..
        } => {
            assert_eq!(endpoints, &vec![addr(4002)]);
            assert_eq!(identity, &callee_identity());
        }
        other => panic!("{other:?}"),
    }
    let timeout = out.clusters[CALLEE].routes[0].policy.timeout;
    assert_eq!(timeout.map(|d| d.get().as_secs()), Some(2));

    let inb = ProxyConfig::from_mesh(&mesh, CALLEE, 0, base, None).unwrap();
    assert_eq!(inb.inbound, Some(addr(4002)));
    assert_eq!(inb.app, Some(addr(4003)));
    assert!(inb.upstream_ports.is_empty());
    // No `allow` in the hop's mesh file: any identity of the mesh may call (the default).
    assert!(inb.allowed_callers.is_empty() && !inb.deny_all);
    assert_eq!(
        inb.certs.as_ref().map(|c| c.cert.clone()),
        Some(certs.join("callee.pem"))
    );
}

#[test]
fn one_mesh_file_cannot_hold_two_hops_which_is_why_each_hop_has_its_own() {
    // The inbound side of hop 1 forwards into hop 2's outbound port: same address, refused.
    let text = "services:\n  a:\n    copies: [{ upstreams: { b: \"127.0.0.1:1\" } }]\n    calls: { b: {} }\n  b:\n    copies: [{ inbound: \"127.0.0.1:2\", app: \"127.0.0.1:3\" }, { upstreams: { c: \"127.0.0.1:3\" } }]\n    calls: { c: {} }\n  c:\n    copies: [{ inbound: \"127.0.0.1:4\", app: \"127.0.0.1:5\" }]\n";
    let err = Mesh::from_yaml(text).unwrap_err();
    assert!(
        err.render("m").contains("already used"),
        "{}",
        err.render("m")
    );
}

fn certs() -> HopCerts {
    HopCerts::in_dir(Path::new("/c/hop-2"))
}

#[test]
fn nginx_sides_keep_connections_alive_and_use_the_hop_certificates() {
    let p = HopPorts {
        out: addr(1),
        inbound: addr(2),
        app: addr(3),
    };
    let dir = Path::new("/d");
    let out = Peer::Nginx.config(Side::Out, &p, Mode::Mtls, &certs(), 2, dir);
    assert!(out.contains("worker_processes 2;"));
    assert!(out.contains("listen 127.0.0.1:1;"));
    assert!(out.contains("server 127.0.0.1:2;"));
    assert!(out.contains("keepalive 32;"));
    assert!(out.contains("proxy_pass https://next;"));
    assert!(out.contains("proxy_ssl_certificate \"/c/hop-2/caller.pem\";"));
    assert!(out.contains("proxy_ssl_protocols TLSv1.3;"));
    let plain = Peer::Nginx.config(Side::Out, &p, Mode::Plain, &certs(), 1, dir);
    assert!(plain.contains("proxy_pass http://next;") && !plain.contains("ssl"));
    let inb = Peer::Nginx.config(Side::In, &p, Mode::Mtls, &certs(), 1, dir);
    assert!(inb.contains("listen 127.0.0.1:2 ssl;"));
    assert!(inb.contains("ssl_verify_client on;"));
    assert!(inb.contains("server 127.0.0.1:3;"));
    assert_eq!(out.matches('{').count(), out.matches('}').count(), "{out}");
    assert_eq!(inb.matches('{').count(), inb.matches('}').count());
}

#[test]
fn haproxy_and_envoy_sides_name_the_right_ports_and_certificates() {
    let p = HopPorts {
        out: addr(1),
        inbound: addr(2),
        app: addr(3),
    };
    let d = Path::new("/d");
    let out = Peer::Haproxy.config(Side::Out, &p, Mode::Mtls, &certs(), 2, d);
    assert!(out.contains("nbthread 2"));
    assert!(out.contains("bind 127.0.0.1:1\n"));
    assert!(out.contains(
        "server next 127.0.0.1:2 ssl crt \"/c/hop-2/caller-bundle.pem\" ca-file \"/c/hop-2/ca.pem\" verify required verifyhost callee"
    ));
    let inb = Peer::Haproxy.config(Side::In, &p, Mode::Plain, &certs(), 2, d);
    assert!(inb.contains("bind 127.0.0.1:2\n") && inb.contains("server app 127.0.0.1:3\n"));
    let eo = Peer::Envoy.config(Side::Out, &p, Mode::Mtls, &certs(), 2, d);
    assert!(eo.contains("port_value: 1 ") && eo.contains("port_value: 2 "));
    assert!(eo.contains("UpstreamTlsContext") && eo.contains(&callee_identity()));
    let ei = Peer::Envoy.config(Side::In, &p, Mode::Mtls, &certs(), 2, d);
    assert!(ei.contains("require_client_certificate: true"));
    assert!(
        !Peer::Envoy
            .config(Side::In, &p, Mode::Plain, &certs(), 2, d)
            .contains("transport_socket")
    );
    assert_eq!(
        Peer::Envoy.args(Path::new("/x.yaml"), d, 2)[..4],
        ["-c", "/x.yaml", "--concurrency", "2"]
    );
}
