//! The set arithmetic of incremental snapshots, free of any wire type: the control plane diffs
//! what it last sent on a stream against what it would send now, and a proxy applies that diff
//! to what it last received. Both sides build on these functions (their snapshot types are
//! generated separately from the same proto), so "what changed" means the same on both.
//!
//! Lists are of text (addresses, service names). An endpoint list is sorted and holds each
//! element once; applying is strict — removing what is absent or adding what is present is an
//! error — because either means the two sides no longer agree on the base, and the only safe
//! answer then is a whole snapshot.

use std::collections::{BTreeSet, HashSet};

/// Why a delta does not apply to what the receiver holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    #[error("delta removes `{0}`, which the base does not hold")]
    RemovesAbsent(String),
    #[error("delta adds `{0}`, which the base already holds")]
    AddsPresent(String),
    #[error("delta orders the upstreams as [{given}], but they are [{held}]")]
    Order { given: String, held: String },
}

/// The elements `next` has and `prev` lacks (added), and the reverse (removed); both sorted.
/// `prev` and `next` need not be sorted.
pub fn set_diff(prev: &[String], next: &[String]) -> (Vec<String>, Vec<String>) {
    let p: BTreeSet<&String> = prev.iter().collect();
    let n: BTreeSet<&String> = next.iter().collect();
    let added = n.difference(&p).map(|s| (*s).clone()).collect();
    let removed = p.difference(&n).map(|s| (*s).clone()).collect();
    (added, removed)
}

/// `prev` without `removed` and with `added`, sorted. Strict (see the module's note).
pub fn set_apply(
    prev: &[String],
    added: &[String],
    removed: &[String],
) -> Result<Vec<String>, DeltaError> {
    let mut out: BTreeSet<String> = prev.iter().cloned().collect();
    for r in removed {
        if !out.remove(r) {
            return Err(DeltaError::RemovesAbsent(r.clone()));
        }
    }
    for a in added {
        if !out.insert(a.clone()) {
            return Err(DeltaError::AddsPresent(a.clone()));
        }
    }
    Ok(out.into_iter().collect())
}

/// `next` when it differs from `prev`: what a delta carries for a field sent only when changed.
pub fn changed<T: PartialEq + Clone>(prev: &T, next: &T) -> Option<T> {
    (prev != next).then(|| next.clone())
}

/// How an ordered list of names went from `prev` to `next` (each name once in each): the names
/// removed, and the new order when it is not what removing them and appending the new names (in
/// `next`'s order) gives — `None` in the usual case, where nothing moved.
pub fn order_diff(prev: &[&str], next: &[&str]) -> (Vec<String>, Option<Vec<String>>) {
    let in_next: HashSet<&str> = next.iter().copied().collect();
    let in_prev: HashSet<&str> = prev.iter().copied().collect();
    let removed: Vec<String> = prev
        .iter()
        .filter(|p| !in_next.contains(*p))
        .map(|p| (*p).to_owned())
        .collect();
    let natural = prev
        .iter()
        .copied()
        .filter(|p| in_next.contains(p))
        .chain(next.iter().copied().filter(|n| !in_prev.contains(n)));
    let order =
        (!natural.eq(next.iter().copied())).then(|| next.iter().map(|n| (*n).to_owned()).collect());
    (removed, order)
}

/// Applies a delta to a list of named items: `removed` names leave (each must be held), each
/// change is merged into the item of its name (`merge` gets `None` for a new one, which goes at
/// the end), and `order`, when given, puts the result in that order.
pub fn list_apply<T, C>(
    mut items: Vec<T>,
    removed: &[String],
    changes: impl IntoIterator<Item = C>,
    order: Option<&[String]>,
    name: impl Fn(&T) -> &str,
    change_name: impl Fn(&C) -> &str,
    mut merge: impl FnMut(Option<T>, C) -> Result<T, DeltaError>,
) -> Result<Vec<T>, DeltaError> {
    for r in removed {
        let at = items
            .iter()
            .position(|i| name(i) == r)
            .ok_or_else(|| DeltaError::RemovesAbsent(r.clone()))?;
        items.remove(at);
    }
    for c in changes {
        match items.iter().position(|i| name(i) == change_name(&c)) {
            Some(at) => {
                let old = items.remove(at);
                items.insert(at, merge(Some(old), c)?);
            }
            None => items.push(merge(None, c)?),
        }
    }
    match order {
        Some(order) => reorder(items, order, name),
        None => Ok(items),
    }
}

