//! A capture listener's destinations follow the mesh file served: an address the control
//! plane adds later (a Kubernetes Service's ClusterIP) maps connections to its service.

use std::net::IpAddr;
use std::path::Path;

use hopwise_model::capture::{Destination, Destinations};

use super::*;
use crate::config::CaptureConfig;

const MESH: &str = "mesh: { trust_domain: shop.local }
services:
  web: { calls: { api: {} } }
  api: {}
";

#[test]
fn a_new_mesh_files_addresses_reach_the_capture_listener_and_its_socket_stays() {
    let mesh = Mesh::from_yaml(MESH).unwrap();
    let mut config = ProxyConfig::from_mesh(&mesh, "web", 0, Path::new("/tmp"), None).unwrap();
    let listen = "127.0.0.1:4140".parse().unwrap();
    config.capture = Some(CaptureConfig {
        netns: None,
        listen,
        destinations: Destinations::of(&mesh),
    });
    let cluster_ip: IpAddr = "10.96.0.10".parse().unwrap();
    let of = |c: &ProxyConfig| {
        matches!(
            c.capture.as_ref().unwrap().destinations.get(cluster_ip),
            Destination::Service("api")
        )
    };
    assert!(!of(&config));
    let served = MESH.replace("  api: {}", "  api: { address: 10.96.0.10 }");
    let next = with_destinations(config, &served);
    assert!(of(&next));
    assert_eq!(next.capture.as_ref().unwrap().listen, listen);
    // A file that does not read leaves them as they were (it is refused before this anyway).
    let kept = with_destinations(next, "services: [");
    assert!(of(&kept));
}
