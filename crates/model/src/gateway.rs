//! A gateway (`services.<name>.gateway`, docs/routes.md "Gateway"): the front door for clients
//! outside the mesh. The service it is written under is its identity in the mesh
//! (`spiffe://<td>/service/<name>`, so a callee's `allow` names it as any caller), its `routes`
//! pick a backend by host name and path (the route model, the parent being the gateway), and its
//! `calls` give the policy it calls each backend with — so `hopwise check` counts it as the
//! caller it is. It runs no app: its proxy listens for the outside.
//!
//! Pure: the block resolved with every problem at its path and line ([`resolve`], [`check`]),
//! which certificate answers a TLS client's server name ([`Https::certificate_for`]), and who a
//! request behind trusted proxies comes from (`forwarded.rs`, [`client_behind`]).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use crate::Dur;
use crate::diag::Diagnostic;
use crate::mesh::Mesh;
use crate::policy::Protocol;
use crate::rate::Limit;
use crate::raw::RawService;
use crate::read::Locations;
use crate::route::{Hostname, ServiceRoutes};

mod forwarded;
pub use forwarded::{MAX_HOPS, client_behind};

/// The largest request body a gateway takes unless `max_body_bytes` says otherwise (10 MiB).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 10 * 1024 * 1024;

/// How long a request's body may stall unless `body_timeout` says otherwise.
pub const DEFAULT_BODY_TIMEOUT: Dur = Dur(Duration::from_secs(30));

/// A gateway, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gateway {
    /// The plain HTTP listener.
    pub http: Option<SocketAddr>,
    /// The TLS listener and its certificates.
    pub https: Option<Https>,
    /// Every client together.
    pub total: Option<Limit>,
    /// Each client address.
    pub per_client: Option<Limit>,
    /// Larger bodies are refused with 413 (by `Content-Length`, or cut where they stream past).
    pub max_body_bytes: u64,
    /// A body that goes this long without a byte is answered 408.
    pub body_timeout: Dur,
    /// The proxies in front of it, whose `X-Forwarded-For` names the client
    /// ([`client_behind`]).
    pub trusted_proxies: Vec<crate::capture::Cidr>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Https {
    pub listen: SocketAddr,
    pub certificates: Vec<Certificate>,
}

/// One certificate and the names it serves; files as written (relative to the mesh file).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Certificate {
    #[serde(serialize_with = "names")]
    pub hostnames: Vec<Hostname>,
    pub cert: String,
    pub key: String,
}

fn names<S: serde::Serializer>(h: &[Hostname], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(h.iter().map(Hostname::as_str))
}

impl Https {
    /// The certificate for a TLS client asking for `server_name` (SNI): the one naming it
    /// exactly, else the one whose wildcard covers it with the longest suffix (as a Gateway
    /// API listener's hostname ranks). None — no name asked, or one no certificate serves: the
    /// handshake is refused, so a stranger probing names learns nothing, not even a default.
    pub fn certificate_for(&self, server_name: Option<&str>) -> Option<usize> {
        let name = server_name?.trim_end_matches('.');
        let all = self.certificates.iter().enumerate();
        let covering = all.flat_map(|(i, c)| c.hostnames.iter().map(move |h| (i, h)));
        covering
            .filter(|(_, h)| h.covers(name))
            // Exact names first, then the longest wildcard; ties to the first written.
            .max_by_key(|(i, h)| (!h.is_wildcard(), h.as_str().len(), usize::MAX - i))
            .map(|(i, _)| i)
    }
}

