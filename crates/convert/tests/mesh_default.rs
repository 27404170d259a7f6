//! Istio's mesh-wide default retry policy (`meshConfig.defaultHttpRetryPolicy`): read from the
//! `istio` ConfigMap (`examples/import/istio-mesh-default/`), applied to every route that says
//! nothing about retries and to hosts no VirtualService names; a route's own `retries` start
//! from Istio's built-in policy instead; `{}` switches retries off.

#![allow(clippy::unwrap_used)]

mod common;

use common::{attempts, example, has, imported};
use hopwise_analyze::{Failure, Options};
use hopwise_model::RetryOn;

fn config(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut c = example("istio-retry-chain/services.yaml");
    c.extend(example("istio-mesh-default"));
    c.extend(
        extra
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned())),
    );
    c
}

fn count(imp: &hopwise_convert::Imported, label: &str) -> u32 {
    imp.mesh
        .calls()
        .find(|c| c.label() == label)
        .unwrap_or_else(|| panic!("no call {label}"))
        .policy
        .retry
        .count
}

#[test]
fn the_config_maps_default_applies_where_a_route_says_nothing() {
    let calls = example("istio-mesh-default/calls.txt");
    let imp = imported(&config(&[]), &calls, None, false);
    // checkout's route writes no retries, inventory has no VirtualService: the mesh's 1 retry.
    assert_eq!(count(&imp, "frontend → checkout"), 1);
    assert_eq!(count(&imp, "pricing → inventory"), 1);
    // pricing's route writes `attempts: 3` without `retryOn`: Istio's built-in list, not the
    // mesh default's.
    assert_eq!(count(&imp, "checkout → pricing"), 3);
    let pricing = imp.mesh.calls().find(|c| c.to == "pricing").unwrap();
    assert!(pricing.policy.retry.on.contains(&RetryOn::RefusedStream));
    let inventory = imp.mesh.calls().find(|c| c.to == "inventory").unwrap();
    assert_eq!(
        inventory
            .policy
            .retry
            .on
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [RetryOn::ConnectFailure, RetryOn::Unavailable]
    );
    assert_eq!(inventory.policy.retry.backoff.base.get().as_millis(), 50);
    let c = hopwise_convert::check(&imp, &Options::default());
    // 2 × 4 × 2 tries, against 27 under Istio's built-in default.
    assert_eq!(attempts(&c, "inventory", Failure::Down), 16);
    assert_eq!(attempts(&c, "inventory", Failure::Unavailable), 16);
    has(
        &c.text(),
        &[
            "read     configmap/istio (mesh.yaml:4)",
            // A finding about the default's retries names the ConfigMap's line.
            "configmap/istio (mesh.yaml:13): data.mesh.defaultHttpRetryPolicy.attempts",
        ],
    );
}

#[test]
fn an_empty_default_switches_retries_off() {
    let calls = example("istio-mesh-default/calls.txt");
    let mut cfg = example("istio-retry-chain/services.yaml");
    cfg.extend(example("istio-mesh-default/routes.yaml"));
    cfg.push((
        "operator.yaml".to_owned(),
        "apiVersion: install.istio.io/v1alpha1\nkind: IstioOperator\nmetadata: { name: control-plane }\nspec:\n  meshConfig:\n    defaultHttpRetryPolicy: {}\n".to_owned(),
    ));
    let imp = imported(&cfg, &calls, None, false);
    assert_eq!(count(&imp, "frontend → checkout"), 0);
    assert_eq!(count(&imp, "pricing → inventory"), 0);
    assert_eq!(count(&imp, "checkout → pricing"), 3);
    let c = hopwise_convert::check(&imp, &Options::default());
    // Only pricing's route retries: 4 tries reach inventory.
    assert_eq!(attempts(&c, "inventory", Failure::Down), 4);
}
