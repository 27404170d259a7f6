//! Incremental snapshots (proto `Snapshot.base_version`): the control plane diffs what it last
//! sent on a stream against what it would send now ([`diff`]), and a proxy applies that diff to
//! what it last received ([`apply`]). Both sides call these two functions on the one set of
//! generated types, so "what changed" means the same on both. Pure: no I/O, no clock.
//!
//! `apply(prev, diff(prev, next)) == next` for whole snapshots whose optional strings are
//! present and whose endpoint lists are sorted as text, each once, with each labelled endpoint's
//! labels once, sorted by endpoint (as the control plane sends them). The set arithmetic
//! underneath is in [`sets`]; endpoints' labels in `labels.rs`.

mod labels;
pub mod sets;

pub use sets::DeltaError;

use crate::pb;

/// What `next` changes from `prev` (both whole, `prev` the last sent on the stream), as a delta
/// on `prev.version`. A copy joining or leaving costs one address.
pub fn diff(prev: &pb::Snapshot, next: &pb::Snapshot) -> pb::Snapshot {
    // A delta on version 0 would read as whole (`base_version` 0) and lose what it left out:
    // no base, no delta.
    if prev.version == 0 {
        return next.clone();
    }
    let prev_names: Vec<&str> = prev.upstreams.iter().map(|u| u.service.as_str()).collect();
    let next_names: Vec<&str> = next.upstreams.iter().map(|u| u.service.as_str()).collect();
    let (removed_upstreams, order) = sets::order_diff(&prev_names, &next_names);
    let upstreams = next
        .upstreams
        .iter()
        .filter_map(|u| upstream_diff(prev.upstreams.iter().find(|p| p.service == u.service), u))
        .collect();
    let callers_changed = prev.allowed_callers != next.allowed_callers;
    pb::Snapshot {
        version: next.version,
        config_version: next.config_version,
        service: next.service.clone(),
        identity: next.identity.clone(),
        mesh_yaml: sets::changed(&prev.mesh_yaml, &next.mesh_yaml).flatten(),
        policy_json: sets::changed(&prev.policy_json, &next.policy_json).flatten(),
        upstreams,
        trust_bundle_pem: sets::changed(&prev.trust_bundle_pem, &next.trust_bundle_pem).flatten(),
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

/// One upstream's change from `before` (absent: new), or `None` when nothing changed. An
/// endpoint is its address and its labels: one whose labels changed is removed and added again.
fn upstream_diff(before: Option<&pb::Upstream>, u: &pb::Upstream) -> Option<pb::Upstream> {
    let none = pb::Upstream::default();
    let b = before.unwrap_or(&none);
    let (mut added, mut removed) = sets::set_diff(&b.endpoints, &u.endpoints);
    let relabelled = labels::relabelled(b, u);
    if !relabelled.is_empty() {
        added.extend(relabelled.iter().cloned());
        added.sort_unstable();
        removed.extend(relabelled);
        removed.sort_unstable();
    }
    let same =
        before.is_some_and(|p| p.identity == u.identity) && added.is_empty() && removed.is_empty();
    (!same).then(|| pb::Upstream {
        service: u.service.clone(),
        identity: u.identity.clone(),
        labelled: labels::of_added(u, &added),
        endpoints: added,
        removed_endpoints: removed,
    })
}

/// The whole snapshot delta `d` gives on `base` (the last one received on the stream, whose
/// version the caller has checked against `d.base_version`); a whole `d` is returned as it is.
pub fn apply(base: &pb::Snapshot, d: pb::Snapshot) -> Result<pb::Snapshot, DeltaError> {
    if d.base_version == 0 {
        return Ok(d);
    }
    let order = (!d.upstream_order.is_empty()).then_some(d.upstream_order.as_slice());
    let upstreams = sets::list_apply(
        base.upstreams.clone(),
        &d.removed_upstreams,
        d.upstreams,
        order,
        |u| &u.service,
        |c| &c.service,
        |old, c| {
            let held = old.unwrap_or_default();
            let endpoints = sets::set_apply(&held.endpoints, &c.endpoints, &c.removed_endpoints)?;
            Ok(pb::Upstream {
                labelled: labels::apply(held.labelled, &c)?,
                endpoints,
                removed_endpoints: Vec::new(),
                service: c.service,
                identity: c.identity,
            })
        },
    )?;
    Ok(pb::Snapshot {
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

#[cfg(test)]
mod tests;
