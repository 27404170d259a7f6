use std::net::{IpAddr, Ipv4Addr};

use super::*;

fn mesh(yaml: &str) -> Mesh {
    Mesh::from_yaml(yaml).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const SHOP: &str = "
services:
  web:
    calls: { fee: {} }
  fee:
    copies: 2
  bank:
    external: { address: 'bank.example:443' }
    address: 192.0.2.7
";

#[test]
fn services_get_the_first_slash_24_in_file_order_unless_declared() {
    let m = mesh(SHOP);
    assert_eq!(m.services["web"].address, Some(ip("100.77.0.1")));
    assert_eq!(m.services["fee"].address, Some(ip("100.77.0.2")));
    assert_eq!(m.services["bank"].address, Some(ip("192.0.2.7")));
    assert_eq!(
        m.capture.egress,
        Egress::Refuse,
        "refuse unless the file says pass"
    );
}

#[test]
fn each_copy_has_its_own_slash_30_after_the_services() {
    let m = mesh(SHOP);
    let web = m.copy_net("web", 0).unwrap();
    assert_eq!(
        (web.host, web.app),
        (Ipv4Addr::new(100, 77, 1, 1), Ipv4Addr::new(100, 77, 1, 2))
    );
    // fee is the second service: its copies start 100 blocks of 4 later.
    let fee1 = m.copy_net("fee", 1).unwrap();
    assert_eq!(fee1.app, Ipv4Addr::new(100, 77, 2, 150));
    assert_eq!(
        m.copy_net("fee", 100),
        None,
        "past the copies a service may have"
    );
    assert_eq!(m.copy_net("nobody", 0), None);
}

#[test]
fn destinations_map_to_services_by_address_or_copy_and_the_rest_to_egress() {
    let m = Destinations::of(&mesh(SHOP));
    assert_eq!(
        m.get(ip("::ffff:100.77.0.2")),
        Destination::Service("fee"),
        "v4 through a v6 socket"
    );
    assert_eq!(m.get(ip("100.77.0.2")), Destination::Service("fee"));
    assert_eq!(m.get(ip("100.77.2.150")), Destination::Service("fee"));
    assert_eq!(m.get(ip("192.0.2.7")), Destination::Service("bank"));
    assert_eq!(m.get(ip("100.77.0.9")), Destination::Egress(Egress::Refuse));
    assert_eq!(
        m.get(ip("2001:db8::1")),
        Destination::Egress(Egress::Refuse)
    );
    assert_eq!(
        m.get(ip("100.77.2.149")),
        Destination::Egress(Egress::Refuse),
        "the host's end is not fee's"
    );
    let pass = Destinations::of(&mesh(
        "mesh: { capture: { egress: pass } }\nservices: { a: {} }",
    ));
    assert_eq!(
        pass.get(ip("203.0.113.1")),
        Destination::Egress(Egress::Pass)
    );
}

#[test]
fn a_small_range_shifts_every_address_with_it() {
    let m = mesh(
        "mesh: { capture: { range: 10.9.0.0/22, skip_ports: [22], skip_cidrs: [10.0.0.0/8] } }\nservices: { a: {} }",
    );
    assert_eq!(m.services["a"].address, Some(ip("10.9.0.1")));
    assert_eq!(m.copy_net("a", 0).unwrap().app, Ipv4Addr::new(10, 9, 1, 2));
    assert_eq!(m.capture.skip_ports, [22]);
    assert_eq!(m.capture.skip_cidrs[0].to_string(), "10.0.0.0/8");
    assert!(
        !m.capture.up,
        "up runs its samples captured only when asked"
    );
}

#[test]
fn up_runs_its_samples_captured_when_the_file_says_so() {
    let m = mesh("mesh: { capture: { up: true } }\nservices: { a: {} }");
    assert!(m.capture.up);
    let p = problems("mesh:\n  capture:\n    up: yes please\nservices: { a: {} }\n");
    assert_eq!(
        p,
        ["mesh.capture.up:3: expected `true` or `false`, found a string"],
        "{p:?}"
    );
}

fn problems(yaml: &str) -> Vec<String> {
    Mesh::from_yaml(yaml)
        .unwrap_err()
        .0
        .iter()
        .map(|d| format!("{}:{}: {}", d.path, d.pos.map_or(0, |p| p.line), d.message))
        .collect()
}

#[test]
fn bad_values_name_their_field_and_line() {
    let p = problems(
        "mesh:\n  capture:\n    range: 10.9.0.0/24\n    egress: allow\n    skip_ports: [0]\n    skip_cidrs: [10.0.0.1/8]\nservices:\n  a:\n    address: 127.0.0.1\n  b:\n    address: fee\n",
    );
    let joined = p.join("\n");
    assert!(
        joined.contains(
            "mesh.capture.range:3: `10.9.0.0/24`: the capture range is an IPv4 range from /8 to /22"
        ),
        "{joined}"
    );
    assert!(
        joined.contains("mesh.capture.egress:4: unknown value `allow`"),
        "{joined}"
    );
    assert!(
        joined.contains("mesh.capture.skip_ports[0]:5: port 0"),
        "{joined}"
    );
    assert!(joined.contains("mesh.capture.skip_cidrs[0]:6: `10.0.0.1/8` has bits past its prefix: write `10.0.0.0/8`"), "{joined}");
    assert!(
        joined.contains("services.a.address:9: `127.0.0.1` cannot be a service's address"),
        "{joined}"
    );
    assert!(
        joined.contains("services.b.address:11: `fee` is not an IP address"),
        "{joined}"
    );
}

#[test]
fn two_services_on_one_address_or_one_in_the_copies_part_are_refused() {
    let p = problems(
        "services:\n  a:\n    address: 100.77.0.2\n  b: {}\n  c:\n    address: 100.77.5.5\n",
    );
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p[0].starts_with("services.b.address:4: 100.77.0.2 is also a's address"),
        "{p:?}"
    );
    assert!(
        p[1].starts_with("services.c.address:6: 100.77.5.5 is in the part of mesh.capture.range"),
        "{p:?}"
    );
}

