//! Seeing requests, resolved: `mesh.tracing` with its defaults ([`Tracing`]). Pure; the proxy
//! does the recording and exporting.

use serde::Serialize;

use crate::raw::{OtlpProtocol, RawMesh, RawTracing, Sampling};

/// Spans a proxy holds for export unless `mesh.tracing.queue` says otherwise.
pub const DEFAULT_SPAN_QUEUE: u32 = 2048;

/// What the mesh file asks the proxies to record.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Observe {
    /// `mesh.tracing`; `None`: context that arrives is passed on, no trace is started, nothing
    /// is recorded.
    pub tracing: Option<Tracing>,
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

/// `mesh.tracing`, with its defaults.
pub(crate) fn resolve(raw: &RawMesh) -> Observe {
    Observe {
        tracing: raw
            .mesh
            .as_ref()
            .and_then(|m| m.tracing.as_ref())
            .map(tracing),
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::mesh::Mesh;

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
}
