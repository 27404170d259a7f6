//! The watch on one kind of route (HTTPRoute or GRPCRoute) in every namespace: each one with
//! a Service parent read ([`super::read`]) and handed to the control plane, and what it made of
//! it written to the route's `status.parents` — once per generation and outcome, so the
//! status write (which the watch sees again) is not repeated; written again when the control
//! plane's verdicts change without the route changing (a new mesh file). A break is retried
//! with kube's back-off; the relist after it tells the control plane of routes deleted
//! meanwhile.

use std::collections::{BTreeMap, BTreeSet};

use hopwise_model::kubernetes::KubeRoute;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio_stream::StreamExt;

use super::{GROUP, Outcome, read, service_parents, status};

type Key = (String, String);

/// What the control plane is asked and tells: `sink(namespace, name, route)` takes a route
/// (`None`: gone, or no longer a Service's) and answers what it made of it; `verdict(namespace,
/// name)` what it makes of it now; `changed` moves when some verdict changed.
pub struct Link<S, V> {
    pub sink: S,
    pub verdict: V,
    pub changed: tokio::sync::watch::Receiver<u64>,
}

impl<S, V> std::fmt::Debug for Link<S, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("changed", &*self.changed.borrow())
            .finish_non_exhaustive()
    }
}

/// Watches routes of `kind` (`HTTPRoute`, `GRPCRoute`), telling `plane` and writing its
/// outcomes to their status.
pub async fn watch<S, V>(client: Client, kind: &str, mut plane: Link<S, V>)
where
    S: FnMut(&str, &str, Option<KubeRoute>) -> Option<Outcome>,
    V: FnMut(&str, &str) -> Option<Outcome>,
{
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1", kind));
    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    tokio::pin!(stream);
    let mut known: BTreeSet<Key> = BTreeSet::new();
    let mut relisted: Option<BTreeSet<Key>> = None;
    let mut status = Status {
        client,
        resource,
        kind: kind.to_owned(),
        written: BTreeMap::new(),
        read: BTreeMap::new(),
    };
    let mut broken = false;
    let sink = &mut plane.sink;
    loop {
        let event = tokio::select! {
            event = stream.next() => match event {
                Some(event) => event,
                None => return,
            },
            Ok(()) = plane.changed.changed() => {
                status.again(&mut plane.verdict).await;
                continue;
            }
        };
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
                    status.forget(&key);
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
                    status.forget(key);
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
        let generation = object.metadata.generation.unwrap_or(0);
        let outcome = match read(&value) {
            Ok(route) => {
                let outcome = sink(&key.0, &key.1, Some(route)).unwrap_or(Outcome::Accepted);
                status.read.insert(key.clone(), (generation, value.clone()));
                outcome
            }
            Err(why) => {
                status.read.remove(&key);
                sink(&key.0, &key.1, None);
                Outcome::Unresolved(why)
            }
        };
        status.write(&key, generation, &value, outcome).await;
    }
}

/// The status side of a watch: what was written, and the routes the control plane judged.
struct Status {
    client: Client,
    resource: ApiResource,
    kind: String,
    written: BTreeMap<Key, (i64, Outcome)>,
    /// Routes handed to the control plane, as last seen: their generation and object.
    read: BTreeMap<Key, (i64, serde_json::Value)>,
}

impl Status {
    fn forget(&mut self, key: &Key) {
        self.written.remove(key);
        self.read.remove(key);
    }

    /// Writes `outcome` to route `key`'s status, unless it says so at this generation.
    async fn write(
        &mut self,
        key: &Key,
        generation: i64,
        value: &serde_json::Value,
        outcome: Outcome,
    ) {
        if self.written.get(key) == Some(&(generation, outcome.clone())) {
            return;
        }
        let api =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), &key.0, &self.resource);
        let body = status(value, &outcome);
        match api
            .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                self.written.insert(key.clone(), (generation, outcome));
            }
            Err(e) => {
                let kind = &self.kind;
                tracing::warn!(route = %key.1, namespace = %key.0, "{kind} status not written: {e}")
            }
        }
    }

    /// The control plane's verdicts changed: each route's status written again where what it
    /// makes of the route now differs from what the status says.
    async fn again(&mut self, verdict: &mut impl FnMut(&str, &str) -> Option<Outcome>) {
        let routes: Vec<(Key, i64, serde_json::Value)> = self
            .read
            .iter()
            .map(|(k, (g, v))| (k.clone(), *g, v.clone()))
            .collect();
        for (key, generation, value) in routes {
            if let Some(outcome) = verdict(&key.0, &key.1) {
                self.write(&key, generation, &value, outcome).await;
            }
        }
    }
}

fn key_of(o: &DynamicObject) -> Option<Key> {
    Some((o.metadata.namespace.clone()?, o.metadata.name.clone()?))
}
