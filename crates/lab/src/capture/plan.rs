//! Pure: what one captured copy makes on the machine, as data — its names (a prefix and the
//! run's id, so each is provably hopwise's), its addresses (`hopwise-model`'s capture range),
//! the `ip` commands that build the namespace and its link, the rules loaded inside it (an
//! nftables script, `plan/nft.rs`, or the same rules for `iptables-restore` and
//! `ip6tables-restore` where `nft` is missing: `plan/iptables.rs`), and its hosts file. The
//! rules cover both address families: an app has no path out but through its proxy over IPv4
//! or IPv6. Nothing here runs a command; `netns.rs` does.

use std::net::{IpAddr, SocketAddr};

use hopwise_model::Mesh;
use hopwise_model::capture::{Cidr, CopyNet};

/// Every name `hopwise run` gives starts with this (namespaces, `/etc/netns/` directories).
pub const NETNS_PREFIX: &str = "hopwise-";
/// The host's end of a copy's veth pair: `hw<id>h` (15 bytes at most, the kernel's limit).
pub const VETH_PREFIX: &str = "hw";
/// The capture listener inside the namespace (its loopback: nothing outside reaches it).
pub const CAPTURE_PORT: u16 = 4140;

/// The names of one run, all derived from its id (8 lowercase hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub id: String,
    pub netns: String,
    pub veth_host: String,
    pub veth_app: String,
}

impl Names {
    /// `None` unless `id` is 8 lowercase hex digits: a name from elsewhere is never ours.
    pub fn of(id: &str) -> Option<Names> {
        let ok = id.len() == 8
            && id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Names {
            id: id.to_owned(),
            netns: format!("{NETNS_PREFIX}{id}"),
            veth_host: format!("{VETH_PREFIX}{id}h"),
            veth_app: format!("{VETH_PREFIX}{id}a"),
        })
    }

    /// `/run/netns/<netns>`, the file `ip netns add` mounts and the proxy joins.
    pub fn netns_path(&self) -> String {
        format!("/run/netns/{}", self.netns)
    }

    /// `/etc/netns/<netns>`: `ip netns exec` bind-mounts its files over `/etc`'s.
    pub fn etc_dir(&self) -> String {
        format!("/etc/netns/{}", self.netns)
    }
}

/// One captured copy, planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub names: Names,
    pub net: CopyNet,
    /// The app's port, if the copy has an app (inbound calls reach it there, inside).
    pub app_port: Option<u16>,
    /// Where the proxy (outside) reaches the app: the copy's end of the link.
    pub app_from_host: Option<SocketAddr>,
    /// Every service's address, put on the namespace's loopback.
    pub service_addresses: Vec<IpAddr>,
    pub hosts: String,
    /// The rules as an nftables script (`nft -f -`), IPv4 and IPv6 in one `inet` table.
    pub rules: String,
    /// The same rules for `iptables-restore` (IPv4)…
    pub iptables: String,
    /// …and for `ip6tables-restore` (IPv6): both are loaded, or capture fails.
    pub ip6tables: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("`{0}` is not a service in the mesh file")]
    UnknownService(String),
    #[error(
        "copy {copy} of {service} has no address in mesh.capture.range ({range}): widen the range"
    )]
    NoRoom {
        service: String,
        copy: usize,
        range: String,
    },
}

/// The plan of copy `copy` of `service` for the run `names`, its app on the port the mesh
/// file gives the copy (`copies[].app`), if any.
pub fn plan(mesh: &Mesh, service: &str, copy: usize, names: Names) -> Result<Plan, PlanError> {
    let s = mesh
        .services
        .get(service)
        .ok_or_else(|| PlanError::UnknownService(service.to_owned()))?;
    let app_port = s.copies.get(copy).and_then(|c| c.app).map(|a| a.port());
    plan_app(mesh, service, copy, app_port, names)
}

