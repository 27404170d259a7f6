//! `services.<name>.upgrade` as written: which protocol switches (`Upgrade: websocket`) and
//! whether `CONNECT` the service's app accepts through the mesh, and how long such a connection
//! may sit with no byte either way. Its reader, every problem collected with its path.

use schemars::JsonSchema;
use serde::Serialize;

use super::OrNone;
use super::values::{or_none, positive_timeout};
use crate::duration::Dur;
use crate::read::Reader;
use crate::yaml::Node;

/// `services.<name>.upgrade`: the app accepts these HTTP/1.1 protocol switches, or `CONNECT`.
/// An upgraded connection is carried both ways between proxies over the mesh's mutual TLS with
/// opaque TCP's connection policy (docs/tcp.md); without this block both are refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUpgrade {
    /// `Upgrade` protocol names the app accepts (`websocket`; compared without case). Any
    /// other is refused with 501.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<String>,
    /// `CONNECT` to this service: a TCP connection to its app's address (default `false`:
    /// refused with 405).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect: Option<bool>,
    /// An upgraded connection with no byte either way for this long is closed (default 1h);
    /// `none`: never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<OrNone<Dur>>,
}

/// An `Upgrade` protocol name: an RFC 9110 token (a version after `/` allowed), not `h2c`,
/// which is a switch between the app and its proxy, never carried.
fn protocol(r: &mut Reader, n: &Node, p: &str) -> Option<String> {
    let s = r.string(n, p)?;
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let (name, version) = s.split_once('/').unwrap_or((&s, "x"));
    if !token(name) || !token(version) {
        r.error(
            p,
            n.pos,
            format!("`{s}` is not a protocol name (such as `websocket`)"),
        );
        return None;
    }
    if name.eq_ignore_ascii_case("h2c") {
        r.error(
            p,
            n.pos,
            "`h2c` is never carried: the proxies speak HTTP/2 between themselves already",
        );
        return None;
    }
    Some(s.to_ascii_lowercase())
}

pub(super) fn read_upgrade(r: &mut Reader, n: &Node, p: &str) -> Option<RawUpgrade> {
    let mut f = r.fields(n, p)?;
    let upgrade = RawUpgrade {
        protocols: f
            .get(r, "protocols", |r, n, p| r.list(n, p, protocol))
            .unwrap_or_default(),
        connect: f.get(r, "connect", Reader::bool),
        idle_timeout: f.get(r, "idle_timeout", or_none(positive_timeout)),
    };
    f.finish(r);
    Some(upgrade)
}
