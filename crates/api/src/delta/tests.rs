#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use prost::Message;

use super::*;

fn upstream(service: &str, endpoints: &[&str]) -> pb::Upstream {
    pb::Upstream {
        service: service.into(),
        identity: format!("spiffe://t/service/{service}"),
        endpoints: endpoints.iter().map(|e| (*e).to_owned()).collect(),
        ..Default::default()
    }
}

fn labelled(endpoint: &str, pairs: &[(&str, &str)]) -> pb::LabelledEndpoint {
    pb::LabelledEndpoint {
        endpoint: endpoint.into(),
        labels: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn whole(version: u64, mesh: &str, upstreams: Vec<pb::Upstream>) -> pb::Snapshot {
    pb::Snapshot {
        version,
        config_version: 1,
        service: "a".into(),
        identity: "spiffe://t/service/a".into(),
        mesh_yaml: Some(mesh.into()),
        policy_json: Some("{}".into()),
        upstreams,
        trust_bundle_pem: Some("PEM".into()),
        allowed_callers: vec!["spiffe://t/service/z".into()],
        ca_generation: 1,
        ..Default::default()
    }
}

/// 100 copies of `b`, as a whole snapshot's endpoint list (sorted as text).
fn copies(n: usize) -> Vec<String> {
    let mut out: Vec<String> = (0..n)
        .map(|i| format!("10.0.{}.{}:7001", i / 256, i % 256))
        .collect();
    out.sort();
    out
}

#[test]
fn nothing_is_a_delta_on_version_zero() {
    let prev = whole(0, "mesh", vec![upstream("b", &["10.0.0.1:1"])]);
    let next = whole(1, "mesh", vec![upstream("b", &["10.0.0.1:1"])]);
    let d = diff(&prev, &next);
    assert_eq!(
        d, next,
        "whole, with the mesh file it would otherwise leave out"
    );
    assert_eq!(apply(&prev, d).unwrap(), next);
}

#[test]
fn one_copy_joining_costs_one_address_whatever_the_number_of_copies() {
    let many = copies(100);
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let prev = whole(
        1,
        "mesh",
        vec![upstream("b", &refs), upstream("c", &["10.1.0.1:1"])],
    );
    let mut next = prev.clone();
    next.version = 2;
    next.upstreams[0].endpoints.push("10.9.9.9:7001".into());
    next.upstreams[0].endpoints.sort();
    let d = diff(&prev, &next);
    assert_eq!(d.base_version, 1);
    assert_eq!(d.version, 2);
    assert_eq!(d.mesh_yaml, None);
    assert_eq!(d.policy_json, None);
    assert_eq!(d.trust_bundle_pem, None);
    assert!(!d.allowed_callers_changed && d.allowed_callers.is_empty());
    assert_eq!(d.upstreams.len(), 1, "only the upstream that changed");
    assert_eq!(d.upstreams[0].endpoints, ["10.9.9.9:7001"]);
    assert!(d.upstreams[0].removed_endpoints.is_empty());
    // The delta is a small fraction of the whole snapshot.
    assert!(
        d.encoded_len() * 20 < next.encoded_len(),
        "{} vs {}",
        d.encoded_len(),
        next.encoded_len()
    );
    assert_eq!(apply(&prev, d).unwrap(), next);
}

#[test]
fn a_new_mesh_file_and_a_removed_upstream_travel_in_the_delta() {
    let prev = whole(
        1,
        "old",
        vec![upstream("b", &["1.1.1.1:1"]), upstream("c", &[])],
    );
    let mut next = whole(
        2,
        "new",
        vec![upstream("c", &[]), upstream("d", &["2.2.2.2:2"])],
    );
    next.allowed_callers.clear();
    let d = diff(&prev, &next);
    assert_eq!(d.mesh_yaml.as_deref(), Some("new"));
    assert_eq!(d.removed_upstreams, ["b"]);
    assert!(
        d.upstream_order.is_empty(),
        "c kept its place, d appended: no order needed"
    );
    assert_eq!(d.upstreams.len(), 1);
    assert_eq!(d.upstreams[0].service, "d");
    assert!(d.allowed_callers_changed && d.allowed_callers.is_empty());
    assert_eq!(apply(&prev, d).unwrap(), next);
}

#[test]
fn a_delta_that_removes_what_the_base_lacks_is_refused() {
    let prev = whole(1, "m", vec![upstream("b", &["1.1.1.1:1"])]);
    let next = whole(2, "m", vec![upstream("b", &[])]);
    let d = diff(&prev, &next);
    let other_base = whole(1, "m", vec![upstream("b", &["3.3.3.3:3"])]);
    assert_eq!(
        apply(&other_base, d),
        Err(DeltaError::RemovesAbsent("1.1.1.1:1".into()))
    );
}

#[test]
fn a_copy_joining_carries_its_own_labels_and_a_relabelled_one_is_removed_and_added() {
    let mut b = upstream("b", &["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]);
    b.labelled = vec![
        labelled("10.0.0.1:1", &[("version", "v1")]),
        labelled("10.0.0.2:1", &[("version", "v1")]),
    ];
    let prev = whole(1, "m", vec![b]);
    let mut next = prev.clone();
    next.version = 2;
    let u = &mut next.upstreams[0];
    u.endpoints.push("10.0.0.4:1".into());
    u.labelled[1] = labelled("10.0.0.2:1", &[("version", "v2")]);
    u.labelled
        .push(labelled("10.0.0.4:1", &[("version", "v2")]));
    let d = diff(&prev, &next);
    assert_eq!(d.upstreams.len(), 1);
    let c = &d.upstreams[0];
    assert_eq!(c.endpoints, ["10.0.0.2:1", "10.0.0.4:1"]);
    assert_eq!(c.removed_endpoints, ["10.0.0.2:1"]);
    assert_eq!(
        c.labelled,
        [
            labelled("10.0.0.2:1", &[("version", "v2")]),
            labelled("10.0.0.4:1", &[("version", "v2")]),
        ],
        "only the labels of what it adds"
    );
    assert_eq!(apply(&prev, d).unwrap(), next);

    // Labels for an endpoint the delta does not add: the sides disagree.
    let mut bad = diff(&prev, &next);
    bad.upstreams[0]
        .labelled
        .push(labelled("10.0.0.3:1", &[("version", "v3")]));
    assert_eq!(
        apply(&prev, bad),
        Err(DeltaError::LabelsNotAdded("10.0.0.3:1".into()))
    );
}

#[test]
fn a_whole_snapshot_applies_as_itself() {
    let prev = whole(1, "m", vec![]);
    let next = whole(5, "n", vec![upstream("b", &["1.1.1.1:1"])]);
    assert_eq!(apply(&prev, next.clone()).unwrap(), next);
}

fn arb_upstreams() -> impl Strategy<Value = Vec<pb::Upstream>> {
    // Up to four of five services, in any order, each with a sorted set of a few addresses.
    proptest::sample::subsequence(vec!["b", "c", "d", "e", "f"], 0..5)
        .prop_shuffle()
        .prop_flat_map(|names| {
            let n = names.len();
            (
                Just(names),
                proptest::collection::vec(
                    (
                        proptest::collection::btree_map("10\\.0\\.0\\.[1-6]:[1-3]", 0..3u8, 0..6),
                        0..2u8,
                    ),
                    n,
                ),
            )
        })
        .prop_map(|(names, sets)| {
            names
                .into_iter()
                .zip(sets)
                .map(|(name, (eps, id))| pb::Upstream {
                    service: name.into(),
                    identity: format!("spiffe://t{id}/service/{name}"),
                    // Some endpoints labelled, from few enough values that labels change.
                    labelled: eps
                        .iter()
                        .filter_map(|(e, l)| {
                            let v = ["v1", "v2"].get(usize::from(*l))?;
                            Some(labelled(e, &[("version", v)]))
                        })
                        .collect(),
                    endpoints: eps.into_keys().collect(),
                    removed_endpoints: Vec::new(),
                })
                .collect()
        })
}

prop_compose! {
    fn arb_whole()(
        version in 1..1000u64,
        config_version in 1..4u64,
        mesh in "[ab]{0,3}",
        policy in "[ab]{0,2}",
        bundle in "[ab]{0,2}",
        upstreams in arb_upstreams(),
        callers in proptest::collection::vec("[xyz]", 0..3),
        ca_generation in 0..3u64,
    ) -> pb::Snapshot {
        pb::Snapshot {
            version,
            config_version,
            service: "a".into(),
            identity: "spiffe://t/service/a".into(),
            mesh_yaml: Some(mesh),
            policy_json: Some(policy),
            upstreams,
            trust_bundle_pem: Some(bundle),
            allowed_callers: callers,
            ca_generation,
            ..Default::default()
        }
    }
}

proptest! {
    #[test]
    fn applying_the_diff_gives_the_next_snapshot(prev in arb_whole(), next in arb_whole()) {
        let d = diff(&prev, &next);
        prop_assert_eq!(d.base_version, prev.version);
        // What the wire carries is what is applied.
        let d = pb::Snapshot::decode(d.encode_to_vec().as_slice()).unwrap();
        prop_assert_eq!(apply(&prev, d).unwrap(), next);
    }

    #[test]
    fn a_delta_between_equal_contents_carries_no_content(prev in arb_whole()) {
        let next = pb::Snapshot { version: prev.version + 1, ..prev.clone() };
        let d = diff(&prev, &next);
        prop_assert!(d.mesh_yaml.is_none() && d.policy_json.is_none() && d.trust_bundle_pem.is_none());
        prop_assert!(d.upstreams.is_empty() && d.removed_upstreams.is_empty());
        prop_assert!(d.upstream_order.is_empty() && !d.allowed_callers_changed);
    }
}
