//! The two layouts as text: the mesh files and the `hopwise` command lines of every process.
//! Fixed: every address in the mesh file, read by each proxy at its start. Registry: no
//! address in any file; copies register with the control plane on a lease and callers follow
//! its snapshots. The same call policy in both, `outlier: none` and `round-robin`, so the only
//! thing that can take a dead copy out of a caller's rotation is the registry. Pure.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// a's call to b in both layouts: hopwise's retries (a refused connection is tried again on
/// another copy), no outlier ejection, copies in turn.
const CALL: &str = "{ timeout: 2s, outlier: none, balancer: round-robin }";

/// The ports of one layout, taken free before anything starts.
#[derive(Debug, Clone)]
pub(super) struct Ports {
    /// a's local port for b (the load is sent here) and a's admin endpoint.
    pub(super) upstream: SocketAddr,
    pub(super) admin: SocketAddr,
    /// Per copy of b: its proxy's mutual-TLS port and admin endpoint.
    pub(super) copies: Vec<(SocketAddr, SocketAddr)>,
    /// The control plane (registry layout).
    pub(super) control: SocketAddr,
}

impl Ports {
    /// From `3 + 2 × copies` distinct free addresses.
    pub(super) fn from(addrs: &[SocketAddr], copies: usize) -> Option<Ports> {
        let (&[upstream, admin, control], rest) = addrs.split_first_chunk::<3>()?;
        let copies = rest
            .chunks_exact(2)
            .take(copies)
            .map(|c| (c[0], c[1]))
            .collect::<Vec<_>>();
        Some(Ports {
            upstream,
            admin,
            copies,
            control,
        })
    }
}

/// The fixed layout's mesh file with the first `copies` copies of b, each in front of its app.
pub(super) fn fixed_mesh(p: &Ports, apps: &[SocketAddr], copies: usize) -> String {
    let b: Vec<String> = p
        .copies
        .iter()
        .zip(apps)
        .take(copies)
        .map(|((inbound, admin), app)| {
            format!("      - {{ inbound: \"{inbound}\", admin: \"{admin}\", app: \"{app}\" }}")
        })
        .collect();
    format!(
        "# hopwise demo registry: fixed addresses, {copies} copies of b
mesh: {{ name: fixed, trust_domain: fixed.local, certs: certs }}
services:
  a:
    calls: {{ b: {CALL} }}
    copies:
      - {{ admin: \"{admin}\", upstreams: {{ b: \"{upstream}\" }} }}
  b:
    copies:
{b}
",
        admin = p.admin,
        upstream = p.upstream,
        b = b.join("\n"),
    )
}

/// The registry layout's mesh file: services and policy only.
pub(super) fn registry_mesh() -> String {
    format!(
        "# hopwise demo registry: no address in the file, copies from the control plane
mesh: {{ name: registry, trust_domain: registry.local }}
services:
  a: {{ calls: {{ b: {CALL} }} }}
  b: {{}}
"
    )
}

fn args<const N: usize>(words: [&dyn AsRef<std::ffi::OsStr>; N]) -> Vec<OsString> {
    words.iter().map(|w| w.as_ref().to_owned()).collect()
}

/// `hopwise proxy` from the fixed layout's file, for a (`copy: None`) or a copy of b.
pub(super) fn fixed_proxy(mesh: &Path, copy: Option<usize>) -> Vec<OsString> {
    match copy {
        None => args([&"proxy", &"--config", &mesh, &"--service", &"a"]),
        Some(i) => {
            let i = i.to_string();
            args([
                &"proxy",
                &"--config",
                &mesh,
                &"--service",
                &"b",
                &"--copy",
                &i,
            ])
        }
    }
}

/// `hopwise control` over the registry layout's file, its state in `state`.
pub(super) fn control(mesh: &Path, state: &Path, listen: SocketAddr) -> Vec<OsString> {
    let listen = listen.to_string();
    args([
        &"control",
        &"--config",
        &mesh,
        &"--state",
        &state,
        &"--listen",
        &listen,
    ])
}

/// `hopwise proxy --control` for a: b on its local port.
pub(super) fn registry_a(p: &Ports, state: &Path, cache: &Path) -> Vec<OsString> {
    let mut v = joined(p.control, state, "a", cache);
    let upstream = format!("b={}", p.upstream);
    let admin = p.admin.to_string();
    v.extend(args([&"--upstream", &upstream, &"--admin", &admin]));
    v
}

/// `hopwise proxy --control` for copy `i` of b in front of `app`, on a lease of `ttl`.
pub(super) fn registry_b(
    p: &Ports,
    state: &Path,
    cache: &Path,
    i: usize,
    app: SocketAddr,
    ttl: Duration,
) -> Vec<OsString> {
    let mut v = joined(p.control, state, "b", cache);
    let (inbound, admin) = p.copies[i];
    let (i, inbound, admin, app) = (
        i.to_string(),
        inbound.to_string(),
        admin.to_string(),
        app.to_string(),
    );
    let ttl = format!("{}ms", ttl.as_millis());
    v.extend(args([
        &"--copy",
        &i,
        &"--inbound",
        &inbound,
        &"--admin",
        &admin,
        &"--app",
        &app,
        &"--lease-ttl",
        &ttl,
    ]));
    v
}

/// What every control-plane proxy of `service` is given: the plane, its CA, the join token.
fn joined(control: SocketAddr, state: &Path, service: &str, cache: &Path) -> Vec<OsString> {
    let url = format!("https://{control}");
    let (ca, token) = (state.join("ca.pem"), state.join("tokens").join(service));
    args([
        &"proxy",
        &"--control",
        &url,
        &"--control-ca",
        &ca,
        &"--token-file",
        &token,
        &"--service",
        &service,
        &"--cache",
        &cache,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Ports {
        let addrs: Vec<SocketAddr> = (0..9)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 7000 + i)))
            .collect();
        Ports::from(&addrs, 3).unwrap_or_else(|| Ports {
            upstream: addrs[0],
            admin: addrs[0],
            copies: vec![],
            control: addrs[0],
        })
    }

    #[test]
    fn both_mesh_files_read_and_the_fixed_one_lists_every_copy() {
        let p = ports();
        assert_eq!(p.copies.len(), 3);
        let apps: Vec<SocketAddr> = (0..3)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 8000 + i)))
            .collect();
        for n in [2, 3] {
            let yaml = fixed_mesh(&p, &apps, n);
            let mesh = hopwise_model::Mesh::from_yaml(&yaml);
            assert!(mesh.is_ok(), "{yaml}");
            assert_eq!(yaml.matches("inbound:").count(), n, "{yaml}");
        }
        assert!(hopwise_model::Mesh::from_yaml(&registry_mesh()).is_ok());
        assert!(!registry_mesh().contains("127.0.0.1"));
    }
}
