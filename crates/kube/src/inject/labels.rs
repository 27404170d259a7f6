//! The labels an injected pod's copy registers with (`hopwise proxy --label`), so that a route
//! backend's `subset` (`{ service: api, subset: { version: v2 } }`, docs/routes.md) selects the
//! pods that carry them. Taken from the pod as it is created — a Deployment's template — less
//! what says nothing about the copy: per-pod and per-revision hashes the controllers add, and
//! hopwise's own. A pod whose labels are more than a copy may carry
//! ([`MAX_LABELS`](hopwise_model::labels::MAX_LABELS)) names the ones it registers with in the
//! annotation [`LABELS`](super::LABELS), else is refused, saying so: none is dropped unseen.
//! Later changes to a running pod's labels are not followed (injection sees creation only).
//! Pure.

use hopwise_model::labels::{MAX_LABELS, check_key, check_value};
use k8s_openapi::api::core::v1::Pod;

use super::LABELS;

/// Labels the controllers put on every pod or every revision: they tell the copies apart
/// rather than group them.
const NOISE: [&str; 4] = [
    "pod-template-hash",
    "controller-revision-hash",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
];

/// The pod's labels its copy registers with, in key order; or why the pod cannot be injected.
pub(super) fn of(pod: &Pod) -> Result<Vec<(String, String)>, String> {
    let all = pod.metadata.labels.iter().flatten();
    let named = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LABELS));
    let chosen: Vec<(String, String)> = match named {
        Some(list) => {
            let keys: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .collect();
            if let Some(missing) = keys.iter().find(|k| {
                pod.metadata
                    .labels
                    .as_ref()
                    .is_none_or(|l| !l.contains_key(**k))
            }) {
                return Err(format!(
                    "the annotation {LABELS} names `{missing}`, which is not one of the pod's labels"
                ));
            }
            all.filter(|(k, _)| keys.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }
        None => all
            .filter(|(k, _)| !NOISE.contains(&k.as_str()) && !k.starts_with("hopwise.dev/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    if chosen.len() > MAX_LABELS {
        return Err(format!(
            "the pod carries {} labels and a copy at most {MAX_LABELS}: name the ones its copy \
             registers with (those route subsets select) in the annotation {LABELS}, \
             comma-separated",
            chosen.len()
        ));
    }
    // The API server checked them as a pod's; checked again as a copy's, the same rules, so a
    // proxy is never started with a label the control plane would refuse.
    for (k, v) in &chosen {
        check_key(k).and_then(|()| check_value(v))?;
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests;
