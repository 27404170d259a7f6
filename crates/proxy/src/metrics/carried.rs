//! What the app carries, as its proxy sees it (issue 31): the calls the app makes while it
//! serves requests, by whether they carry trace context on (`services.<name>.carries` declares
//! `trace-context`; the dashboard sets the two side by side), and the app's failed answers its
//! proxy marked "retries exhausted", by which link found the call that failed (`trace`, or
//! `time`: [`crate::link`]). Resolved once per proxy into [`LinkCounters`]: atomics on the
//! request path. `service` is the proxy's own (the app's), from the mesh file.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    service: String,
    /// `carried` or `absent`.
    trace_context: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MarkLabels {
    service: String,
    /// `trace` or `time`.
    link: &'static str,
}

/// The families, registered with the proxy's others.
#[derive(Clone, Default)]
pub struct CarriedMetrics {
    calls: Family<CallLabels, Counter>,
    marked: Family<MarkLabels, Counter>,
}

impl std::fmt::Debug for CarriedMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CarriedMetrics")
    }
}

/// One proxy's handles (detached, counting nowhere, by default: for tests of the link alone).
#[derive(Debug, Clone, Default)]
pub struct LinkCounters {
    pub carried: Counter,
    pub absent: Counter,
    pub marked_by_trace: Counter,
    pub marked_by_time: Counter,
}

impl CarriedMetrics {
    pub(super) fn register(registry: &mut Registry) -> CarriedMetrics {
        let m = CarriedMetrics::default();
        registry.register(
            "app_calls",
            "Calls the app made while serving requests, by whether they carried trace context on",
            m.calls.clone(),
        );
        registry.register(
            "app_failures_marked",
            "The app's failed answers marked retries-exhausted, by the link that found the failed call",
            m.marked.clone(),
        );
        m
    }

    /// The handles for the proxy of `service`.
    pub fn counters(&self, service: &str) -> LinkCounters {
        let call = |trace_context| {
            self.calls.get_or_create_owned(&CallLabels {
                service: service.to_owned(),
                trace_context,
            })
        };
        let marked = |link| {
            self.marked.get_or_create_owned(&MarkLabels {
                service: service.to_owned(),
                link,
            })
        };
        LinkCounters {
            carried: call("carried"),
            absent: call("absent"),
            marked_by_trace: marked("trace"),
            marked_by_time: marked("time"),
        }
    }
}
