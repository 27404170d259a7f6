//! The set arithmetic under [`super::diff`] and [`super::apply`], free of any wire type: sets
//! of text (addresses) diffed and applied, and ordered lists of named items (upstreams) diffed
//! and applied with their order.
//!
//! An endpoint list is sorted and holds each element once; applying is strict — removing what
//! is absent or adding what is present is an error — because either means the two sides no
//! longer agree on the base, and the only safe answer then is a whole snapshot.

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
    #[error("delta labels `{0}`, which it does not add")]
    LabelsNotAdded(String),
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
