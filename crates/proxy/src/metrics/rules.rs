//! Requests a callee's own routes took (an HTTPRoute's), by route and rule: which rule of a
//! canary sent how much, beside the backends' own metrics. One counter per rule, its handle
//! made once per configuration ([`crate::cluster::ClusterState`]), so a routed request pays
//! an increment.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    /// The callee whose routes took it (their parent).
    service: String,
    route: String,
    /// The rule's `name`, or `rules[i]` for one without.
    rule: String,
}

/// `hopwise_route_rule_requests_total{service,route,rule}`.
#[derive(Clone, Default)]
pub struct RuleMetrics {
    requests: Family<RuleLabels, Counter>,
}

impl std::fmt::Debug for RuleMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuleMetrics")
    }
}

impl RuleMetrics {
    pub(super) fn register(registry: &mut Registry) -> RuleMetrics {
        let m = RuleMetrics::default();
        registry.register(
            "route_rule_requests",
            "Requests to a service with routes of its own, by the route and rule that took them (outbound)",
            m.requests.clone(),
        );
        m
    }

    /// The counters of `service`'s rules, in the table's order (`RouteTable::rules`).
    pub fn counters<'r>(
        &self,
        service: &str,
        rules: impl IntoIterator<Item = (&'r str, String)>,
    ) -> Vec<Counter> {
        (rules.into_iter())
            .map(|(route, rule)| {
                self.requests.get_or_create_owned(&RuleLabels {
                    service: service.to_owned(),
                    route: route.to_owned(),
                    rule,
                })
            })
            .collect()
    }
}
