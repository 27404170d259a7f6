//! `services.<name>.fault` as written: a delay and an abort the service's inbound proxies inject
//! into a share of its requests (optionally only those carrying a header), to see what its
//! callers do. Its reader checks each value where it stands, so a problem names its line; the
//! meaning is [`crate::fault`]'s.

use schemars::JsonSchema;
use serde::Serialize;

use super::values::{duration, positive_u32};
use crate::duration::Dur;
use crate::read::Reader;
use crate::yaml::Node;

/// `services.<name>.fault` (docs/config.md): Istio's `fault` in hopwise's words.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawFault {
    /// Hold a share of the requests this long before they go to the app.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay: Option<RawDelay>,
    /// Answer a share of the requests at once, without the app.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abort: Option<RawAbort>,
    /// Only requests carrying this header (with this value) are touched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<RawFaultHeader>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDelay {
    /// How long (`2s`, `300ms`).
    pub time: Dur,
    /// The share of requests, 0–100 (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAbort {
    /// The HTTP status answered (200–599), for an HTTP service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u32>,
    /// The gRPC status answered (`unavailable`, `internal`, …), for a gRPC service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<String>,
    /// The share of requests, 0–100 (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawFaultHeader {
    pub name: String,
    /// The value it must have exactly; absent: any value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

fn percent(r: &mut Reader, n: &Node, p: &str) -> Option<u8> {
    r.count(n, p, 100).map(|v| v as u8)
}

pub(super) fn read_fault(r: &mut Reader, n: &Node, p: &str) -> Option<RawFault> {
    let mut f = r.fields(n, p)?;
    let out = RawFault {
        delay: f.get(r, "delay", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let written = f.has("time");
            let delay = RawDelay {
                time: f.get(r, "time", duration).unwrap_or_default(),
                percent: f.get(r, "percent", percent),
            };
            f.finish(r);
            if !written {
                r.error(p, n.pos, "a delay needs its `time` (e.g. `2s`)");
            }
            Some(delay)
        }),
        abort: f.get(r, "abort", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let abort = RawAbort {
                status: f.get(r, "status", positive_u32),
                grpc: f.get(r, "grpc", Reader::string),
                percent: f.get(r, "percent", percent),
            };
            f.finish(r);
            Some(abort)
        }),
        header: f.get(r, "header", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let written = f.has("name");
            let header = RawFaultHeader {
                name: f.get(r, "name", Reader::string).unwrap_or_default(),
                value: f.get(r, "value", Reader::string),
            };
            f.finish(r);
            if !written {
                r.error(p, n.pos, "a header needs its `name`");
            }
            Some(header)
        }),
    };
    f.finish(r);
    Some(out)
}
