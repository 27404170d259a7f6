//! Seeing requests, resolved: `mesh.tracing` with its defaults ([`Tracing`]) and each service's
//! access log ([`AccessLog`]), its routes checked against the routes the service really has.
//! Pure; the proxy does the recording, exporting and writing.

use indexmap::IndexMap;
use serde::Serialize;

use crate::diag::Diagnostic;
use crate::mesh::Mesh;
use crate::raw::{LogFormat, OtlpProtocol, RawAccessLog, RawMesh, RawTracing, Sampling};

/// Spans a proxy holds for export unless `mesh.tracing.queue` says otherwise.
pub const DEFAULT_SPAN_QUEUE: u32 = 2048;
/// Lines an access log holds for writing unless `access_log.queue` says otherwise.
pub const DEFAULT_LOG_QUEUE: u32 = 4096;
/// A log file's size before rotation unless `access_log.max_bytes` says otherwise (10 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 10 << 20;

/// What the mesh file asks the proxies to record.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Observe {
    /// `mesh.tracing`; `None`: context that arrives is passed on, no trace is started, nothing
    /// is recorded.
    pub tracing: Option<Tracing>,
    /// The services that log their requests, by name.
    pub access_logs: IndexMap<String, AccessLog>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tracing {
    /// `host:port` of the OTLP receiver; `None`: traces are started and passed on, not exported.
    pub collector: Option<String>,
    pub protocol: OtlpProtocol,
    /// The share of traces started here that are recorded, 0 to 1.
    pub ratio: f64,
    pub queue: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccessLog {
    pub format: LogFormat,
    /// `None`: stderr; else a file.
    pub file: Option<String>,
    pub max_bytes: u64,
    /// `None`: every route.
    pub routes: Option<Vec<String>>,
    /// The query string logged as sent (otherwise `?…`).
    pub query: bool,
    pub queue: u32,
}

impl AccessLog {
    /// Does this log take requests of route `name`?
    pub fn logs(&self, route: &str) -> bool {
        self.routes
            .as_ref()
            .is_none_or(|r| r.iter().any(|n| n == route))
    }
}

/// `mesh.tracing` and every service's `access_log`, with their defaults.
pub(crate) fn resolve(raw: &RawMesh) -> Observe {
    Observe {
        tracing: raw
            .mesh
            .as_ref()
            .and_then(|m| m.tracing.as_ref())
            .map(tracing),
        access_logs: raw
            .services
            .iter()
            .filter_map(|(name, s)| Some((name.clone(), access_log(s.access_log.as_ref()?))))
            .collect(),
    }
}

fn tracing(raw: &RawTracing) -> Tracing {
    Tracing {
        collector: raw.collector.clone(),
        protocol: raw.protocol.unwrap_or(OtlpProtocol::Grpc),
        ratio: raw.sampling.as_ref().map_or(1.0, Sampling::ratio),
        queue: raw.queue.unwrap_or(DEFAULT_SPAN_QUEUE),
    }
}

fn access_log(raw: &RawAccessLog) -> AccessLog {
    AccessLog {
        format: raw.format.unwrap_or(LogFormat::Json),
        file: raw.to.clone().filter(|t| t != "stderr"),
        max_bytes: raw.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
        routes: raw.routes.clone(),
        query: raw.query.unwrap_or(false),
        queue: raw.queue.unwrap_or(DEFAULT_LOG_QUEUE),
    }
}

/// Each `access_log.routes` entry must name a route of the service: one it calls (a call's
/// route, or the callee for a call without routes), one its callers' routes name, or
/// `inbound`. A misspelt name would silently log nothing.
pub(crate) fn check(mesh: &Mesh, diags: &mut Vec<Diagnostic>) {
    for (service, log) in &mesh.observe.access_logs {
        let mut known: Vec<&str> = vec!["inbound"];
        for call in mesh.calls() {
            let name = call.route.as_deref().unwrap_or(&call.to);
            let ours = call.from == *service || (call.to == *service && call.route.is_some());
            if ours && !known.contains(&name) {
                known.push(name);
            }
        }
        let at = format!("services.{service}.access_log.routes");
        for (i, name) in log.routes.iter().flatten().enumerate() {
            if known.contains(&name.as_str()) {
                continue;
            }
            let list: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
            diags.push(Diagnostic::new(
                format!("{at}[{i}]"),
                mesh.locations.of(&at),
                format!(
                    "`{name}` is not a route of `{service}`; its routes: {}",
                    list.join(", ")
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(extra_mesh: &str, log: &str) -> Result<Mesh, crate::Diagnostics> {
        Mesh::from_yaml(&format!(
            "mesh:\n  name: m\n{extra_mesh}services:\n  a:\n{log}    calls:\n      b:\n        routes:\n          quote: {{ path: /quote }}\n  b: {{}}\n"
        ))
    }

    #[test]
    fn tracing_defaults_and_percentages() {
        let m = mesh(
            "  tracing:\n    collector: 127.0.0.1:4317\n    sampling: 1%\n",
            "",
        )
        .unwrap();
        let t = m.observe.tracing.unwrap();
        assert_eq!(t.collector.as_deref(), Some("127.0.0.1:4317"));
        assert_eq!(t.protocol, OtlpProtocol::Grpc);
        assert!((t.ratio - 0.01).abs() < 1e-12);
        assert_eq!(t.queue, DEFAULT_SPAN_QUEUE);
        let m = mesh("  tracing:\n    protocol: http\n    sampling: 0.25\n", "").unwrap();
        let t = m.observe.tracing.unwrap();
        assert_eq!(
            (t.protocol, t.ratio, t.collector),
            (OtlpProtocol::Http, 0.25, None)
        );
        assert_eq!(mesh("", "").unwrap().observe.tracing, None);
    }

    #[test]
    fn bad_tracing_fields_are_named_with_their_line() {
        let err = mesh(
            "  tracing:\n    collector: nowhere\n    sampling: 150%\n    protocol: udp\n    queue: 0\n",
            "",
        )
        .unwrap_err()
        .render("");
        for part in [
            ":4:16: mesh.tracing.collector: `nowhere` is not `host:port`",
            ":5:15: mesh.tracing.sampling: must be from 0 to 1",
            ":6:15: mesh.tracing.protocol: unknown value `udp`",
            ":7:12: mesh.tracing.queue: must be at least 1",
        ] {
            assert!(err.contains(part), "{part:?} not in\n{err}");
        }
    }

    #[test]
    fn access_log_is_opt_in_per_service_and_route() {
        let m = mesh(
            "",
            "    access_log:\n      format: common\n      to: /tmp/a.log\n      routes: [quote, inbound]\n",
        )
        .unwrap();
        let log = &m.observe.access_logs["a"];
        assert_eq!(log.format, LogFormat::Common);
        assert_eq!(log.file.as_deref(), Some("/tmp/a.log"));
        assert!(log.logs("quote") && log.logs("inbound") && !log.logs("other"));
        assert!(!log.query);
        assert!(!m.observe.access_logs.contains_key("b"));
        let m = mesh("", "    access_log: { to: stderr }\n").unwrap();
        assert_eq!(m.observe.access_logs["a"].file, None);
        assert!(m.observe.access_logs["a"].logs("anything"));
    }

    #[test]
    fn a_route_the_service_does_not_have_is_an_error() {
        let err = mesh("", "    access_log:\n      routes: [qoute]\n")
            .unwrap_err()
            .render("");
        assert!(
            err.contains("services.a.access_log.routes[0]: `qoute` is not a route of `a`; its routes: `inbound`, `quote`"),
            "{err}"
        );
        let err = mesh(
            "",
            "    access_log:\n      max_bytes: 10\n      fmt: json\n",
        )
        .unwrap_err()
        .render("");
        assert!(
            err.contains("access_log.max_bytes: 10 bytes is too small"),
            "{err}"
        );
        assert!(
            err.contains("unknown field `fmt`; known fields: format, to,"),
            "{err}"
        );
    }
}
