//! The watch on one kind of route (HTTPRoute or GRPCRoute) in every namespace: each one with
//! a Service parent read ([`super::read`]) and handed to the control plane, and what it made of
//! it written to the route's `status.parents` — once per generation and outcome, so the
//! status write (which the watch sees again) is not repeated. A break is retried with kube's
//! back-off; the relist after it tells the control plane of routes deleted meanwhile.

use std::collections::{BTreeMap, BTreeSet};

use hopwise_model::kubernetes::KubeRoute;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio_stream::StreamExt;

use super::{GROUP, Outcome, read, service_parents, status};

type Key = (String, String);

/// Watches routes of `kind` (`HTTPRoute`, `GRPCRoute`); `sink(namespace, name, route)` tells
/// the control plane (`None`: gone, or no longer a Service's) and answers what it made of it.
pub async fn watch(
    client: Client,
    kind: &str,
    mut sink: impl FnMut(&str, &str, Option<KubeRoute>) -> Option<Outcome>,
) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1", kind));
    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    tokio::pin!(stream);
    let mut known: BTreeSet<Key> = BTreeSet::new();
    let mut relisted: Option<BTreeSet<Key>> = None;
    let mut written: BTreeMap<Key, (i64, Outcome)> = BTreeMap::new();
    let mut broken = false;
    while let Some(event) = stream.next().await {
        let object = match event {
            Ok(Event::Apply(o)) => o,
            Ok(Event::InitApply(o)) => {
                if let (Some(list), Some(key)) = (relisted.as_mut(), key_of(&o)) {
                    list.insert(key);
                }
                o
            }
            Ok(Event::Delete(o)) => {
                if let Some(key) = key_of(&o) {
                    known.remove(&key);
                    written.remove(&key);
                    sink(&key.0, &key.1, None);
                }
                continue;
            }
            Ok(Event::Init) => {
                relisted = Some(BTreeSet::new());
                continue;
            }
            Ok(Event::InitDone) => {
                // Routes deleted while the watch was away.
                for key in known.difference(&relisted.take().unwrap_or_default()) {
                    written.remove(key);
                    sink(&key.0, &key.1, None);
                }
                broken = false;
                continue;
            }
            Err(e) => {
                if !std::mem::replace(&mut broken, true) {
                    tracing::warn!(
                        "{kind}s: the watch broke ({e}); serving what was last read and retrying"
                    );
                }
                continue;
            }
        };
        let Some(key) = key_of(&object) else { continue };
        let Ok(value) = serde_json::to_value(&object) else {
            continue;
        };
        if service_parents(&value).is_empty() {
            // Not a mesh route (a Gateway's), or no longer one.
            if known.remove(&key) {
                sink(&key.0, &key.1, None);
            }
            continue;
        }
        known.insert(key.clone());
        let outcome = match read(&value) {
            Ok(route) => sink(&key.0, &key.1, Some(route)).unwrap_or(Outcome::Accepted),
            Err(why) => {
                sink(&key.0, &key.1, None);
                Outcome::Unresolved(why)
            }
        };
        let generation = object.metadata.generation.unwrap_or(0);
        if written.get(&key) == Some(&(generation, outcome.clone())) {
            continue;
        }
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &key.0, &resource);
        let body = status(&value, &outcome);
        match api
            .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                written.insert(key, (generation, outcome));
            }
            Err(e) => {
                tracing::warn!(route = %key.1, namespace = %key.0, "{kind} status not written: {e}")
            }
        }
    }
}

fn key_of(o: &DynamicObject) -> Option<Key> {
    Some((o.metadata.namespace.clone()?, o.metadata.name.clone()?))
}
