//! The JSON patch (RFC 6902) that injects one pod: our two init containers put first (the
//! capture rules before anything runs, the proxy before the app's own init containers, whose
//! connections are captured too), our volumes appended, the injected mark set, and the
//! ServiceAccount `default` named when the pod names none (the token is projected from it), and
//! the app's probes replaced by the admin port's (`probes.rs`). Each list or
//! map is added whole when the pod has none, else extended, so the patch replaces nothing the
//! pod had but those probes; so is `metadata` when the pod has none. Pure.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::INJECTED;
use super::probes::Rewrite;
use super::sidecar::Additions;

/// The mark's value: the version that injected the pod.
const VERSION: &str = env!("CARGO_PKG_VERSION");

pub(super) fn patch(
    pod: &Pod,
    add: &Additions,
    probes: &[Rewrite],
) -> Result<Patch, serde_json::Error> {
    let spec = pod.spec.as_ref();
    let mut ops = Vec::new();
    // The app's probes replaced first: the indices are the pod's own, before ours go in front
    // of its init containers.
    for r in probes {
        let index = r.index.to_string();
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens(["spec", r.list, &index, r.field]),
            value: to_value(&r.probe)?,
        }));
    }
    let (init, proxy) = (to_value(&add.init)?, to_value(&add.proxy)?);
    let has_init = spec.and_then(|s| s.init_containers.as_ref());
    if has_init.is_some_and(|c| !c.is_empty()) {
        // Each at the front: the proxy, then the init container before it.
        ops.push(op(&["spec", "initContainers", "0"], proxy));
        ops.push(op(&["spec", "initContainers", "0"], init));
    } else {
        ops.push(op(&["spec", "initContainers"], json!([init, proxy])));
    }
    let volumes = add.volumes.iter().map(to_value);
    let volumes = volumes.collect::<Result<Vec<_>, _>>()?;
    if spec
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| !v.is_empty())
    {
        ops.extend(
            volumes
                .into_iter()
                .map(|v| op(&["spec", "volumes", "-"], v)),
        );
    } else {
        ops.push(op(&["spec", "volumes"], Value::Array(volumes)));
    }
    // The API server's ServiceAccount admission sets it before any webhook where it runs; a
    // projected token needs it, so a pod without one gets what that plugin would give it.
    if spec
        .and_then(|s| s.service_account_name.as_deref())
        .is_none_or(str::is_empty)
    {
        ops.push(op(&["spec", "serviceAccountName"], json!("default")));
    }
    if pod.metadata.annotations.is_some() {
        ops.push(op(&["metadata", "annotations", INJECTED], json!(VERSION)));
    } else if pod.metadata == ObjectMeta::default() {
        // Nothing under `metadata`, which a review's pod may lack altogether (it reads as the
        // default): an `add` under a member that is not there fails, so `metadata` is added
        // whole (replacing at most an empty one).
        ops.push(op(
            &["metadata"],
            json!({ "annotations": { INJECTED: VERSION } }),
        ));
    } else {
        ops.push(op(
            &["metadata", "annotations"],
            json!({ INJECTED: VERSION }),
        ));
    }
    Ok(Patch(ops))
}

fn op(path: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path.iter().copied()),
        value,
    })
}

fn to_value<T: serde::Serialize>(t: &T) -> Result<Value, serde_json::Error> {
    serde_json::to_value(t)
}
