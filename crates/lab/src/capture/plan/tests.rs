use super::*;

const MESH: &str = "
mesh: { trust_domain: shop.test, capture: { skip_ports: [22], skip_cidrs: [10.0.0.0/8, 'fd00::/8'] } }
services:
  web:
    copies: [{ app: '127.0.0.1:7001', inbound: '127.0.0.1:7101' }]
    calls: { fee: {} }
  fee:
    address: 192.0.2.9
  probe:
    calls: { fee: {} }
";

fn mesh() -> Mesh {
    Mesh::from_yaml(MESH).unwrap()
}

#[test]
fn names_come_only_from_an_id_of_eight_hex_digits() {
    let n = Names::of("0badcafe").unwrap();
    assert_eq!(n.netns, "hopwise-0badcafe");
    assert_eq!(
        (n.veth_host.as_str(), n.veth_app.as_str()),
        ("hw0badcafeh", "hw0badcafea")
    );
    assert!(
        n.veth_host.len() <= 15,
        "the kernel's limit on interface names"
    );
    assert_eq!(n.netns_path(), "/run/netns/hopwise-0badcafe");
    assert_eq!(n.etc_dir(), "/etc/netns/hopwise-0badcafe");
    for bad in ["0BADCAFE", "0badcaf", "../../etc", "0badcafe0", ""] {
        assert_eq!(Names::of(bad), None, "{bad}");
    }
}

#[test]
fn a_copy_gets_its_link_its_app_port_and_every_service_address() {
    let p = plan(&mesh(), "web", 0, Names::of("00000001").unwrap()).unwrap();
    assert_eq!(p.net.app.to_string(), "100.77.1.2");
    assert_eq!(p.app_port, Some(7001));
    assert_eq!(p.app_from_host, Some("100.77.1.2:7001".parse().unwrap()));
    let addrs: Vec<String> = p
        .service_addresses
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(addrs, ["100.77.0.1", "192.0.2.9", "100.77.0.3"]);
    assert!(
        p.hosts.contains("192.0.2.9\tfee fee.shop.test\n"),
        "{}",
        p.hosts
    );
    assert!(p.hosts.contains("127.0.0.1\tlocalhost\n"));
}

#[test]
fn the_rules_redirect_outbound_tcp_but_loopback_and_the_skips_and_guard_the_app() {
    let p = plan(&mesh(), "web", 0, Names::of("00000001").unwrap()).unwrap();
    let r = &p.rules;
    // One table for both families: IPv6 has no way around the proxy (issue 28).
    assert!(r.starts_with("table inet hopwise {\n"), "{r}");
    let order = [
        "ip daddr 127.0.0.0/8 return",
        "ip6 daddr { ::1, fe80::/10 } return",
        "tcp dport { 22 } return",
        "ip daddr { 10.0.0.0/8 } return",
        "ip6 daddr { fd00::/8 } return",
        "meta l4proto tcp redirect to :4140",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|l| r.find(l).unwrap_or_else(|| panic!("{l}\n{r}")))
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "returns come before the redirect:\n{r}"
    );
    assert!(
        r.contains(
            "iifname \"hw00000001a\" ip saddr 100.77.1.1 tcp dport 7001 dnat ip to 127.0.0.1:7001"
        ),
        "{r}"
    );
    // Matched by `meta l4proto`, not `ip protocol`: IPv6's new connections are dropped too.
    assert!(
        r.contains("iifname \"hw00000001a\" meta l4proto tcp drop"),
        "{r}"
    );
}

#[test]
fn calls_to_service_addresses_skip_nat_and_conntrack_by_tproxy_and_keep_the_skips() {
    let p = plan(&mesh(), "web", 0, Names::of("00000001").unwrap()).unwrap();
    let r = &p.rules;
    // Every IPv4 service address, none of the IPv6 ones.
    assert!(
        r.contains("elements = { 100.77.0.1, 192.0.2.9, 100.77.0.3 }"),
        "{r}"
    );
    // Both directions untracked (an answer tracked mid-stream would meet `out`'s redirect).
    let untracked = &r[r.find("chain untracked").unwrap()..];
    assert!(
        untracked.contains("type filter hook output priority raw;")
            && untracked.contains("oifname \"lo\" ip daddr @services notrack")
            && untracked.contains("oifname \"lo\" ip saddr @services notrack"),
        "{r}"
    );
    let to = &r[r.find("chain to_services").unwrap()..];
    let order = [
        "type filter hook prerouting priority mangle;",
        "iifname != \"lo\" return",
        "tcp dport { 22 } return",
        "ip daddr { 10.0.0.0/8 } return",
        "ip daddr @services tcp flags syn / fin,syn,rst,ack counter tproxy ip to 127.0.0.1:4140",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|l| to.find(l).unwrap_or_else(|| panic!("{l}\n{r}")))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{r}");
}

