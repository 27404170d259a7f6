//! The nftables script loaded inside a copy's namespace: one `inet` table, so IPv4 and IPv6
//! pass the same hooks. Outbound: every new TCP connection of the app to anything but loopback
//! and the lists to skip goes to the capture listener — to a service's IPv4 address by TPROXY
//! ([`to_services`]), to anything else (IPv6 included) by NAT to the listener's loopback port
//! in its family; a link-local IPv6 address (the host's end of the copy's link) is refused. The proxy's own
//! connections need no exemption: the proxy runs in the host's namespace, so none of them
//! starts in this one (and an app cannot claim to be it, as it could a uid, gid or mark).
//! Inbound: TCP from the host's end to the app's port goes to the app on its loopback; any other
//! new TCP arriving on the link, in either family, is dropped. Anything but TCP leaving the
//! namespace is refused (only TCP is captured).

use hopwise_model::Mesh;
use hopwise_model::capture::CopyNet;

use super::{CAPTURE_PORT, Names, services_v4, skip_v4, skip_v6};

/// The script (`nft -f -`).
pub(super) fn rules(mesh: &Mesh, names: &Names, net: CopyNet, app_port: Option<u16>) -> String {
    let skip4 = skip_v4(mesh);
    let mut out = String::from("table inet hopwise {\n");
    out.push_str(&redirected(
        &mesh.capture.skip_ports,
        &skip4,
        &skip_v6(mesh),
        None,
    ));
    out.push_str(&to_services(mesh, &mesh.capture.skip_ports, &skip4));
    out.push_str(&guarded(&names.veth_app, net, app_port));
    out.push_str("}\n");
    out
}

/// `out`: loopback and the skips return, then every other TCP connection goes to the capture
/// port (`redirect` keeps the family: 127.0.0.1 for IPv4, ::1 for IPv6). `exempt`: the uid
/// whose connections return first — the proxy's, where it shares the app's namespace (a pod;
/// `pod.rs`); `hopwise run` needs none, its proxy being outside.
pub(super) fn redirected(
    skip_ports: &[u16],
    skip4: &[String],
    skip6: &[String],
    exempt: Option<u32>,
) -> String {
    let mut out =
        String::from("\tchain out {\n\t\ttype nat hook output priority -100; policy accept;\n");
    if let Some(uid) = exempt {
        out.push_str(&format!("\t\tmeta skuid {uid} return\n"));
    }
    // Link-local IPv6 is not redirected but refused (`only_tcp`): a connection to ::1 from a
    // link-local source has no way back, so it would hang instead of failing at once.
    out.push_str("\t\tip daddr 127.0.0.0/8 return\n\t\tip6 daddr { ::1, fe80::/10 } return\n");
    skips(&mut out, skip_ports, skip4);
    if !skip6.is_empty() {
        out.push_str(&format!(
            "\t\tip6 daddr {{ {} }} return\n",
            skip6.join(", ")
        ));
    }
    out.push_str(&format!(
        "\t\tmeta l4proto tcp redirect to :{CAPTURE_PORT}\n\t}}\n"
    ));
    out
}

/// The calls to service addresses (the common case: `http://fee/…` resolves to one), taken
/// without NAT: the addresses are the namespace's own (on its `lo`), so the app's packets to
/// them come back in through `lo`'s prerouting, where TPROXY hands them to the capture listener
/// (bound with `IP_TRANSPARENT`) with their destination untouched: the proxy reads it from the
/// accepted socket's own address. Both directions skip connection tracking, so `out`'s NAT never
/// sees them: no conntrack entry per connection, no NAT on every packet (docs/capture.md). The
/// counter shows it at work (`nft list chain inet hopwise to_services` in the namespace).
/// Anything else (egress, copies' addresses, IPv6 service addresses) still takes `out`'s
/// redirect. Empty when no service has an IPv4 address.
fn to_services(mesh: &Mesh, skip_ports: &[u16], skip4: &[String]) -> String {
    let addrs = services_v4(mesh);
    if addrs.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\tset services {{\n\t\ttype ipv4_addr\n\t\telements = {{ {} }}\n\t}}\n",
        addrs.join(", ")
    );
    out.push_str("\tchain untracked {\n\t\ttype filter hook output priority raw; policy accept;\n");
    // The proxy's answers too: a reply tracked mid-stream would be a new connection to `out`.
    out.push_str("\t\toifname \"lo\" ip daddr @services notrack\n");
    out.push_str("\t\toifname \"lo\" ip saddr @services notrack\n\t}\n");
    out.push_str(
        "\tchain to_services {\n\t\ttype filter hook prerouting priority mangle; policy accept;\n",
    );
    out.push_str("\t\tiifname != \"lo\" return\n");
    skips(&mut out, skip_ports, skip4);
    // New connections only: every later packet finds its socket by the normal lookup, so a
    // TPROXY lookup on it would be a second one for nothing.
    out.push_str(&format!(
        "\t\tip daddr @services tcp flags syn / fin,syn,rst,ack counter tproxy ip to 127.0.0.1:{CAPTURE_PORT}\n\t}}\n"
    ));
    out
}

/// `pre`, `in` and `only_tcp`: the app's port reached from the host's end (IPv4, the link's
/// family), every other new TCP on the link dropped and everything but TCP kept in — in both
/// families, since the chains are the `inet` table's.
fn guarded(link: &str, net: CopyNet, app_port: Option<u16>) -> String {
    let mut out = String::new();
    if let Some(port) = app_port {
        out.push_str("\tchain pre {\n\t\ttype nat hook prerouting priority -100; policy accept;\n");
        out.push_str(&format!(
            "\t\tiifname \"{link}\" ip saddr {} tcp dport {port} dnat ip to 127.0.0.1:{port}\n\t}}\n",
            net.host
        ));
    }
    out.push_str("\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n");
    out.push_str(&format!(
        "\t\tiifname \"{link}\" ct state established,related accept\n"
    ));
    if let Some(port) = app_port {
        out.push_str(&format!(
            "\t\tiifname \"{link}\" ip saddr {} tcp dport {port} accept\n",
            net.host
        ));
    }
    out.push_str(&format!(
        "\t\tiifname \"{link}\" meta l4proto tcp drop\n\t}}\n"
    ));
    // Only TCP is captured: anything else the app sends off its loopback (UDP, ICMP, ICMPv6) is
    // refused here, so none of it can leave past the proxy.
    out.push_str("\tchain only_tcp {\n\t\ttype filter hook output priority 0; policy accept;\n");
    // A link-local peer is the host's end of the link at best: never a way out.
    out.push_str("\t\toifname \"lo\" accept\n\t\tip6 daddr fe80::/10 meta l4proto tcp reject with tcp reset\n");
    out.push_str("\t\tmeta l4proto tcp accept\n\t\treject\n\t}\n");
    out
}

/// The returns for `mesh.capture.skip_ports` and the IPv4 `skip_cidrs`, which every chain that
/// takes connections honours.
fn skips(out: &mut String, skip_ports: &[u16], skip4: &[String]) {
    if !skip_ports.is_empty() {
        out.push_str(&format!(
            "\t\ttcp dport {{ {} }} return\n",
            ports(skip_ports)
        ));
    }
    if !skip4.is_empty() {
        out.push_str(&format!("\t\tip daddr {{ {} }} return\n", skip4.join(", ")));
    }
}

fn ports(p: &[u16]) -> String {
    let p: Vec<String> = p.iter().map(u16::to_string).collect();
    p.join(", ")
}
