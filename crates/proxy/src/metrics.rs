//! Prometheus metrics, labelled by service and route *name* — never by raw path, so a member
//! number in `/penalty/U-41` cannot create a series per member. Every label value comes from the
//! mesh file, so the number of series is bounded by the configuration.
//!
//! Handles are resolved once per route ([`RouteMetrics`]) and cloned into the request path, so a
//! request touches atomics, not the label map.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub mod carried;
pub mod faults;
pub mod rules;
pub mod tcp;
use crate::access_log::LogSink;
use crate::otlp::SpanSink;
use crate::tap::Tap;

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Direction {
    Inbound,
    Outbound,
}

impl EncodeLabelValue for Direction {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Direction::Inbound => "inbound",
            Direction::Outbound => "outbound",
        })
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    direction: Direction,
    service: String,
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    direction: Direction,
    service: String,
    route: String,
    class: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplyLabels {
    direction: Direction,
    service: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    service: String,
    route: String,
    condition: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkipLabels {
    service: String,
    route: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    service: String,
    limit: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabels {
    service: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: Direction,
}

/// `direction`: the listener's kind (`inbound`, `outbound`, `admin`); `reason`: `limit`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    direction: &'static str,
    reason: &'static str,
}

/// `outcome`: what became of a captured connection (`capture::Outcome`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandshakeLabels {
    direction: Direction,
    result: &'static str,
}