#[test]
fn without_an_ipv4_service_address_there_is_nothing_to_tproxy() {
    let m = Mesh::from_yaml(
        "mesh: { trust_domain: t.test }\nservices:\n  web:\n    address: 'fd00::9'\n    copies: [{ app: '127.0.0.1:7001' }]\n",
    )
    .unwrap();
    let p = plan(&m, "web", 0, Names::of("00000001").unwrap()).unwrap();
    assert!(!p.rules.contains("@services"), "{}", p.rules);
    assert!(p.rules.contains("redirect to :4140"), "{}", p.rules);
}

#[test]
fn a_copy_without_an_app_drops_every_new_inbound_connection() {
    let p = plan(&mesh(), "probe", 0, Names::of("00000002").unwrap()).unwrap();
    assert_eq!(p.app_port, None);
    assert!(!p.rules.contains("dnat"), "{}", p.rules);
    assert!(p.rules.contains("meta l4proto tcp drop"));
    let only_tcp = &p.rules[p.rules.find("chain only_tcp").unwrap()..];
    assert!(
        only_tcp.contains(
            "oifname \"lo\" accept\n\t\tip6 daddr fe80::/10 meta l4proto tcp reject with tcp reset\n\t\tmeta l4proto tcp accept\n\t\treject"
        ),
        "{}",
        p.rules
    );
}

#[test]
fn the_setup_builds_the_link_then_the_addresses() {
    let p = plan(&mesh(), "web", 0, Names::of("00000001").unwrap()).unwrap();
    let cmds: Vec<String> = setup(&p).iter().map(|c| c.join(" ")).collect();
    assert_eq!(cmds[0], "netns add hopwise-00000001");
    assert_eq!(
        cmds[1],
        "link add hw00000001h type veth peer name hw00000001a netns hopwise-00000001"
    );
    assert!(cmds.contains(&"-n hopwise-00000001 route add default via 100.77.1.1".to_owned()));
    assert!(cmds.contains(&"-n hopwise-00000001 addr add 192.0.2.9/32 dev lo".to_owned()));
}

#[test]
fn unknown_services_and_copies_past_the_range_are_refused() {
    let m = mesh();
    assert_eq!(
        plan(&m, "nope", 0, Names::of("00000001").unwrap()),
        Err(PlanError::UnknownService("nope".into()))
    );
    assert!(matches!(
        plan(&m, "web", 100, Names::of("00000001").unwrap()),
        Err(PlanError::NoRoom { .. })
    ));
}

#[test]
fn a_copy_whose_port_up_chose_lets_the_host_reach_that_port() {
    // `probe` lists no copy, so no app port: `hopwise up` gives the one it chose.
    let p = plan_app(
        &mesh(),
        "probe",
        1,
        Some(40123),
        Names::of("00000003").unwrap(),
    )
    .unwrap();
    assert_eq!(p.app_port, Some(40123));
    assert_eq!(p.app_from_host, Some("100.77.4.38:40123".parse().unwrap()));
    assert!(
        p.rules
            .contains("ip saddr 100.77.4.37 tcp dport 40123 dnat ip to 127.0.0.1:40123"),
        "{}",
        p.rules
    );
    assert_eq!(
        plan_app(&mesh(), "nope", 0, Some(1), Names::of("00000003").unwrap()),
        Err(PlanError::UnknownService("nope".into()))
    );
}

