//! The families of opaque TCP connections (docs/tcp.md), per direction and service — the
//! caller's proxy counts under `outbound` and the callee's upstream service, the callee's under
//! `inbound` and its own — resolved once per connection into [`TcpHandles`], so bytes are counted
//! on atomics. Every label value comes from the mesh file; `reason` is a fixed word.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Direction;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TcpLabels {
    direction: Direction,
    service: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    direction: Direction,
    service: String,
    /// `to-callee` (what the calling app wrote) or `to-caller`.
    way: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    direction: Direction,
    service: String,
    reason: &'static str,
}

fn duration_histogram() -> Histogram {
    // 1 ms … ~9 h: a TCP connection lives from a request's length to a session's.
    Histogram::new(exponential_buckets(0.001, 3.0, 16))
}

/// The TCP families, registered with the proxy's others.
#[derive(Clone)]
pub struct TcpMetrics {
    open: Family<TcpLabels, Gauge>,
    total: Family<TcpLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    duration: Family<TcpLabels, Histogram, fn() -> Histogram>,
    refused: Family<RefusedLabels, Counter>,
}

impl std::fmt::Debug for TcpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TcpMetrics")
    }
}

/// One connection's handles: its gauge place, its byte counters, its duration.
#[derive(Debug, Clone)]
pub struct TcpHandles {
    open: Gauge,
    pub to_callee: Counter,
    pub to_caller: Counter,
    duration: Histogram,
}

impl TcpMetrics {
    pub(super) fn register(registry: &mut Registry) -> TcpMetrics {
        let m = TcpMetrics {
            open: Family::default(),
            total: Family::default(),
            bytes: Family::default(),
            duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            refused: Family::default(),
        };
        registry.register(
            "tcp_connections",
            "Opaque TCP connections carried",
            m.total.clone(),
        );
        registry.register(
            "tcp_connections_open",
            "Opaque TCP connections open",
            m.open.clone(),
        );
        registry.register(
            "tcp_bytes",
            "Bytes carried on opaque TCP connections, by way",
            m.bytes.clone(),
        );
        registry.register(
            "tcp_connection_duration_seconds",
            "How long opaque TCP connections lived",
            m.duration.clone(),
        );
        registry.register(
            "tcp_refused",
            "Opaque TCP connections refused, by reason",
            m.refused.clone(),
        );
        m
    }

    /// A connection starts being carried: counted and open until [`TcpHandles::closed`].
    pub fn opened(&self, direction: Direction, service: &str) -> TcpHandles {
        let labels = TcpLabels {
            direction,
            service: service.to_owned(),
        };
        let bytes = |way| {
            self.bytes.get_or_create_owned(&BytesLabels {
                direction,
                service: service.to_owned(),
                way,
            })
        };
        self.total.get_or_create(&labels).inc();
        let open = self.open.get_or_create_owned(&labels);
        open.inc();
        TcpHandles {
            open,
            to_callee: bytes("to-callee"),
            to_caller: bytes("to-caller"),
            duration: self.duration.get_or_create_owned(&labels),
        }
    }

    pub fn refused(&self, direction: Direction, service: &str, reason: &'static str) {
        self.refused
            .get_or_create(&RefusedLabels {
                direction,
                service: service.to_owned(),
                reason,
            })
            .inc();
    }
}

impl TcpHandles {
    pub fn closed(self, lived: Duration) {
        self.open.dec();
        self.duration.observe(lived.as_secs_f64());
    }
}
