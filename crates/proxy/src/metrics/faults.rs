//! Faults a service's inbound proxy injected (`services.<name>.fault`): requests delayed and
//! requests aborted, so a fault left on is seen in the metrics, not only in its callers' pain.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabels {
    service: String,
    /// `delay` or `abort`.
    fault: &'static str,
}

/// `hopwise_faults_injected_total{service,fault}`.
#[derive(Clone, Default)]
pub struct FaultMetrics {
    injected: Family<FaultLabels, Counter>,
}

impl std::fmt::Debug for FaultMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultMetrics")
    }
}

impl FaultMetrics {
    pub(super) fn register(registry: &mut Registry) -> FaultMetrics {
        let m = FaultMetrics::default();
        registry.register(
            "faults_injected",
            "Requests this proxy delayed or aborted by its service's fault",
            m.injected.clone(),
        );
        m
    }

    /// One request of `service` delayed (`fault` = `delay`) or aborted (`abort`).
    pub fn injected(&self, service: &str, fault: &'static str) {
        self.injected
            .get_or_create(&FaultLabels {
                service: service.to_owned(),
                fault,
            })
            .inc();
    }
}