#[test]
fn without_nft_the_same_rules_go_to_iptables_restore_table_by_table() {
    let p = plan(&mesh(), "web", 0, Names::of("00000001").unwrap()).unwrap();
    let svc = ["100.77.0.1", "192.0.2.9", "100.77.0.3"];
    let mut want = String::from("# written by hopwise run: this namespace's rules only\n");
    want.push_str("*raw\n:OUTPUT ACCEPT [0:0]\n");
    for a in svc {
        want.push_str(&format!(
            "-A OUTPUT -o lo -d {a}/32 -j CT --notrack\n-A OUTPUT -o lo -s {a}/32 -j CT --notrack\n"
        ));
    }
    want.push_str("COMMIT\n*mangle\n:PREROUTING ACCEPT [0:0]\n");
    want.push_str("-A PREROUTING -i lo -p tcp --dport 22 -j RETURN\n");
    want.push_str("-A PREROUTING -i lo -d 10.0.0.0/8 -j RETURN\n");
    for a in svc {
        want.push_str(&format!(
            "-A PREROUTING -i lo -p tcp --syn -d {a}/32 -j TPROXY --on-ip 127.0.0.1 --on-port 4140\n"
        ));
    }
    want.push_str(
        "COMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         -A OUTPUT -d 127.0.0.0/8 -j RETURN\n\
         -A OUTPUT -p tcp --dport 22 -j RETURN\n\
         -A OUTPUT -d 10.0.0.0/8 -j RETURN\n\
         -A OUTPUT -p tcp -j REDIRECT --to-ports 4140\n\
         -A PREROUTING -i hw00000001a -s 100.77.1.1/32 -p tcp --dport 7001 -j DNAT --to-destination 127.0.0.1:7001\n\
         COMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         -A INPUT -i hw00000001a -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n\
         -A INPUT -i hw00000001a -s 100.77.1.1/32 -p tcp --dport 7001 -j ACCEPT\n\
         -A INPUT -i hw00000001a -p tcp -j DROP\n\
         -A OUTPUT -o lo -j ACCEPT\n-A OUTPUT -p tcp -j ACCEPT\n-A OUTPUT -j REJECT\nCOMMIT\n",
    );
    assert_eq!(p.iptables, want);
}

#[test]
fn iptables_without_an_app_or_service_addresses_keeps_the_redirect_and_the_guards() {
    let m = Mesh::from_yaml(
        "mesh: { trust_domain: t.test }\nservices:\n  web:\n    address: 'fd00::9'\n    copies: [{ inbound: '127.0.0.1:7101' }]\n",
    )
    .unwrap();
    let r = plan(&m, "web", 0, Names::of("00000001").unwrap())
        .unwrap()
        .iptables;
    assert!(
        !r.contains("TPROXY") && !r.contains("notrack") && !r.contains("DNAT"),
        "{r}"
    );
    assert!(
        r.contains("-A OUTPUT -p tcp -j REDIRECT --to-ports 4140\n"),
        "{r}"
    );
    assert!(
        r.contains("-A INPUT -i hw00000001a -p tcp -j DROP\n"),
        "{r}"
    );
}

#[test]
fn ip6tables_gets_the_same_redirect_and_guards_for_ipv6() {
    let p = plan(&mesh(), "web", 0, Names::of("00000001").unwrap()).unwrap();
    let want = "# written by hopwise run: this namespace's rules only\n\
         *nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         -A OUTPUT -d ::1/128 -j RETURN\n\
         -A OUTPUT -d fe80::/10 -j RETURN\n\
         -A OUTPUT -p tcp --dport 22 -j RETURN\n\
         -A OUTPUT -d fd00::/8 -j RETURN\n\
         -A OUTPUT -p tcp -j REDIRECT --to-ports 4140\n\
         COMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         -A INPUT -i hw00000001a -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n\
         -A INPUT -i hw00000001a -p tcp -j DROP\n\
         -A OUTPUT -o lo -j ACCEPT\n\
         -A OUTPUT -d fe80::/10 -p tcp -j REJECT --reject-with tcp-reset\n\
         -A OUTPUT -p tcp -j ACCEPT\n-A OUTPUT -j REJECT\nCOMMIT\n";
    assert_eq!(p.ip6tables, want);
    // IPv4's rules name no IPv6 range, and IPv6's no IPv4 one.
    assert!(!p.iptables.contains("fd00"), "{}", p.iptables);
    assert!(!p.ip6tables.contains("10.0.0.0"), "{}", p.ip6tables);
}
