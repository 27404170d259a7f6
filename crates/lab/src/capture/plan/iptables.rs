//! The rules of [`super::rules`] for `iptables-restore`, for a machine with iptables but no
//! `nft` (docs/capture.md). The same rules in the same order, table by table: what the
//! nftables script's chains do at each hook, the iptables tables do at theirs. The services'
//! set becomes one rule per address, as `-d a,b` would; the skip lists a `RETURN` each.

use hopwise_model::Mesh;
use hopwise_model::capture::CopyNet;

use super::{CAPTURE_PORT, Names, services_v4, skip_v4, skip_v6};

/// The `iptables-restore` input for one copy's namespace (IPv4).
pub(super) fn rules(mesh: &Mesh, names: &Names, net: CopyNet, app_port: Option<u16>) -> String {
    let ports = &mesh.capture.skip_ports;
    let cidrs = skip_v4(mesh);
    let (raw, mangle) = to_services(ports, &cidrs, &services_v4(mesh));
    let guard = Guard {
        loopback: "127.0.0.0/8",
        link_local: None,
        link: &names.veth_app,
        app: app_port.map(|p| (net, p)),
    };
    let (nat, filter) = redirected_and_guarded(ports, &cidrs, &guard);
    restore([
        ("raw", "OUTPUT", raw),
        ("mangle", "PREROUTING", mangle),
        ("nat", "PREROUTING OUTPUT", nat),
        ("filter", "INPUT OUTPUT", filter),
    ])
}

/// The `ip6tables-restore` input: IPv6's redirect and guards. The app's port is reached from
/// the host's end over IPv4 only, so nothing new on the link is let in.
pub(super) fn rules6(mesh: &Mesh, names: &Names) -> String {
    let guard = Guard {
        loopback: "::1/128",
        link_local: Some("fe80::/10"),
        link: &names.veth_app,
        app: None,
    };
    let (nat, filter) = redirected_and_guarded(&mesh.capture.skip_ports, &skip_v6(mesh), &guard);
    restore([
        ("nat", "PREROUTING OUTPUT", nat),
        ("filter", "INPUT OUTPUT", filter),
    ])
}

/// Tables in `*table … COMMIT` blocks, each chain's policy ACCEPT.
fn restore<const N: usize>(tables: [(&str, &str, Vec<String>); N]) -> String {
    let mut out = String::from("# written by hopwise run: this namespace's rules only\n");
    for (table, chains, lines) in tables {
        out.push_str(&format!("*{table}\n"));
        for c in chains.split(' ') {
            out.push_str(&format!(":{c} ACCEPT [0:0]\n"));
        }
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// Calls to service addresses: untracked both ways (`raw`), handed over by TPROXY (`mangle`):
/// nft's `untracked` and `to_services`.
fn to_services(ports: &[u16], cidrs: &[String], services: &[String]) -> (Vec<String>, Vec<String>) {
    let mut raw = Vec::new();
    let mut mangle = Vec::new();
    for a in services {
        raw.push(format!("-A OUTPUT -o lo -d {a}/32 -j CT --notrack"));
        raw.push(format!("-A OUTPUT -o lo -s {a}/32 -j CT --notrack"));
    }
    if services.is_empty() {
        return (raw, mangle);
    }
    mangle.extend(
        ports
            .iter()
            .map(|p| format!("-A PREROUTING -i lo -p tcp --dport {p} -j RETURN")),
    );
    mangle.extend(
        cidrs
            .iter()
            .map(|c| format!("-A PREROUTING -i lo -d {c} -j RETURN")),
    );
    // New connections only (`--syn`), as nft's: here also because iptables' TPROXY drops a
    // packet whose socket it finds but is not transparent — the app's own, for every answer —
    // where nft's lets it pass.
    for a in services {
        mangle.push(format!(
            "-A PREROUTING -i lo -p tcp --syn -d {a}/32 -j TPROXY --on-ip 127.0.0.1 --on-port {CAPTURE_PORT}"
        ));
    }
    (raw, mangle)
}

/// What [`redirected_and_guarded`] guards, in one family.
struct Guard<'a> {
    /// The loopback range that is never redirected.
    loopback: &'a str,
    /// A range refused at once instead (IPv6's link-local: redirected, it would hang).
    link_local: Option<&'a str>,
    /// The copy's end of the link.
    link: &'a str,
    /// The link and the app's port, when the host's end may reach the app (IPv4 only).
    app: Option<(CopyNet, u16)>,
}

/// Everything else redirected and the app's port reached on its loopback (`nat`: nft's `out`
/// and `pre`); the link guarded and only TCP let out (`filter`: `in` and `only_tcp`).
fn redirected_and_guarded(
    ports: &[u16],
    cidrs: &[String],
    guard: &Guard<'_>,
) -> (Vec<String>, Vec<String>) {
    let link = guard.link;
    let mut nat = vec![format!("-A OUTPUT -d {} -j RETURN", guard.loopback)];
    nat.extend(
        guard
            .link_local
            .map(|l| format!("-A OUTPUT -d {l} -j RETURN")),
    );
    nat.extend(
        ports
            .iter()
            .map(|p| format!("-A OUTPUT -p tcp --dport {p} -j RETURN")),
    );
    nat.extend(cidrs.iter().map(|c| format!("-A OUTPUT -d {c} -j RETURN")));
    nat.push(format!(
        "-A OUTPUT -p tcp -j REDIRECT --to-ports {CAPTURE_PORT}"
    ));
    let mut filter = vec![format!(
        "-A INPUT -i {link} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
    )];
    if let Some((net, port)) = guard.app {
        let host = net.host;
        nat.push(format!(
            "-A PREROUTING -i {link} -s {host}/32 -p tcp --dport {port} -j DNAT --to-destination 127.0.0.1:{port}"
        ));
        filter.push(format!(
            "-A INPUT -i {link} -s {host}/32 -p tcp --dport {port} -j ACCEPT"
        ));
    }
    filter.push(format!("-A INPUT -i {link} -p tcp -j DROP"));
    // Only TCP is captured: anything else leaving the loopback is refused.
    filter.push("-A OUTPUT -o lo -j ACCEPT".to_owned());
    filter.extend(
        guard
            .link_local
            .map(|l| format!("-A OUTPUT -d {l} -p tcp -j REJECT --reject-with tcp-reset")),
    );
    for l in ["-A OUTPUT -p tcp -j ACCEPT", "-A OUTPUT -j REJECT"] {
        filter.push(l.to_owned());
    }
    (nat, filter)
}
