//! The mesh file's transparent-capture fields as written: `mesh.capture` (the address range of
//! copies run in their own network namespace, what a destination outside the mesh meets, what
//! is never captured, whether `hopwise up` runs its samples captured) and `services.<name>.address` (the address an app reaches a service at).
//! Their readers check each value where it stands, so a problem names its line; the meaning
//! (which address belongs to whom) is [`crate::capture`]'s.

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Serialize;

use crate::capture::{Cidr, Egress};
use crate::read::Reader;
use crate::yaml::{Node, Value};

/// `mesh.capture`: how `hopwise run` captures an app's TCP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCapture {
    /// IPv4 range (`a.b.c.d/n`, n from 8 to 22) that services' default addresses (its first
    /// /24) and copies' namespace addresses (a /30 per copy after it) come from. Default
    /// `100.77.0.0/16`, in the shared address space (RFC 6598) that no LAN or cloud uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// A captured connection to an address that is no service's or copy's: `refuse` (the
    /// default: closed, counted) or `pass` (carried to that address as it is, counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    /// Destination ports never captured (the app reaches them directly).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_ports: Vec<u16>,
    /// Destination ranges never captured (`a.b.c.d/n` or `::/n`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_cidrs: Vec<String>,
    /// `hopwise up` runs every sample app captured, each copy in its own network namespace
    /// calling its callees by name (needs root, `ip` and `nft`; `up --captured` does the same
    /// for one run). Default `false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
}

pub(super) fn read_capture(r: &mut Reader, node: &Node, path: &str) -> Option<RawCapture> {
    let mut f = r.fields(node, path)?;
    let c = RawCapture {
        range: f.get(r, "range", |r, n, p| {
            let text = r.string(n, p)?;
            match Cidr::range(&text) {
                Ok(_) => Some(text),
                Err(message) => {
                    r.error(p, n.pos, message);
                    None
                }
            }
        }),
        egress: f.get(r, "egress", |r, n, p| r.word(n, p, &Egress::ALL)),
        skip_ports: f
            .get(r, "skip_ports", |r, n, p| {
                r.list(n, p, |r, n, p| {
                    let port = r.count(n, p, u64::from(u16::MAX))?;
                    if port == 0 {
                        r.error(p, n.pos, "port 0 is no destination: write 1 to 65535");
                        return None;
                    }
                    Some(port as u16)
                })
            })
            .unwrap_or_default(),
        skip_cidrs: f
            .get(r, "skip_cidrs", |r, n, p| {
                r.list(n, p, |r, n, p| {
                    let text = r.string(n, p)?;
                    match text.parse::<Cidr>() {
                        Ok(_) => Some(text),
                        Err(message) => {
                            r.error(p, n.pos, message);
                            None
                        }
                    }
                })
            })
            .unwrap_or_default(),
        up: f.get(r, "up", |r, n, p| r.bool(n, p)),
    };
    f.finish(r);
    Some(c)
}

/// `services.<name>.address`: one IP address an app may reach the service at.
pub(super) fn read_address(r: &mut Reader, node: &Node, path: &str) -> Option<String> {
    let text = match &node.value {
        Value::Str(s) => s.clone(),
        _ => return r.string(node, path),
    };
    match text.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() => {
            r.error(
                path,
                node.pos,
                format!(
                    "`{text}` cannot be a service's address: loopback, unspecified and multicast addresses are never captured"
                ),
            );
            None
        }
        Ok(_) => Some(text),
        Err(_) => {
            r.error(
                path,
                node.pos,
                format!("`{text}` is not an IP address (no port): e.g. `100.77.0.9`"),
            );
            None
        }
    }
}
