//! What the mesh file says about seeing requests: `mesh.tracing` (where spans go, over which
//! OTLP transport, and which share of new traces is recorded) and `services.<name>.access_log`
//! (opt-in per service, narrowed to routes by name). The types as written and their readers;
//! `crate::observe` resolves them.

use schemars::JsonSchema;
use serde::Serialize;

use crate::read::Reader;
use crate::yaml::{Node, Value};

/// `mesh.tracing`: spans exported over OTLP, and how traces are sampled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    /// The OTLP receiver, `host:port` (an OpenTelemetry Collector, Jaeger, …). Without it the
    /// proxies still pass trace context on, but record no spans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collector: Option<String>,
    /// How spans travel: `grpc` (OTLP/gRPC, usually port 4317; the default) or `http`
    /// (OTLP/HTTP with protobuf bodies, `POST /v1/traces`, usually port 4318).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<OtlpProtocol>,
    /// The share of traces started at a proxy (no context arrived) that are recorded: `1%`,
    /// `0.5%`, or a ratio from 0 to 1 (default `100%`). A trace that arrives keeps its
    /// parent's decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// Spans a proxy holds waiting for export at most (default 2048); past it, new spans are
    /// dropped and counted (`hopwise_spans_dropped_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
}

/// A sampling ratio as written: a number from 0 to 1, or a percentage (`"1%"`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Sampling {
    Ratio(#[schemars(range(min = 0.0, max = 1.0))] f64),
    Percent(#[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?%$"))] String),
}

impl Sampling {
    /// The ratio, 0 to 1 (the reader checked the text).
    pub fn ratio(&self) -> f64 {
        match self {
            Sampling::Ratio(r) => *r,
            Sampling::Percent(p) => percent(p).unwrap_or(1.0) / 100.0,
        }
    }
}

fn percent(text: &str) -> Option<f64> {
    text.strip_suffix('%')?.trim().parse::<f64>().ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OtlpProtocol {
    Grpc,
    Http,
}

impl OtlpProtocol {
    pub const ALL: [(&'static str, OtlpProtocol); 2] =
        [("grpc", OtlpProtocol::Grpc), ("http", OtlpProtocol::Http)];
}

/// `services.<name>.access_log`: one line per request through the service's proxies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAccessLog {
    /// `json` (one object per line; the default) or `common` (the common log format, with
    /// hopwise's fields after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<LogFormat>,
    /// `stderr` (the default) or a file, relative to the directory the proxy runs in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// A file is rotated when it would grow past this many bytes (default 10485760): it
    /// becomes `<file>.1`, replacing the one before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Only these routes (by name: a call's route, or the callee's name for a call without
    /// routes; `inbound` for inbound requests no caller's route names). Default: every route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routes: Option<Vec<String>>,
    /// Log the query string as sent (default `false`: it is replaced by `?…`, since queries
    /// often carry tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<bool>,
    /// Lines waiting to be written at most (default 4096); past it, lines are dropped and
    /// counted (`hopwise_access_log_dropped_total`): a request never waits for its log line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    Json,
    Common,
}

impl LogFormat {
    pub const ALL: [(&'static str, LogFormat); 2] =
        [("json", LogFormat::Json), ("common", LogFormat::Common)];
}

/// The most spans or lines a queue may be asked to hold.
const MAX_QUEUE: u64 = 1 << 20;

pub(super) fn read_tracing(r: &mut Reader, n: &Node, p: &str) -> Option<RawTracing> {
    let mut f = r.fields(n, p)?;
    let t = RawTracing {
        collector: f.get(r, "collector", host_port),
        protocol: f.get(r, "protocol", |r, n, p| r.word(n, p, &OtlpProtocol::ALL)),
        sampling: f.get(r, "sampling", sampling),
        queue: f.get(r, "queue", queue),
    };
    f.finish(r);
    Some(t)
}

pub(super) fn read_access_log(r: &mut Reader, n: &Node, p: &str) -> Option<RawAccessLog> {
    let mut f = r.fields(n, p)?;
    let a = RawAccessLog {
        format: f.get(r, "format", |r, n, p| r.word(n, p, &LogFormat::ALL)),
        to: f.get(r, "to", |r, n, p| {
            let s = r.string(n, p)?;
            if s.is_empty() {
                r.error(p, n.pos, "write `stderr` or a file name");
                return None;
            }
            Some(s)
        }),
        max_bytes: f.get(r, "max_bytes", |r, n, p| {
            let v = r.count(n, p, u64::MAX >> 1)?;
            if v < 4096 {
                r.error(p, n.pos, format!("{v} bytes is too small: at least 4096"));
                return None;
            }
            Some(v)
        }),
        routes: f.get(r, "routes", |r, n, p| r.list(n, p, Reader::string)),
        query: f.get(r, "query", Reader::bool),
        queue: f.get(r, "queue", queue),
    };
    f.finish(r);
    Some(a)
}

fn queue(r: &mut Reader, n: &Node, p: &str) -> Option<u32> {
    let v = r.count(n, p, MAX_QUEUE)?;
    if v == 0 {
        r.error(
            p,
            n.pos,
            "must be at least 1: a queue of 0 drops everything",
        );
        return None;
    }
    Some(v as u32)
}

/// `host:port`, the port a number.
fn host_port(r: &mut Reader, n: &Node, p: &str) -> Option<String> {
    let s = r.string(n, p)?;
    let ok = s
        .rsplit_once(':')
        .is_some_and(|(h, port)| !h.is_empty() && port.parse::<u16>().is_ok_and(|v| v > 0));
    if !ok {
        r.error(
            p,
            n.pos,
            format!("`{s}` is not `host:port` (e.g. `127.0.0.1:4317`)"),
        );
        return None;
    }
    Some(s)
}

fn sampling(r: &mut Reader, n: &Node, p: &str) -> Option<Sampling> {
    let (value, sampling) = match &n.value {
        Value::Str(s) => {
            let Some(v) = percent(s) else {
                r.error(
                    p,
                    n.pos,
                    format!("`{s}` is not a percentage: write e.g. `1%` or a ratio like 0.01"),
                );
                return None;
            };
            (v / 100.0, Sampling::Percent(s.clone()))
        }
        _ => {
            let v = r.float(n, p)?;
            (v, Sampling::Ratio(v))
        }
    };
    if !(0.0..=1.0).contains(&value) {
        r.error(p, n.pos, "must be from 0 to 1 (or 0% to 100%)");
        return None;
    }
    Some(sampling)
}