/// `service`'s gateway block, every problem at its path; `None` when it has none (or none
/// usable).
pub fn resolve(
    rs: &RawService,
    service: &str,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> Option<Gateway> {
    let raw = rs.gateway.as_ref()?;
    let at = format!("services.{service}.gateway");
    let mut problem = |path: &str, message: String| {
        diags.push(Diagnostic::new(path, locations.of(path), message));
    };
    for (written, field) in [
        (rs.sample.is_some(), "sample"),
        (rs.run.is_some(), "run"),
        (rs.external.is_some(), "external"),
        (rs.tcp.is_some(), "tcp"),
        (!rs.ports.is_empty(), "ports"),
        (rs.upgrade.is_some(), "upgrade"),
        (rs.fault.is_some(), "fault"),
    ] {
        if written {
            problem(
                &format!("services.{service}.{field}"),
                format!(
                    "a gateway runs no app of its own (its proxy is the front door): remove `{field}`"
                ),
            );
        }
    }
    if rs.protocol == Some(Protocol::Grpc) {
        problem(
            &format!("services.{service}.protocol"),
            "a gateway speaks HTTP (gRPC goes through it as HTTP/2): remove `protocol: grpc`"
                .to_owned(),
        );
    }
    if rs.routes.is_empty() {
        problem(
            &at,
            format!(
                "a gateway routes by its `routes` and has none: add `services.{service}.routes` (host names, paths, backends)"
            ),
        );
    }
    if raw.http.is_none() && raw.https.is_none() {
        problem(
            &at,
            "a gateway needs a listener: `http`, `https` or both".to_owned(),
        );
    }
    let mut address = |path: String, text: &str| match text.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            problem(
                &path,
                format!("`{text}` is not an address; write `ip:port`, e.g. `0.0.0.0:8443`"),
            );
            None
        }
    };
    let http = (raw.http.as_ref()).and_then(|h| address(format!("{at}.http.listen"), &h.listen));
    let https_listen =
        (raw.https.as_ref()).and_then(|h| address(format!("{at}.https.listen"), &h.listen));
    let https = raw.https.as_ref().and_then(|h| {
        let certificates = certificates(h, &at, locations, diags)?;
        Some(Https {
            listen: https_listen?,
            certificates,
        })
    });
    let limits = raw.rate_limit.clone().unwrap_or_default();
    Some(Gateway {
        http,
        https,
        total: limits.total.map(crate::rate::limit),
        per_client: limits.per_client.map(crate::rate::limit),
        max_body_bytes: raw.max_body_bytes.map_or(DEFAULT_MAX_BODY_BYTES, u64::from),
        body_timeout: raw.body_timeout.unwrap_or(DEFAULT_BODY_TIMEOUT),
        // Each checked where the reader met it.
        trusted_proxies: (raw.trusted_proxies.iter())
            .filter_map(|t| t.parse().ok())
            .collect(),
    })
}

/// The TLS listener's certificates: at least one, each with at least one valid host name, no
/// name served by two.
fn certificates(
    raw: &crate::raw::RawGatewayHttps,
    at: &str,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> Option<Vec<Certificate>> {
    let mut problem = |path: &str, message: String| {
        diags.push(Diagnostic::new(path, locations.of(path), message));
    };
    let at = format!("{at}.https.certificates");
    if raw.certificates.is_empty() {
        problem(
            &at,
            "TLS needs at least one certificate (`hostnames`, `cert`, `key`)".to_owned(),
        );
        return None;
    }
    let mut out = Vec::new();
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut ok = true;
    for (i, c) in raw.certificates.iter().enumerate() {
        let here = format!("{at}[{i}]");
        if c.hostnames.is_empty() {
            problem(
                &format!("{here}.hostnames"),
                "list the names this certificate serves".to_owned(),
            );
            ok = false;
        }
        let mut hostnames = Vec::new();
        for (j, name) in c.hostnames.iter().enumerate() {
            let path = format!("{here}.hostnames[{j}]");
            match Hostname::new(name) {
                Ok(h) => match seen.iter().find(|(n, _)| n == name) {
                    Some((_, first)) => {
                        problem(
                            &path,
                            format!(
                                "`{name}` is served by certificates[{first}] already: a name has one certificate"
                            ),
                        );
                        ok = false;
                    }
                    None => {
                        seen.push((name.clone(), i));
                        hostnames.push(h);
                    }
                },
                Err(message) => {
                    problem(&path, message);
                    ok = false;
                }
            }
        }
        out.push(Certificate {
            hostnames,
            cert: c.cert.clone(),
            key: c.key.clone(),
        });
    }
    ok.then_some(out)
}

/// What spans services: a gateway's routes send only to services it calls (its proxy has a
/// policy and copies for those alone), and nothing in the mesh calls a gateway (it takes
/// requests from outside only).
pub fn check(mesh: &Mesh, diags: &mut Vec<Diagnostic>) {
    for s in mesh.services.values() {
        for call in &s.calls {
            let callee = mesh.services.get(&call.to);
            let path = format!("services.{}.calls.{}", s.name, call.to);
            // One report per call, not per route of it.
            if callee.is_some_and(|c| c.gateway.is_some()) && !diags.iter().any(|d| d.path == path)
            {
                diags.push(mesh.diag(
                    &path,
                    format!("`{}` is a gateway: it takes requests from outside the mesh only; call the services it routes to", call.to),
                ));
            }
        }
        if s.gateway.is_none() {
            continue;
        }
        let ServiceRoutes::Http(routes) = &s.routes else {
            continue;
        };
        let calls = |name: &str| s.calls.iter().any(|c| c.to == name);
        for (route, r) in routes {
            for (i, rule) in r.rules.iter().enumerate() {
                let at = format!("services.{}.routes.{route}.rules[{i}]", s.name);
                for (j, b) in rule.backends.iter().enumerate() {
                    if !calls(&b.target.service) {
                        diags.push(mesh.diag(
                            &format!("{at}.backends[{j}].service"),
                            format!(
                                "the gateway does not call `{}`: add `services.{}.calls.{}` (its timeout and retries)",
                                b.target.service, s.name, b.target.service
                            ),
                        ));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
