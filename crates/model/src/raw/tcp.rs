//! `services.<name>.tcp` as written: the app speaks opaque TCP (not HTTP) on these ports, and
//! how long such a connection may sit with no byte either way. Its reader, every problem
//! collected with its path.

use schemars::JsonSchema;
use serde::Serialize;

use super::OrNone;
use super::values::{or_none, port, positive_timeout};
use crate::duration::Dur;
use crate::read::Reader;
use crate::yaml::Node;

/// `services.<name>.tcp`: the service's app speaks opaque TCP on these ports. Its proxies carry
/// each connection whole, inside an HTTP/2 CONNECT stream over the mesh's mutual TLS: no
/// request, path or status is seen, so only connection policy applies (see docs/tcp.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTcp {
    /// The app's ports carried as opaque TCP (never inspected for HTTP: server-speaks-first
    /// protocols such as MySQL or SMTP belong here). Default: the port of each copy's `app`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// A connection with no byte either way for this long is closed (default 1h); `none`:
    /// never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<OrNone<Dur>>,
}

pub(super) fn read_tcp(r: &mut Reader, n: &Node, p: &str) -> Option<RawTcp> {
    let mut f = r.fields(n, p)?;
    let tcp = RawTcp {
        ports: f
            .get(r, "ports", |r, n, p| r.list(n, p, port))
            .unwrap_or_default(),
        idle_timeout: f.get(r, "idle_timeout", or_none(positive_timeout)),
    };
    f.finish(r);
    Some(tcp)
}
