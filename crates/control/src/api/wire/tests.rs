//! A delta computed on shared parts is the delta `plane::delta::diff` computes on the whole
//! snapshots, and applies to give the next one.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::plane::Fixed;

fn fixed(mesh: String, bundle: String, callers: Vec<String>) -> Fixed {
    Fixed::of_a(&mesh, &bundle, callers)
}

prop_compose! {
    fn arb_fixed()(
        mesh in "[ab]{0,2}",
        bundle in "[ab]{0,1}",
        callers in proptest::collection::vec("[xy]", 0..2),
    ) -> Fixed {
        fixed(mesh, bundle, callers)
    }
}

fn arb_upstreams() -> impl Strategy<Value = Vec<Upstream>> {
    proptest::sample::subsequence(vec!["b", "c", "d"], 0..4)
        .prop_shuffle()
        .prop_flat_map(|names| {
            let n = names.len();
            (
                Just(names),
                proptest::collection::vec(
                    proptest::collection::btree_set("10\\.0\\.0\\.[1-4]:1", 0..4),
                    n,
                ),
            )
        })
        .prop_map(|(names, sets)| {
            names
                .into_iter()
                .zip(sets)
                .map(|(name, eps)| Upstream {
                    service: name.into(),
                    identity: format!("spiffe://t/service/{name}"),
                    endpoints: eps.into_iter().collect(),
                    labels: Default::default(),
                })
                .collect()
        })
}

/// `next`'s parts, sharing with `prev` the `Arc` of each part whose content is the same (as
/// the plane's cache does).
fn sharing(prev: &Snapshot, version: u64, fixed: Fixed, upstreams: Vec<Upstream>) -> Snapshot {
    let fixed = if *prev.fixed == fixed {
        prev.fixed.clone()
    } else {
        Arc::new(fixed)
    };
    let upstreams = upstreams
        .into_iter()
        .map(|u| match prev.upstreams.iter().find(|p| ***p == u) {
            Some(p) => p.clone(),
            None => Arc::new(u),
        })
        .collect();
    Snapshot {
        version,
        fixed,
        upstreams,
    }
}

proptest! {
    #[test]
    fn a_delta_on_shared_parts_is_the_diff_of_the_whole_snapshots(
        f1 in arb_fixed(), u1 in arb_upstreams(),
        f2 in arb_fixed(), u2 in arb_upstreams(),
        share in proptest::bool::ANY,
    ) {
        let prev = Snapshot {
            version: 5,
            fixed: Arc::new(f1),
            upstreams: u1.into_iter().map(Arc::new).collect(),
        };
        let next = if share {
            sharing(&prev, 9, f2, u2)
        } else {
            Snapshot { version: 9, fixed: Arc::new(f2), upstreams: u2.into_iter().map(Arc::new).collect() }
        };
        let (whole_prev, whole_next) = (snapshot(&prev), snapshot(&next));
        let d = delta(&prev, &next);
        prop_assert_eq!(&d, &plane::delta::diff(&whole_prev, &whole_next));
        prop_assert_eq!(plane::delta::apply(&whole_prev, d).unwrap(), whole_next);
    }
}

#[test]
fn a_delta_between_the_same_parts_carries_only_the_version() {
    let f = Arc::new(fixed("m".into(), "PEM".into(), vec!["x".into()]));
    let u = Arc::new(Upstream {
        service: "b".into(),
        identity: "spiffe://t/service/b".into(),
        endpoints: vec!["10.0.0.1:1".into()],
        labels: Default::default(),
    });
    let prev = Snapshot {
        version: 5,
        fixed: f.clone(),
        upstreams: vec![u.clone()],
    };
    let next = Snapshot {
        version: 6,
        ..prev.clone()
    };
    let d = delta(&prev, &next);
    assert_eq!((d.version, d.base_version), (6, 5));
    assert!(d.mesh_yaml.is_none() && d.upstreams.is_empty() && !d.allowed_callers_changed);
    // A whole snapshot on no base.
    let d = delta(&Snapshot { version: 0, ..prev }, &next);
    assert_eq!(d.base_version, 0);
    assert_eq!(d.mesh_yaml.as_deref(), Some("m"));
}
