//! `hopwise convert`'s second file: the converted mesh with `check`'s fixes applied, written as a
//! hopwise mesh file, read back and checked — the seed's 27 at inventory falls to 3 when it is
//! down (1 when it answers UNAVAILABLE), and fewer findings are left.

#![allow(clippy::unwrap_used)]

mod common;

use common::{attempts, example_imported, run};
use hopwise_analyze::fix::Change;
use hopwise_analyze::{Failure, Options};
use hopwise_model::Mesh;

#[test]
fn the_fixed_file_read_back_counts_fewer() {
    let imp = example_imported("istio-retry-chain", "calls.txt", false);
    let before = hopwise_convert::check(&imp, &Options::default());
    assert_eq!(attempts(&before, "inventory", Failure::Down), 27);
    let fixed = hopwise_convert::fixed::write(&imp, &Options::default()).unwrap();
    // Read back from its text alone, as `hopwise check mesh.fixed.yaml` reads it.
    let mesh = Mesh::from_yaml(&fixed.text).unwrap();
    let after = hopwise_analyze::check(&mesh, &Options::default());
    // Down: the bottom call's 3 tries. UNAVAILABLE: 1, since a gRPC call is a POST and Istio's
    // list retried it where the callee may have acted (`unsafe-retry`, fixed by `only_if_safe`).
    for (failure, figure) in [(Failure::Down, 3), (Failure::Unavailable, 1)] {
        let row = after
            .fanout
            .iter()
            .find(|r| r.service == "inventory" && r.failure == failure)
            .unwrap();
        assert_eq!(row.attempts, figure, "{failure:?}");
    }
    assert_eq!(after, fixed.report, "the text says what the fixes made");
    assert!(
        after.findings.len() < before.report.findings.len(),
        "{} → {}",
        before.report.findings.len(),
        after.findings.len()
    );
    assert!(!after.has_errors(), "{:#?}", after.findings);
    // Retries at one layer (which calls: `analyze`'s `fix/tests.rs`), said in the header.
    assert!(
        fixed
            .text
            .contains("# The same mesh with `hopwise check`'s"),
        "{}",
        fixed.text
    );
    for call in ["frontend.calls.checkout", "checkout.calls.pricing"] {
        let line = format!("#   services.{call}: retries.count 0 (retry-fanout)");
        assert!(fixed.text.contains(&line), "{}", fixed.text);
    }
}

#[test]
fn the_timeout_tables_fixes_make_every_try_fit() {
    let c = run("istio-timeouts", "calls.txt", true);
    assert!(c.report.findings.iter().any(|f| f.code == "exceeds-caller"));
    let imp = example_imported("istio-timeouts", "calls.txt", true);
    let fixed = hopwise_convert::fixed::write(&imp, &Options::default()).unwrap();
    let mesh = Mesh::from_yaml(&fixed.text).unwrap();
    let after = hopwise_analyze::check(&mesh, &Options::default());
    assert!(
        !after
            .findings
            .iter()
            .any(|f| f.code == "exceeds-caller" && f.path.ends_with("per_try_timeout")),
        "{}",
        fixed.text
    );
    let first = fixed
        .fixes
        .iter()
        .find_map(|f| match f.change {
            Change::PerTryTimeout(d) => Some((f.call.as_str(), d.as_millis())),
            _ => None,
        })
        .unwrap();
    // The seed's fix for the top call.
    assert_eq!(first, ("services.frontend.calls.checkout", 650));
}

#[test]
fn every_examples_fixed_file_reads_back_with_no_error_left() {
    for dir in [
        "bookinfo",
        "gateway",
        "istio-retry-chain",
        "istio-timeouts",
        "linkerd-books",
        "linkerd-chain",
        "two-namespaces",
    ] {
        let imp = example_imported(dir, "calls.txt", false);
        let before = hopwise_convert::check(&imp, &Options::default()).report;
        let fixed = hopwise_convert::fixed::write(&imp, &Options::default()).unwrap();
        let after =
            hopwise_analyze::check(&Mesh::from_yaml(&fixed.text).unwrap(), &Options::default());
        assert!(!after.has_errors(), "{dir}: {:#?}", after.findings);
        assert!(after.findings.len() < before.findings.len(), "{dir}");
        let worst = |r: &hopwise_analyze::Report| r.fanout.iter().map(|r| r.attempts).max();
        assert!(worst(&after) <= worst(&before), "{dir}");
    }
    // Linkerd's budget-bounded retries (100 on the retryable route) fixed to hopwise's 2.
    let imp = example_imported("linkerd-books", "calls.txt", false);
    let fixed = hopwise_convert::fixed::write(&imp, &Options::default()).unwrap();
    assert_eq!(attempts_in(&fixed.report, "authors", Failure::Http503), 8);
}

fn attempts_in(r: &hopwise_analyze::Report, service: &str, failure: Failure) -> u64 {
    r.fanout
        .iter()
        .find(|row| row.service == service && row.failure == failure)
        .map_or(0, |row| row.attempts)
}
