//! `services.<name>.gateway` as written: the front door for clients outside the mesh — a plain
//! HTTP listener, a TLS listener with a certificate per group of host names (SNI), a rate limit
//! on what comes in — and its reader, every problem collected with its path. What the values
//! mean together (addresses, host names, the routes' backends against the calls) is checked
//! when the mesh is resolved ([`crate::gateway`]).

use schemars::JsonSchema;
use serde::Serialize;

use super::RawLimit;
use super::rate_limit::read_limit;
use super::values::{positive_duration, positive_u32};
use crate::Dur;
use crate::read::Reader;
use crate::yaml::Node;

/// `services.<name>.gateway`: this service is a gateway, not an app. Its proxy listens for
/// clients outside the mesh and routes their requests by the service's `routes` (host names
/// and paths) to the services it `calls`, with its own SPIFFE identity (docs/routes.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawGateway {
    /// Plain HTTP (HTTP/1.1, and h2 with prior knowledge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<RawGatewayHttp>,
    /// TLS (1.2 or 1.3), HTTP/1.1 or h2 by ALPN, a certificate chosen by the name the client
    /// asks for (SNI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub https: Option<RawGatewayHttps>,
    /// Requests a second let in, every client together and each client address on its own;
    /// over it, 429 with `Retry-After`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RawGatewayRateLimit>,
    /// The largest request body accepted, in bytes (default 10485760, 10 MiB): a
    /// `Content-Length` past it is answered 413 before anything is sent on, and a body that
    /// streams past it (chunked) is cut there and answered 413 if no answer has begun.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u32>,
    /// How long a request's body may go without a byte arriving (default `30s`, as a slow
    /// client's allowance); past it the request is answered 408 and what was sent on is ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_timeout: Option<Dur>,
    /// The proxies in front of the gateway (a cloud load balancer, a CDN), as address ranges
    /// (`10.0.0.0/8`, `2001:db8::/32`): a request from one of them is from the client its
    /// `X-Forwarded-For` names — the nearest address there that is not one of them — for the
    /// per-client rate limit and what the app is told. Default: none, and the gateway's peer is
    /// the client whatever a header says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawGatewayHttp {
    /// `ip:port` (port 0: any free port).
    pub listen: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawGatewayHttps {
    /// `ip:port` (port 0: any free port).
    pub listen: String,
    /// A certificate for each group of host names; a client asking for a name none of them
    /// lists (or for none) is refused in the handshake.
    pub certificates: Vec<RawGatewayCertificate>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawGatewayCertificate {
    /// The names it serves: `shop.example.com`, or `*.example.com` (any name one or more labels
    /// below it). A name is served by one certificate only.
    pub hostnames: Vec<String>,
    /// PEM file of the certificate chain, relative to the mesh file.
    pub cert: String,
    /// PEM file of its private key, relative to the mesh file.
    pub key: String,
}

/// `services.<name>.gateway.rate_limit`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawGatewayRateLimit {
    /// Every client together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<RawLimit>,
    /// Each client address on its own (a table of at most 4,096; past it, one shared bucket).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_client: Option<RawLimit>,
}

pub(super) fn read_gateway(r: &mut Reader, n: &Node, p: &str) -> Option<RawGateway> {
    let mut f = r.fields(n, p)?;
    let out = RawGateway {
        http: f.get(r, "http", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let listen = needed(r, &mut f, n, p, "listen", "`ip:port`");
            f.finish(r);
            Some(RawGatewayHttp { listen: listen? })
        }),
        https: f.get(r, "https", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let listen = needed(r, &mut f, n, p, "listen", "`ip:port`");
            let certificates = f.get(r, "certificates", |r, n, p| r.list(n, p, read_certificate));
            f.finish(r);
            Some(RawGatewayHttps {
                listen: listen?,
                certificates: certificates.unwrap_or_default(),
            })
        }),
        rate_limit: f.get(r, "rate_limit", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let limit = RawGatewayRateLimit {
                total: f.get(r, "total", read_limit),
                per_client: f.get(r, "per_client", read_limit),
            };
            f.finish(r);
            Some(limit)
        }),
        max_body_bytes: f.get(r, "max_body_bytes", positive_u32),
        body_timeout: f.get(r, "body_timeout", positive_duration),
        trusted_proxies: f
            .get(r, "trusted_proxies", |r, n, p| {
                r.list(n, p, |r, n, p| {
                    let text = r.string(n, p)?;
                    match text.parse::<crate::capture::Cidr>() {
                        Ok(_) => Some(text),
                        Err(message) => {
                            r.error(p, n.pos, message);
                            None
                        }
                    }
                })
            })
            .unwrap_or_default(),
    };
    f.finish(r);
    Some(out)
}

fn read_certificate(r: &mut Reader, n: &Node, p: &str) -> Option<RawGatewayCertificate> {
    let mut f = r.fields(n, p)?;
    if !f.has("hostnames") {
        r.error(
            p,
            n.pos,
            "a certificate needs `hostnames`: the names it serves",
        );
    }
    let hostnames = f.get(r, "hostnames", |r, n, p| r.list(n, p, Reader::string));
    let cert = needed(r, &mut f, n, p, "cert", "a PEM file");
    let key = needed(r, &mut f, n, p, "key", "a PEM file");
    f.finish(r);
    Some(RawGatewayCertificate {
        hostnames: hostnames?,
        cert: cert?,
        key: key?,
    })
}

/// A string field that must be there; its absence reported at the block.
fn needed(
    r: &mut Reader,
    f: &mut crate::read::Fields<'_>,
    n: &Node,
    p: &str,
    key: &'static str,
    what: &str,
) -> Option<String> {
    if !f.has(key) {
        r.error(p, n.pos, format!("`{key}` is missing: {what}"));
        return None;
    }
    f.get(r, key, Reader::string)
}
