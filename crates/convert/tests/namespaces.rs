//! Two namespaces with a service of the same name (`examples/import/two-namespaces/`): objects
//! of the same name do not collide, a short host and its DNS name are one service, and the
//! mesh file names each `reviews_bookinfo`, `reviews_staging` — from a calls file that names
//! the namespace, or from a metrics export whose labels say it; a call that leaves it out is
//! refused at its line.

#![allow(clippy::unwrap_used)]

mod common;

use common::{example, imported, sources};
use hopwise_model::{Call, Mesh};

fn call<'m>(mesh: &'m Mesh, label: &str) -> &'m Call {
    mesh.calls()
        .find(|c| c.label() == label)
        .unwrap_or_else(|| {
            let all: Vec<String> = mesh.calls().map(Call::label).collect();
            panic!("no call {label} in {all:?}")
        })
}

#[test]
fn each_namespace_keeps_its_own_reviews() {
    let cfg = example("two-namespaces");
    let imp = imported(&cfg, &example("two-namespaces/calls.txt"), None, false);
    let services: Vec<&str> = imp.mesh.services.keys().map(String::as_str).collect();
    assert_eq!(
        services,
        ["productpage", "reviews_bookinfo", "reviews_staging"]
    );
    // bookinfo's: the VirtualService's short host and the DestinationRule's DNS name meet.
    let b = call(&imp.mesh, "productpage → reviews_bookinfo");
    assert_eq!((b.policy.retry.count, b.policy.limits.max_pending), (3, 10));
    // staging's: its own objects of the same names.
    let s = call(&imp.mesh, "productpage → reviews_staging");
    assert_eq!((s.policy.retry.count, s.policy.limits.max_pending), (0, 1));
}

#[test]
fn a_metrics_export_says_the_namespaces() {
    let cfg = example("two-namespaces");
    let imp = imported(&cfg, &example("two-namespaces/requests.txt"), None, false);
    let b = call(&imp.mesh, "productpage_bookinfo → reviews_bookinfo");
    assert_eq!(b.policy.retry.count, 3);
    let s = call(&imp.mesh, "productpage_staging → reviews_staging");
    assert_eq!(s.policy.retry.count, 0);
    // The series from outside (`source_workload="unknown"`) marks bookinfo's productpage.
    assert!(imp.mesh.services["productpage_bookinfo"].entry.is_some());
    assert_eq!(imp.calls.calls[0].at.object, "istio_requests_total");
    assert_eq!(imp.calls.calls[0].at.pos.line, 2);
}

#[test]
fn a_call_that_leaves_the_namespace_out_is_refused_at_its_line() {
    let cfg = example("two-namespaces");
    let calls = [(
        "c.txt".to_owned(),
        "# first\nproductpage -> reviews\n".to_owned(),
    )];
    let opts = hopwise_convert::Options {
        name: "x".into(),
        flavor: None,
        fixed_backoff: false,
    };
    let err = hopwise_convert::import(&sources(&cfg), &sources(&calls), &opts)
        .unwrap_err()
        .render();
    assert_eq!(
        err,
        "c.txt:2:1: `reviews` is a service in namespaces bookinfo, staging: write which one (`reviews.bookinfo`)"
    );
}
