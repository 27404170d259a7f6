//! `services.<name>.carries`: what the service's app carries from an inbound request to the
//! calls it makes while serving it. The proxies cannot see inside an app, so what travels
//! through it is declared here; the default is nothing (see `crate::carries`).

use schemars::JsonSchema;
use serde::Serialize;

use crate::read::Reader;
use crate::yaml::Node;

/// One thing an app passes on from the request it serves to the calls it makes for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Carry {
    /// W3C `traceparent` (and `tracestate`) or B3, as OpenTelemetry-instrumented apps do: the
    /// proxy then links each outbound call to the inbound request it serves.
    TraceContext,
    /// hopwise's own headers, both ways: `x-hopwise-timeout-ms` onto its calls, and
    /// `x-hopwise-retries-exhausted` from their answers onto its own answer.
    HopwiseHeaders,
    /// The gRPC deadline: its gRPC calls carry what is left of the request's (`grpc-timeout`),
    /// as gRPC libraries do when the app passes the request's context on.
    GrpcDeadline,
}

impl Carry {
    pub const ALL: [(&'static str, Carry); 3] = [
        ("trace-context", Carry::TraceContext),
        ("hopwise-headers", Carry::HopwiseHeaders),
        ("grpc-deadline", Carry::GrpcDeadline),
    ];
}

/// Reads `carries`: a list of [`Carry`] words, each at most once (`[]` says "nothing").
pub(super) fn read_carries(r: &mut Reader, n: &Node, p: &str) -> Option<Vec<Carry>> {
    let items = r.list(n, p, |r, n, p| {
        r.word(n, p, &Carry::ALL).map(|c| (c, n.pos, p.to_owned()))
    })?;
    let mut out: Vec<Carry> = Vec::new();
    for (c, pos, path) in items {
        if out.contains(&c) {
            r.error(&path, pos, "listed twice");
        } else {
            out.push(c);
        }
    }
    Some(out)
}