#[test]
fn cidrs_contain_what_their_prefix_covers() {
    let c: Cidr = "10.1.0.0/16".parse().unwrap();
    assert!(c.contains(ip("10.1.255.3")));
    assert!(!c.contains(ip("10.2.0.0")));
    assert!(!c.contains(ip("::1")));
    let v6: Cidr = "fd00::/8".parse().unwrap();
    assert!(v6.contains(ip("fd12::1")));
    assert!("10.0.0.0/33".parse::<Cidr>().is_err());
    assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains(ip("8.8.8.8")));
}

#[test]
fn past_254_services_addresses_come_from_the_top_and_copies_stay_below_them() {
    let mut yaml = String::from("services:\n");
    for i in 0..1000 {
        yaml.push_str(&format!("  s{i}: {{}}\n"));
    }
    let m = mesh(&yaml);
    assert_eq!(m.services["s0"].address, Some(ip("100.77.0.1")));
    assert_eq!(m.services["s253"].address, Some(ip("100.77.0.254")));
    assert_eq!(m.services["s254"].address, Some(ip("100.77.255.254")));
    assert_eq!(m.services["s999"].address, Some(ip("100.77.253.21")));
    // Every address distinct, none inside a copy's link.
    let mut all: Vec<IpAddr> = m.services.values().filter_map(|s| s.address).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 1000);
    let copies: Vec<Ipv4Addr> = (0..1000)
        .filter_map(|i| m.copy_net(&format!("s{i}"), 0))
        .flat_map(|n| [n.host, n.app])
        .collect();
    assert!(!copies.is_empty());
    assert!(copies.iter().all(|c| !all.contains(&IpAddr::V4(*c))));
    // The copies' part ends below the top's services: s161's first copy fits a /16, s162's not.
    assert!(m.copy_net("s161", 0).is_some());
    assert_eq!(m.copy_net("s162", 0), None, "widen the range for it");
}

#[test]
fn a_range_too_small_for_its_services_says_so() {
    let mut yaml = String::from("mesh: { capture: { range: 10.9.0.0/22 } }\nservices:\n");
    for i in 0..1100 {
        yaml.push_str(&format!("  s{i}: {{}}\n"));
    }
    // A /22 holds 1,024 addresses: past the first /24 and a copy's /30, the top runs out.
    let p = problems(&yaml);
    assert!(!p.is_empty());
    assert!(
        p.iter()
            .all(|l| l.contains("no address left for this service")),
        "{p:?}"
    );
}
