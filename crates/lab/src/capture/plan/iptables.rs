//! The rules of [`super::rules`] for `iptables-restore`, for a machine with iptables but no
//! `nft` (docs/capture.md). The same rules in the same order, table by table: what the
//! nftables script's chains do at each hook, the iptables tables do at theirs. The services'
//! set becomes one rule per address, as `-d a,b` would; the skip lists a `RETURN` each.

use hopwise_model::Mesh;
use hopwise_model::capture::CopyNet;

use super::{CAPTURE_PORT, Names, services_v4, skip_v4};

/// The `iptables-restore` input for one copy's namespace (IPv4, as the nftables script is).
pub(super) fn rules(mesh: &Mesh, names: &Names, net: CopyNet, app_port: Option<u16>) -> String {
    let ports = &mesh.capture.skip_ports;
    let cidrs = skip_v4(mesh);
    let (raw, mangle) = to_services(ports, &cidrs, &services_v4(mesh));
    let (nat, filter) = redirected_and_guarded(ports, &cidrs, &names.veth_app, net, app_port);
    let mut out = String::from("# written by hopwise run: this namespace's rules only\n");
    for (table, chains, lines) in [
        ("raw", "OUTPUT", raw),
        ("mangle", "PREROUTING", mangle),
        ("nat", "PREROUTING OUTPUT", nat),
        ("filter", "INPUT OUTPUT", filter),
    ] {
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

/// Everything else redirected and the app's port reached on its loopback (`nat`: nft's `out`
/// and `pre`); the link guarded and only TCP let out (`filter`: `in` and `only_tcp`).
fn redirected_and_guarded(
    ports: &[u16],
    cidrs: &[String],
    link: &str,
    net: CopyNet,
    app_port: Option<u16>,
) -> (Vec<String>, Vec<String>) {
    let host = net.host;
    let mut nat = vec!["-A OUTPUT -d 127.0.0.0/8 -j RETURN".to_owned()];
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
    if let Some(port) = app_port {
        nat.push(format!(
            "-A PREROUTING -i {link} -s {host}/32 -p tcp --dport {port} -j DNAT --to-destination 127.0.0.1:{port}"
        ));
        filter.push(format!(
            "-A INPUT -i {link} -s {host}/32 -p tcp --dport {port} -j ACCEPT"
        ));
    }
    filter.push(format!("-A INPUT -i {link} -p tcp -j DROP"));
    // Only TCP is captured: anything else leaving the loopback is refused.
    for l in [
        "-A OUTPUT -o lo -j ACCEPT",
        "-A OUTPUT -p tcp -j ACCEPT",
        "-A OUTPUT -j REJECT",
    ] {
        filter.push(l.to_owned());
    }
    (nat, filter)
}
