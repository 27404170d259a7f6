//! The seeds' scenarios written as Istio (and Linkerd) configuration reproduce the seeds'
//! figures through the import: 27 at inventory under Istio's defaults, 729 with two code
//! retries, the timeout table's 9.20 s / 3.05 s / 1.55 s and its 650 ms / 316 ms fixes, and 1
//! under Linkerd's profiles.

#![allow(clippy::unwrap_used)]

mod common;

use common::{attempts, has, ms, run};
use hopwise_analyze::Failure;

#[test]
fn grpc_chain_under_istio_defaults_gives_27() {
    let c = run("istio-retry-chain", "calls.txt", false);
    assert_eq!(attempts(&c, "inventory", Failure::Down), 27);
    assert_eq!(attempts(&c, "inventory", Failure::Unavailable), 27);
    assert_eq!(c.import.defaults, "istio");
    assert!(
        c.import
            .skipped
            .iter()
            .any(|s| s.starts_with("deployment/pricing (routes.yaml:")),
        "{:?}",
        c.import.skipped
    );
    // A finding about a default names the object that left it out, or its absence.
    has(
        &c.text(),
        &[
            "virtualservice/pricing (routes.yaml:11): http[0]: retries.retryOn not written, so Istio's default",
            "no VirtualService for inventory: Istio's default retries.retryOn (call at calls.txt:2)",
            "virtualservice/pricing (routes.yaml:11): http[0]: Istio has no retry budget",
        ],
    );
}

#[test]
fn two_code_retries_per_call_give_729() {
    let c = run("istio-retry-chain", "calls-code-retries.txt", false);
    assert_eq!(attempts(&c, "inventory", Failure::Down), 729);
}

#[test]
fn timeout_table_and_its_fixes() {
    let c = run("istio-timeouts", "calls.txt", true);
    let calls = &c.report.timeouts.calls;
    let worst: Vec<_> = calls.iter().map(|c| c.worst_case).collect();
    assert_eq!(worst, [ms(9200), ms(3050), ms(1550)]);
    let fit: Vec<_> = calls.iter().map(|c| c.largest_fitting_per_try).collect();
    assert_eq!(fit, [ms(650), None, ms(316)]);
    let callee: Vec<_> = calls.iter().map(|c| c.callee_tries_that_fit).collect();
    assert_eq!(callee, [Some((3, 3)), Some((1, 3)), None]);
    has(
        &c.text(),
        &[
            "set per_try_timeout to 650 ms or less",
            "set per_try_timeout to 316 ms or less",
            // The fix for inventory's tries points at the field that sets them.
            "(virtualservice/inventory (virtualservices.yaml:42): http[0].retries.perTryTimeout)",
            // The top call has no timeout: where it would be written.
            "virtualservice/checkout (virtualservices.yaml:11): http[0]: timeout not written, so Istio's default",
        ],
    );
    assert!(c.report.has_errors());
}

#[test]
fn envoy_backoff_is_the_default_and_counts_more() {
    // Without the seed's fixed 25 ms: Envoy's jittered back-off (0–24, 0–49 ms upper bounds).
    let c = run("istio-timeouts", "calls.txt", false);
    assert_eq!(c.report.timeouts.calls[2].worst_case, ms(1573));
}

#[test]
fn the_chain_under_linkerd_profiles_gives_1() {
    let c = run("linkerd-chain", "calls.txt", false);
    assert_eq!(c.import.defaults, "linkerd");
    assert_eq!(attempts(&c, "inventory", Failure::Down), 1);
    assert_eq!(attempts(&c, "inventory", Failure::Http503), 1);
    // Each profile's route timeout is the call's.
    let timeouts: Vec<_> = c.report.timeouts.calls.iter().map(|t| t.timeout).collect();
    assert_eq!(timeouts, [ms(3000), ms(1000), ms(500)]);
    assert!(!c.report.findings.iter().any(|f| f.code == "retry-fanout"));
}
