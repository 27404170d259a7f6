//! Endpoints' labels in a delta (`Upstream.labelled`): an endpoint is its address and its
//! labels, so a delta carries the labels of the endpoints it adds, and an endpoint whose labels
//! changed is removed and added again — what a change costs is what changed.

use std::collections::{BTreeMap, BTreeSet};

use super::DeltaError;
use crate::pb;

/// The addresses both `before` and `now` hold whose labels differ (sorted).
pub(super) fn relabelled(before: &pb::Upstream, now: &pb::Upstream) -> Vec<String> {
    let (b, n) = (by_endpoint(before), by_endpoint(now));
    let held: BTreeSet<&str> = before.endpoints.iter().map(String::as_str).collect();
    now.endpoints
        .iter()
        .filter(|e| held.contains(e.as_str()) && b.get(e.as_str()) != n.get(e.as_str()))
        .cloned()
        .collect()
}

/// `now`'s labels of the endpoints in `added` (sorted by endpoint, as `now`'s are).
pub(super) fn of_added(now: &pb::Upstream, added: &[String]) -> Vec<pb::LabelledEndpoint> {
    let added: BTreeSet<&str> = added.iter().map(String::as_str).collect();
    now.labelled
        .iter()
        .filter(|l| added.contains(l.endpoint.as_str()))
        .cloned()
        .collect()
}

/// The labels held after change `c`: those of removed endpoints go, those `c` adds come (each
/// must be of an endpoint it adds: anything else means the two sides disagree). Sorted by
/// endpoint.
pub(super) fn apply(
    held: Vec<pb::LabelledEndpoint>,
    c: &pb::Upstream,
) -> Result<Vec<pb::LabelledEndpoint>, DeltaError> {
    let removed: BTreeSet<&str> = c.removed_endpoints.iter().map(String::as_str).collect();
    let added: BTreeSet<&str> = c.endpoints.iter().map(String::as_str).collect();
    let mut out: BTreeMap<String, pb::LabelledEndpoint> = held
        .into_iter()
        .filter(|l| !removed.contains(l.endpoint.as_str()))
        .map(|l| (l.endpoint.clone(), l))
        .collect();
    for l in &c.labelled {
        if !added.contains(l.endpoint.as_str()) {
            return Err(DeltaError::LabelsNotAdded(l.endpoint.clone()));
        }
        out.insert(l.endpoint.clone(), l.clone());
    }
    Ok(out.into_values().collect())
}

fn by_endpoint(u: &pb::Upstream) -> BTreeMap<&str, &BTreeMap<String, String>> {
    u.labelled
        .iter()
        .filter(|l| !l.labels.is_empty())
        .map(|l| (l.endpoint.as_str(), &l.labels))
        .collect()
}
