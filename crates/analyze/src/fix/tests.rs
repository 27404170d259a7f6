//! The seeds' meshes with `check`'s fixes applied: the figures fall to what the fixes promise.

use hopwise_model::Mesh;

use super::{Change, apply};
use crate::{Failure, Options, Report};

fn mesh(yaml: &str) -> Mesh {
    Mesh::from_yaml(yaml).unwrap_or_else(|d| panic!("{}", d.render("example")))
}

fn attempts(r: &Report, service: &str, failure: Failure) -> u64 {
    r.fanout
        .iter()
        .find(|row| row.service == service && row.failure == failure)
        .map_or_else(
            || panic!("no row for {service} {failure:?}"),
            |row| row.attempts,
        )
}

#[test]
fn the_grpc_chain_retries_at_one_layer() {
    let m = mesh(include_str!(
        "../../../../examples/seed/retry-chain-grpc.yaml"
    ));
    let before = crate::check(&m, &Options::default());
    assert_eq!(attempts(&before, "inventory", Failure::Unavailable), 27);
    let fixed = apply(&m, &Options::default());
    // Down: the bottom call's 3 tries. UNAVAILABLE: 1, since a gRPC call is a POST, not safe to
    // repeat once the callee may have acted (`unsafe-retry`'s fix, `only_if_safe`).
    assert_eq!(attempts(&fixed.report, "inventory", Failure::Down), 3);
    assert_eq!(
        attempts(&fixed.report, "inventory", Failure::Unavailable),
        1
    );
    // The two calls above the bottom stop retrying; the bottom keeps its 2 retries.
    let quiet: Vec<&str> = fixed
        .fixes
        .iter()
        .filter(|f| f.change == Change::RetryCount(0))
        .map(|f| f.call.as_str())
        .collect();
    assert_eq!(
        quiet,
        [
            "services.frontend.calls.checkout",
            "services.checkout.calls.pricing"
        ]
    );
    assert!(
        !fixed
            .report
            .findings
            .iter()
            .any(|f| f.code == "retry-fanout")
    );
    assert!(fixed.report.findings.len() < before.findings.len());
    // The fixed mesh is the one the report was made from.
    assert_eq!(crate::check(&fixed.mesh, &Options::default()), fixed.report);
}

#[test]
fn tries_that_overrun_their_caller_get_the_largest_per_try_that_fits() {
    let m = mesh(include_str!(
        "../../../../examples/seed/timeout-budget.yaml"
    ));
    let fixed = apply(&m, &Options::default());
    let per_try: Vec<(String, u128)> = fixed
        .fixes
        .iter()
        .filter_map(|f| match f.change {
            Change::PerTryTimeout(d) => Some((f.call.clone(), d.as_millis())),
            _ => None,
        })
        .collect();
    // The seed's fix at the top call, 650 ms; below it each call's tries are fitted in turn to
    // the window the fix above leaves (the seed's 316 ms at the bottom fitted checkout's 1 s).
    assert_eq!(
        per_try.first(),
        Some(&("services.frontend.calls.checkout".to_owned(), 650)),
        "{per_try:?}"
    );
    assert!(
        !fixed
            .report
            .findings
            .iter()
            .any(|f| f.code == "exceeds-caller" && f.path.ends_with(".per_try_timeout")),
        "{:#?}",
        fixed.report.findings
    );
}