/// [`plan`] with the app's port given (`hopwise up` chooses its samples' ports itself).
pub fn plan_app(
    mesh: &Mesh,
    service: &str,
    copy: usize,
    app_port: Option<u16>,
    names: Names,
) -> Result<Plan, PlanError> {
    if !mesh.services.contains_key(service) {
        return Err(PlanError::UnknownService(service.to_owned()));
    }
    let net = mesh
        .copy_net(service, copy)
        .ok_or_else(|| PlanError::NoRoom {
            service: service.to_owned(),
            copy,
            range: mesh.capture.range.to_string(),
        })?;
    let service_addresses: Vec<IpAddr> = mesh.services.values().filter_map(|s| s.address).collect();
    Ok(Plan {
        app_from_host: app_port.map(|p| SocketAddr::new(IpAddr::V4(net.app), p)),
        hosts: hosts(mesh),
        rules: nft::rules(mesh, &names, net, app_port),
        iptables: iptables::rules(mesh, &names, net, app_port),
        ip6tables: iptables::rules6(mesh, &names),
        names,
        net,
        app_port,
        service_addresses,
    })
}

/// The namespace's `/etc/hosts`: localhost, then each service by its name and its name in the
/// trust domain.
fn hosts(mesh: &Mesh) -> String {
    let mut out = String::from(
        "# written by hopwise run; removed when the copy stops\n127.0.0.1\tlocalhost\n::1\tlocalhost\n",
    );
    for s in mesh.services.values() {
        if let Some(a) = s.address {
            out.push_str(&format!("{a}\t{0} {0}.{1}\n", s.name, mesh.trust_domain));
        }
    }
    out
}

/// `mesh.capture.skip_cidrs`' IPv4 ones, as written.
fn skip_v4(mesh: &Mesh) -> Vec<String> {
    skip_of(mesh, true)
}

/// `mesh.capture.skip_cidrs`' IPv6 ones, as written.
fn skip_v6(mesh: &Mesh) -> Vec<String> {
    skip_of(mesh, false)
}

fn skip_of(mesh: &Mesh, v4: bool) -> Vec<String> {
    let c = &mesh.capture.skip_cidrs;
    c.iter()
        .filter(|c| c.addr.is_ipv4() == v4)
        .map(Cidr::to_string)
        .collect()
}

/// Every service's IPv4 address: the calls TPROXY takes.
fn services_v4(mesh: &Mesh) -> Vec<String> {
    let s = mesh.services.values();
    s.filter_map(|s| s.address.filter(IpAddr::is_ipv4))
        .map(|a| a.to_string())
        .collect()
}

/// The `ip` commands that build the namespace, in order (each one's arguments). Deleting the
/// namespace undoes all of them: the link's other end, the addresses, routes and rules go with it.
pub fn setup(plan: &Plan) -> Vec<Vec<String>> {
    let n = &plan.names;
    let (host, app, prefix) = (plan.net.host, plan.net.app, CopyNet::PREFIX);
    let mut cmds = vec![
        vec!["netns".into(), "add".into(), n.netns.clone()],
        words(&format!(
            "link add {} type veth peer name {} netns {}",
            n.veth_host, n.veth_app, n.netns
        )),
        words(&format!("addr add {host}/{prefix} dev {}", n.veth_host)),
        words(&format!("link set {} up", n.veth_host)),
        words(&format!("-n {} link set lo up", n.netns)),
        words(&format!(
            "-n {} addr add {app}/{prefix} dev {}",
            n.netns, n.veth_app
        )),
        words(&format!("-n {} link set {} up", n.netns, n.veth_app)),
        // Every destination has a route, so the output hook sees it and redirects it; a
        // connection the rules missed reaches the host's end and no further.
        words(&format!("-n {} route add default via {host}", n.netns)),
    ];
    for a in &plan.service_addresses {
        let len = if a.is_ipv4() { 32 } else { 128 };
        cmds.push(words(&format!("-n {} addr add {a}/{len} dev lo", n.netns)));
    }
    cmds
}

fn words(s: &str) -> Vec<String> {
    s.split(' ').map(str::to_owned).collect()
}

mod iptables;
mod nft;
pub mod pod;
#[cfg(test)]
mod tests;
