//! `services.<name>.inbound.rate_limit` as written: how many requests a second the service's
//! inbound proxies let through to the app — every caller together, each calling identity, a
//! named caller, a route — before answering 429. Its reader, every problem collected with its
//! path; what the names refer to is checked when the mesh is resolved ([`crate::rate`]).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use super::values::positive_u32;
use crate::read::Reader;
use crate::yaml::Node;

/// `services.<name>.inbound.rate_limit`: local rate limits on the service's inbound side, each
/// a token bucket per proxy (docs/config.md). A request any of them refuses is answered 429
/// with `Retry-After`, and never reaches the app.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Every caller together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<RawLimit>,
    /// Each calling identity on its own (not applied with `--plaintext`: no identity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_caller: Option<RawLimit>,
    /// A calling service by name, in place of `per_caller` for it.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub callers: IndexMap<String, RawLimit>,
    /// Requests on one of the service's routes (the names its callers' `routes` give), every
    /// caller together.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub routes: IndexMap<String, RawLimit>,
}

/// One limit: `rate` requests a second on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    /// Requests a second, at least 1.
    pub rate: u32,
    /// Requests let through at once after a quiet spell (default: `rate`, one second's worth).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

pub(super) fn read_rate_limit(r: &mut Reader, n: &Node, p: &str) -> Option<RawRateLimit> {
    let mut f = r.fields(n, p)?;
    let named = |r: &mut Reader, n: &Node, p: &str| Some(r.named(n, p, read_limit));
    let out = RawRateLimit {
        total: f.get(r, "total", read_limit),
        per_caller: f.get(r, "per_caller", read_limit),
        callers: f.get(r, "callers", named).unwrap_or_default(),
        routes: f.get(r, "routes", named).unwrap_or_default(),
    };
    f.finish(r);
    Some(out)
}

pub(super) fn read_limit(r: &mut Reader, n: &Node, p: &str) -> Option<RawLimit> {
    let mut f = r.fields(n, p)?;
    let written = f.has("rate");
    let rate = f.get(r, "rate", positive_u32);
    let burst = f.get(r, "burst", positive_u32);
    f.finish(r);
    if !written {
        r.error(
            p,
            n.pos,
            "a limit needs `rate` (requests a second); `burst` is optional",
        );
    }
    Some(RawLimit { rate: rate?, burst })
}
