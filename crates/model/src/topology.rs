//! Where things run: each service's copies (its app's address and its proxy's ports) and the
//! services outside the mesh. Resolved from the raw file and checked here: addresses parse, no
//! two listeners share an address, local upstream ports name services the copy really calls.

use std::net::SocketAddr;

use indexmap::IndexMap;
use serde::Serialize;

use crate::diag::Diagnostic;
use crate::labels::Labels;
use crate::raw::{RawCopy, RawExternal};
use crate::read::Locations;

/// One running copy of a service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Copy {
    pub app: Option<SocketAddr>,
    pub inbound: Option<SocketAddr>,
    pub outbound: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    /// A local port per upstream service, for apps that call `http://127.0.0.1:<port>/…`.
    pub upstreams: IndexMap<String, SocketAddr>,
    /// The labels it carries, which a route's backend `subset` selects by (`copies[i].labels`).
    #[serde(skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
}

/// A service with no proxy of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct External {
    /// `host:port`.
    pub address: String,
    pub tls: Option<ExternalTls>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExternalTls {
    /// PEM CA file as written (relative to the mesh file); `None`: the mesh's own CA.
    pub ca_file: Option<String>,
    pub server_name: String,
}

pub(crate) fn copies(
    raw: &[RawCopy],
    service: &str,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Copy> {
    let mut addr = |path: String, text: &Option<String>| -> Option<SocketAddr> {
        let text = text.as_ref()?;
        match text.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                diags.push(Diagnostic::new(
                    path.clone(),
                    locations.of(&path),
                    format!("`{text}` is not an address; write `ip:port`, e.g. `127.0.0.1:8754`"),
                ));
                None
            }
        }
    };
    raw.iter()
        .enumerate()
        .map(|(i, c)| {
            let base = format!("services.{service}.copies[{i}]");
            Copy {
                app: addr(format!("{base}.app"), &c.app),
                inbound: addr(format!("{base}.inbound"), &c.inbound),
                outbound: addr(format!("{base}.outbound"), &c.outbound),
                admin: addr(format!("{base}.admin"), &c.admin),
                upstreams: c
                    .upstreams
                    .iter()
                    .filter_map(|(name, a)| {
                        let a = addr(format!("{base}.upstreams.{name}"), &Some(a.clone()))?;
                        Some((name.clone(), a))
                    })
                    .collect(),
                labels: c
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }
        })
        .collect()
}

pub(crate) fn external(
    raw: &RawExternal,
    service: &str,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> Option<External> {
    let path = format!("services.{service}.external.address");
    let Some(address) = raw.address.clone() else {
        diags.push(Diagnostic::new(
            path.clone(),
            locations.of(&path),
            "an external service needs an `address` (`host:port`)",
        ));
        return None;
    };
    let host = match address.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => h.trim_matches(['[', ']']),
        _ => {
            diags.push(Diagnostic::new(
                path.clone(),
                locations.of(&path),
                format!("`{address}` is not `host:port`"),
            ));
            return None;
        }
    };
    let tls = raw.tls.as_ref().map(|t| ExternalTls {
        ca_file: t.ca_file.clone(),
        server_name: t.server_name.clone().unwrap_or_else(|| host.to_owned()),
    });
    Some(External { address, tls })
}

/// Checks across services: no address used twice, upstream ports only for called services,
/// external services make no calls and run no copies.
pub(crate) fn validate(mesh: &crate::Mesh, diags: &mut Vec<Diagnostic>) {
    let mut seen: IndexMap<SocketAddr, String> = IndexMap::new();
    for s in mesh.services.values() {
        sample(mesh, s, diags);
        if s.external.is_some() {
            if !s.copies.is_empty() || !s.calls.is_empty() {
                let path = format!("services.{}.external", s.name);
                diags.push(Diagnostic::new(
                    path.clone(),
                    mesh.locations.of(&path),
                    "an external service has no proxy: it cannot have `copies` or make `calls`",
                ));
            }
            continue;
        }
        for (i, c) in s.copies.iter().enumerate() {
            let base = format!("services.{}.copies[{i}]", s.name);
            let mut listeners: Vec<(String, SocketAddr)> = Vec::new();
            // A relay copy has no app of its own: its inbound side feeds its outbound side
            // (`app` is one of its own upstream ports), as in the seeds' chains of proxies.
            let relay = c.app.is_some_and(|a| c.upstreams.values().any(|u| *u == a));
            for (field, a) in [
                ("app", c.app.filter(|_| !relay)),
                ("inbound", c.inbound),
                ("outbound", c.outbound),
                ("admin", c.admin),
            ] {
                if let Some(a) = a {
                    listeners.push((format!("{base}.{field}"), a));
                }
            }
            for (name, a) in &c.upstreams {
                let path = format!("{base}.upstreams.{name}");
                if !s.calls.iter().any(|call| &call.to == name) {
                    diags.push(Diagnostic::new(
                        path.clone(),
                        mesh.locations.of(&path),
                        format!("a local port for `{name}`, which {} does not call", s.name),
                    ));
                }
                listeners.push((path, *a));
            }
            for (path, a) in listeners {
                if a.port() == 0 {
                    continue;
                }
                if let Some(first) = seen.get(&a) {
                    diags.push(Diagnostic::new(
                        path.clone(),
                        mesh.locations.of(&path),
                        format!("{a} is already used by {first}"),
                    ));
                } else {
                    seen.insert(a, path);
                }
            }
        }
    }
}

/// A sample runs where its kind can: `chain` and `leaf` behind a proxy, `fee` outside the mesh
/// serving TLS itself (as the seed's fee service does).
fn sample(mesh: &crate::Mesh, s: &crate::Service, diags: &mut Vec<Diagnostic>) {
    use crate::raw::SampleKind;
    let Some(kind) = s.sample else { return };
    let path = format!("services.{}.sample", s.name);
    let problem = match (kind, &s.external) {
        (SampleKind::Fee, None) => Some(
            "the `fee` sample serves TLS itself outside the mesh: give the service `external: { address: 127.0.0.1:PORT, tls: {} }`"
                .to_owned(),
        ),
        (SampleKind::Fee, Some(e)) if e.tls.is_none() => Some(
            "the `fee` sample serves TLS: add `tls: {}` under `external`".to_owned(),
        ),
        (SampleKind::Chain | SampleKind::Leaf, Some(_)) => Some(format!(
            "the `{}` sample runs behind a proxy; an `external` service has none (use `fee`, or remove `external`)",
            kind.name()
        )),
        (SampleKind::Leaf, None) if !s.calls.is_empty() => Some(
            "the `leaf` sample calls nobody; use `chain` for a service with `calls`".to_owned(),
        ),
        _ => None,
    };
    if let Some(message) = problem {
        diags.push(Diagnostic::new(
            path.clone(),
            mesh.locations.of(&path),
            message,
        ));
    }
}