/// Puts `items` in `order`, a permutation of their names; an `order` that is not one is an
/// error (the two sides disagree).
pub fn reorder<T>(
    items: Vec<T>,
    order: &[String],
    name: impl Fn(&T) -> &str,
) -> Result<Vec<T>, DeltaError> {
    let held = || {
        items
            .iter()
            .map(|i| name(i).to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mismatch = |held: String| DeltaError::Order {
        given: order.join(", "),
        held,
    };
    if order.len() != items.len() {
        return Err(mismatch(held()));
    }
    let mut slots: Vec<Option<T>> = Vec::with_capacity(items.len());
    slots.resize_with(items.len(), || None);
    let held_names = held();
    for item in items {
        let at = order
            .iter()
            .position(|o| o == name(&item))
            .ok_or_else(|| mismatch(held_names.clone()))?;
        match slots.get_mut(at) {
            Some(slot @ None) => *slot = Some(item),
            _ => return Err(mismatch(held_names.clone())),
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Defines `diff` and `apply` on the generated types of `proto/control.proto` in module `$pb`
/// (`Snapshot`, `Upstream`). The control plane and the proxy each generate those types from the
/// same proto and must not depend on each other, so the one algorithm is written here, once, and
/// instantiated in each:
///
/// - `diff(prev, next)`: what `next` changes from `prev` (both whole, `prev` the last sent on the
///   stream), as a delta on `prev.version`. A copy joining or leaving costs one address.
/// - `apply(base, d)`: the whole snapshot delta `d` gives on `base` (the last one received on
///   the stream, whose version the caller has checked against `d.base_version`); a whole `d`
///   is returned as it is. `apply(prev, diff(prev, next)) == next` for whole snapshots whose
///   optional strings are present and whose endpoint lists are sorted as text, each once (as the
///   control plane sends them).
#[macro_export]
macro_rules! snapshot_delta {
    ($pb:ident) => {
        /// See `hopwise_model::snapshot_delta`.
        pub fn diff(prev: &$pb::Snapshot, next: &$pb::Snapshot) -> $pb::Snapshot {
            use $crate::delta;
            // A delta on version 0 would read as whole (`base_version` 0) and lose what it
            // left out: no base, no delta.
            if prev.version == 0 {
                return next.clone();
            }
            let prev_names: Vec<&str> = prev.upstreams.iter().map(|u| u.service.as_str()).collect();
            let next_names: Vec<&str> = next.upstreams.iter().map(|u| u.service.as_str()).collect();
            let (removed_upstreams, order) = delta::order_diff(&prev_names, &next_names);
            let upstreams = next
                .upstreams
                .iter()
                .filter_map(|u| {
                    let before = prev.upstreams.iter().find(|p| p.service == u.service);
                    let none = Vec::new();
                    let (added, removed) =
                        delta::set_diff(before.map_or(&none, |p| &p.endpoints), &u.endpoints);
                    let same = before.is_some_and(|p| p.identity == u.identity)
                        && added.is_empty()
                        && removed.is_empty();
                    (!same).then(|| $pb::Upstream {
                        service: u.service.clone(),
                        identity: u.identity.clone(),
                        endpoints: added,
                        removed_endpoints: removed,
                    })
                })
                .collect();
            let callers_changed = prev.allowed_callers != next.allowed_callers;
            $pb::Snapshot {
                version: next.version,
                config_version: next.config_version,
                service: next.service.clone(),
                identity: next.identity.clone(),
                mesh_yaml: delta::changed(&prev.mesh_yaml, &next.mesh_yaml).flatten(),
                policy_json: delta::changed(&prev.policy_json, &next.policy_json).flatten(),
                upstreams,
                trust_bundle_pem: delta::changed(&prev.trust_bundle_pem, &next.trust_bundle_pem)
                    .flatten(),
                allowed_callers: if callers_changed {
                    next.allowed_callers.clone()
                } else {
                    Vec::new()
                },
                ca_generation: next.ca_generation,
                base_version: prev.version,
                removed_upstreams,
                upstream_order: order.unwrap_or_default(),
                allowed_callers_changed: callers_changed,
            }
        }

        /// See `hopwise_model::snapshot_delta`.
        pub fn apply(
            base: &$pb::Snapshot,
            d: $pb::Snapshot,
        ) -> Result<$pb::Snapshot, $crate::delta::DeltaError> {
            use $crate::delta;
            if d.base_version == 0 {
                return Ok(d);
            }
            let order = (!d.upstream_order.is_empty()).then_some(d.upstream_order.as_slice());
            let upstreams = delta::list_apply(
                base.upstreams.clone(),
                &d.removed_upstreams,
                d.upstreams,
                order,
                |u| &u.service,
                |c| &c.service,
                |old, c| {
                    let held = old.map(|o| o.endpoints).unwrap_or_default();
                    Ok($pb::Upstream {
                        endpoints: delta::set_apply(&held, &c.endpoints, &c.removed_endpoints)?,
                        removed_endpoints: Vec::new(),
                        service: c.service,
                        identity: c.identity,
                    })
                },
            )?;
            Ok($pb::Snapshot {
                version: d.version,
                config_version: d.config_version,
                service: d.service,
                identity: d.identity,
                mesh_yaml: d.mesh_yaml.or_else(|| base.mesh_yaml.clone()),
                policy_json: d.policy_json.or_else(|| base.policy_json.clone()),
                upstreams,
                trust_bundle_pem: d.trust_bundle_pem.or_else(|| base.trust_bundle_pem.clone()),
                allowed_callers: if d.allowed_callers_changed {
                    d.allowed_callers
                } else {
                    base.allowed_callers.clone()
                },
                ca_generation: d.ca_generation,
                base_version: 0,
                removed_upstreams: Vec::new(),
                upstream_order: Vec::new(),
                allowed_callers_changed: false,
            })
        }
    };
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn one_copy_joining_or_leaving_is_one_address() {
        let prev = v(&["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]);
        let next = v(&["10.0.0.1:1", "10.0.0.3:1", "10.0.0.4:1"]);
        let (added, removed) = set_diff(&prev, &next);
        assert_eq!(added, ["10.0.0.4:1"]);
        assert_eq!(removed, ["10.0.0.2:1"]);
        assert_eq!(set_apply(&prev, &added, &removed).unwrap(), next);
    }

    #[test]
    fn applying_onto_another_base_is_refused() {
        let prev = v(&["a", "b"]);
        assert_eq!(
            set_apply(&prev, &[], &v(&["c"])),
            Err(DeltaError::RemovesAbsent("c".into()))
        );
        assert_eq!(
            set_apply(&prev, &v(&["a"]), &[]),
            Err(DeltaError::AddsPresent("a".into()))
        );
    }

    #[test]
    fn an_order_is_sent_only_when_something_moved() {
        assert_eq!(order_diff(&["a", "b"], &["a", "b", "c"]), (vec![], None));
        assert_eq!(order_diff(&["a", "b"], &["b"]), (v(&["a"]), None));
        assert_eq!(
            order_diff(&["a", "b"], &["c", "b"]),
            (v(&["a"]), Some(v(&["c", "b"])))
        );
        assert_eq!(
            order_diff(&["a", "b"], &["b", "a"]),
            (vec![], Some(v(&["b", "a"])))
        );
    }

    #[test]
    fn reorder_refuses_what_is_not_a_permutation() {
        let items = v(&["a", "b"]);
        fn by(s: &String) -> &str {
            s
        }
        assert_eq!(
            reorder(items.clone(), &v(&["b", "a"]), by).unwrap(),
            ["b", "a"]
        );
        assert!(reorder(items.clone(), &v(&["b"]), by).is_err());
        assert!(reorder(items.clone(), &v(&["b", "c"]), by).is_err());
        assert!(reorder(items, &v(&["b", "b"]), by).is_err());
    }

    proptest! {
        #[test]
        fn set_apply_of_set_diff_gives_the_next_set(
            prev in proptest::collection::btree_set("[a-e]{1,2}", 0..8),
            next in proptest::collection::btree_set("[a-e]{1,2}", 0..8),
        ) {
            let prev: Vec<String> = prev.into_iter().collect();
            let next: Vec<String> = next.into_iter().collect();
            let (added, removed) = set_diff(&prev, &next);
            prop_assert_eq!(set_apply(&prev, &added, &removed).unwrap(), next);
        }

        #[test]
        fn an_order_diff_rebuilds_the_next_order(
            prev in proptest::sample::subsequence(vec!["a", "b", "c", "d", "e"], 0..5)
                .prop_shuffle(),
            next in proptest::sample::subsequence(vec!["a", "b", "c", "d", "e"], 0..5)
                .prop_shuffle(),
        ) {
            let (removed, order) = order_diff(&prev, &next);
            let mut got: Vec<String> = prev
                .iter()
                .filter(|p| !removed.iter().any(|r| r == *p))
                .map(|p| (*p).to_owned())
                .collect();
            got.extend(next.iter().filter(|n| !prev.contains(n)).map(|n| (*n).to_owned()));
            if let Some(order) = order {
                got = reorder(got, &order, |s| s.as_str()).unwrap();
            }
            prop_assert_eq!(got, next.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>());
        }
    }
}