fn latency_histogram() -> Histogram {
    // 250 µs … ~8 s
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

fn overhead_histogram() -> Histogram {
    // 5 µs … ~80 ms: the proxy's own time is small and must be seen at that scale.
    Histogram::new(exponential_buckets(0.000_005, 2.0, 15))
}

/// All metric families of one proxy process, shared by its workers.
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteLabels, Counter>,
    responses: Family<ResponseLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    overhead: Family<DirectionLabels, Histogram, fn() -> Histogram>,
    local_replies: Family<ReplyLabels, Counter>,
    connections: Family<DirectionLabels, Counter>,
    active: Family<DirectionLabels, Gauge>,
    handshakes: Family<HandshakeLabels, Counter>,
    refused: Family<RefusedLabels, Counter>,
    captured: Family<OutcomeLabels, Counter>,
    tries: Family<RouteLabels, Counter>,
    retries: Family<RetryLabels, Counter>,
    skipped: Family<SkipLabels, Counter>,
    limits: Family<LimitLabels, Counter>,
    ejections: Family<ServiceLabels, Counter>,
    /// Opaque TCP connections' families.
    pub tcp: tcp::TcpMetrics,
    pub carried: carried::CarriedMetrics,
    /// Faults injected ([`faults`]).
    pub faults: faults::FaultMetrics,
    /// Requests by the callee's route and rule that took them ([`rules`]).
    pub rules: rules::RuleMetrics,
    spans_dropped: Counter,
    log_dropped: Counter,
    /// Where access-log lines go, when the service logs (set once, at start).
    log_sink: OnceLock<LogSink>,
    /// Where recorded spans go, when `mesh.tracing.collector` is set (set once, at start).
    span_sink: OnceLock<SpanSink>,
    /// `hopwise tap`'s tappers (the admin endpoint's `/tap`).
    tap: Arc<Tap>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// The handles one route's requests update.
#[derive(Debug, Clone)]
pub struct RouteMetrics {
    requests: Counter,
    tries: Counter,
    route: String,
    latency: Histogram,
    overhead: Histogram,
    /// 1xx … 5xx, then gRPC errors carried in a 200
    classes: [Counter; 6],
    direction: Direction,
    service: String,
    metrics: Arc<Metrics>,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("hopwise");
        let requests = Family::default();
        let responses = Family::default();
        let latency = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        let overhead = Family::new_with_constructor(overhead_histogram as fn() -> Histogram);
        let local_replies = Family::default();
        let connections = Family::default();
        let active = Family::default();
        let handshakes = Family::default();
        let refused = Family::default();
        let captured = Family::default();
        let tries = Family::default();
        let retries = Family::default();
        let skipped = Family::default();
        let limits = Family::default();
        let ejections = Family::default();
        let spans_dropped = Counter::default();
        let log_dropped = Counter::default();
        registry.register(
            "access_log_dropped",
            "Access-log lines dropped because the queue to the writer was full",
            log_dropped.clone(),
        );
        let tap_dropped = Counter::default();
        registry.register(
            "tap_dropped",
            "Tap lines dropped because a tapper's queue was full (a slow `hopwise tap`)",
            tap_dropped.clone(),
        );
        registry.register(
            "spans_dropped",
            "Spans not exported: the queue to the exporter was full, or the collector did not take them",
            spans_dropped.clone(),
        );
        registry.register(
            "tries",
            "Tries sent upstream (first tries and retries)",
            tries.clone(),
        );
        registry.register(
            "retries",
            "Retries made, by the condition that allowed them",
            retries.clone(),
        );
        registry.register(
            "retries_skipped",
            "Retries a condition allowed but the proxy did not make, by reason",
            skipped.clone(),
        );
        registry.register(
            "limits_tripped",
            "Requests or retries refused by a cap",
            limits.clone(),
        );
        registry.register(
            "ejections",
            "Copies taken out of the rotation by outlier detection",
            ejections.clone(),
        );
        registry.register("requests", "Requests received, by route", requests.clone());
        registry.register(
            "responses",
            "Responses sent, by route and status class",
            responses.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request to response headers, upstream included",
            latency.clone(),
        );
        registry.register(
            "proxy_overhead_seconds",
            "Time spent inside the proxy per request, upstream excluded",
            overhead.clone(),
        );
        registry.register(
            "local_replies",
            "Responses the proxy made itself, by reason",
            local_replies.clone(),
        );
        registry.register("connections", "Connections accepted", connections.clone());
        registry.register("connections_active", "Connections open", active.clone());
        registry.register(
            "connections_refused",
            "Connections closed at once on accept, by listener and reason (limit: the listener is full)",
            refused.clone(),
        );
        registry.register(
            "captured_connections",
            "Connections from a captured app, by what became of them (service, no-destination, egress-refused, egress-passed, port-refused)",
            captured.clone(),
        );
        registry.register(
            "tls_handshakes",
            "TLS handshakes, by result",
            handshakes.clone(),
        );
        let tcp = tcp::TcpMetrics::register(&mut registry);
        let carried = carried::CarriedMetrics::register(&mut registry);
        let faults = faults::FaultMetrics::register(&mut registry);
        let rules = rules::RuleMetrics::register(&mut registry);
        Arc::new(Metrics {
            tcp,
            carried,
            faults,
            rules,
            registry,
            requests,
            responses,
            latency,
            overhead,
            local_replies,
            connections,
            active,
            handshakes,
            refused,
            captured,
            tries,
            retries,
            skipped,
            limits,
            ejections,
            spans_dropped,
            log_dropped,
            log_sink: OnceLock::new(),
            span_sink: OnceLock::new(),
            tap: Arc::new(Tap::new(tap_dropped)),
        })
    }

    /// The counter of access-log lines lost, for the writer.
    pub fn log_dropped(&self) -> Counter {
        self.log_dropped.clone()
    }

    /// Puts the access log's queue in place (once; a second call is ignored).
    pub fn set_log_sink(&self, sink: LogSink) {
        let _ = self.log_sink.set(sink);
    }

    /// Where access-log lines go; `None` when the service does not log.
    pub fn log_sink(&self) -> Option<&LogSink> {
        self.log_sink.get()
    }

    /// The live tap's tappers.
    pub fn tap(&self) -> &Arc<Tap> {
        &self.tap
    }

    /// The counter of spans lost, for the exporter.
    pub fn spans_dropped(&self) -> Counter {
        self.spans_dropped.clone()
    }

    /// Puts the span exporter's queue in place (once; a second call is ignored).
    pub fn set_span_sink(&self, sink: SpanSink) {
        let _ = self.span_sink.set(sink);
    }

    /// Where recorded spans go; `None` without a collector.
    pub fn span_sink(&self) -> Option<&SpanSink> {
        self.span_sink.get()
    }

    pub fn limit_tripped(&self, service: &str, limit: &'static str) {
        self.limits
            .get_or_create(&LimitLabels {
                service: service.to_owned(),
                limit,
            })
            .inc();
    }

    pub fn ejection(&self, service: &str) {
        self.ejections
            .get_or_create(&ServiceLabels {
                service: service.to_owned(),
            })
            .inc();
    }

    /// Handles for one route; call once per route and keep them.
    pub fn route(
        self: &Arc<Self>,
        direction: Direction,
        service: &str,
        route: &str,
    ) -> RouteMetrics {
        let labels = RouteLabels {
            direction,
            service: service.to_owned(),
            route: route.to_owned(),
        };
        let class = |class| {
            self.responses.get_or_create_owned(&ResponseLabels {
                direction,
                service: service.to_owned(),
                route: route.to_owned(),
                class,
            })
        };
        RouteMetrics {
            requests: self.requests.get_or_create_owned(&labels),
            tries: self.tries.get_or_create_owned(&labels),
            route: route.to_owned(),
            latency: self.latency.get_or_create_owned(&labels),
            overhead: self
                .overhead
                .get_or_create_owned(&DirectionLabels { direction }),
            classes: [
                class("1xx"),
                class("2xx"),
                class("3xx"),
                class("4xx"),
                class("5xx"),
                class("grpc-error"),
            ],
            direction,
            service: service.to_owned(),
            metrics: self.clone(),
        }
    }

    pub fn connection_opened(&self, direction: Direction) {
        let l = DirectionLabels { direction };
        self.connections.get_or_create(&l).inc();
        self.active.get_or_create(&l).inc();
    }

    pub fn connection_closed(&self, direction: Direction) {
        self.active
            .get_or_create(&DirectionLabels { direction })
            .dec();
    }

    /// A connection closed as soon as accepted: `direction` is the listener's kind.
    pub fn connection_refused(&self, direction: &'static str, reason: &'static str) {
        self.refused
            .get_or_create(&RefusedLabels { direction, reason })
            .inc();
    }

    /// A connection from a captured app, by `outcome`.
    pub fn captured(&self, outcome: &'static str) {
        self.captured
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    pub fn handshake(&self, direction: Direction, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.handshakes
            .get_or_create(&HandshakeLabels { direction, result })
            .inc();
    }

    /// A local reply outside any route (no route matched, forbidden caller).
    pub fn local_reply(&self, direction: Direction, service: &str, reason: &'static str) {
        self.local_replies
            .get_or_create(&ReplyLabels {
                direction,
                service: service.to_owned(),
                reason,
            })
            .inc();
    }

    /// The OpenMetrics text of every family.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl RouteMetrics {
    pub fn request(&self) {
        self.requests.inc();
    }

    /// Records a response: its class (a gRPC error in a 200 counts as `grpc-error`, not as a
    /// success), the total time, and the time spent upstream.
    pub fn response(
        &self,
        status: u16,
        headers: &http::HeaderMap,
        total: Duration,
        upstream: Duration,
    ) {
        let grpc_error = headers
            .get(crate::error::GRPC_STATUS)
            .is_some_and(|v| v.as_bytes() != b"0");
        let i = if grpc_error {
            5
        } else {
            usize::from(status / 100).clamp(1, 5) - 1
        };
        self.classes[i].inc();
        self.latency.observe(total.as_secs_f64());
        self.overhead
            .observe(total.saturating_sub(upstream).as_secs_f64());
    }

    /// [`RouteMetrics::response`] of the answer `resp`.
    pub fn answered<B>(&self, resp: &http::Response<B>, total: Duration, upstream: Duration) {
        self.response(resp.status().as_u16(), resp.headers(), total, upstream);
    }

    pub fn local_reply(&self, reason: &'static str) {
        self.metrics
            .local_reply(self.direction, &self.service, reason);
    }

    pub fn try_sent(&self) {
        self.tries.inc();
    }

    pub fn retry(&self, condition: &'static str) {
        self.metrics
            .retries
            .get_or_create(&RetryLabels {
                service: self.service.clone(),
                route: self.route.clone(),
                condition,
            })
            .inc();
    }

    pub fn retry_skipped(&self, reason: &'static str) {
        self.metrics
            .skipped
            .get_or_create(&SkipLabels {
                service: self.service.clone(),
                route: self.route.clone(),
                reason,
            })
            .inc();
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

#[cfg(test)]
mod names_tests {
    use hopwise_api::names::metric;

    /// The names the dashboard and the demos read back (`hopwise_api::names::metric`) are
    /// families this proxy really exposes.
    #[test]
    fn every_shared_metric_name_is_a_family_here() {
        // Families appear in the text once they have a sample: one of each.
        let m = super::Metrics::new();
        let r = m.route(super::Direction::Outbound, "b", "default");
        r.request();
        r.try_sent();
        r.retry("5xx");
        r.retry_skipped("budget");
        r.local_reply("no-endpoint");
        r.response(
            200,
            &http::HeaderMap::new(),
            std::time::Duration::from_millis(1),
            std::time::Duration::ZERO,
        );
        m.limit_tripped("b", "max_requests");
        m.ejection("b");
        let text = m.encode();
        for name in [
            metric::REQUESTS,
            metric::RESPONSES,
            metric::TRIES,
            metric::RETRIES,
            metric::RETRIES_SKIPPED,
            metric::LIMITS_TRIPPED,
            metric::EJECTIONS,
            metric::LOCAL_REPLIES,
            metric::REQUEST_DURATION_BUCKET,
        ] {
            let (family, kind) = match (name.strip_suffix("_total"), name.strip_suffix("_bucket")) {
                (Some(f), _) => (f, "counter"),
                (None, Some(f)) => (f, "histogram"),
                (None, None) => (name, "gauge"),
            };
            assert!(
                text.contains(&format!("# TYPE {family} {kind}\n")),
                "{name}: no {kind} family {family} in\n{text}"
            );
        }
    }
}
