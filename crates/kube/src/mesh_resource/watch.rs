//! The watch on `Mesh` [`NAME`]: each new generation's mesh file handed to the control plane,
//! what it made of it written to the status — once per generation, so the status write (which
//! the watch sees again) is not taken for a change. A deleted `Mesh` leaves the file in force.
//! A break is retried with kube's back-off; the relist after it hands over the generation it
//! finds, which the control plane takes as unchanged when it is.

use std::future::Future;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio_stream::StreamExt;

use super::{GROUP, KIND, NAME, Outcome, VERSION, mesh_text, status};

fn api(client: Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, VERSION, KIND));
    Api::all_with(client, &resource)
}

/// `Mesh` [`NAME`] as the API server holds it now: `None` when there is none, or no such kind
/// (the CRD not installed).
pub async fn get(client: Client) -> Result<Option<serde_json::Value>, kube::Error> {
    match api(client).get_opt(NAME).await {
        Ok(found) => Ok(found.and_then(|o| serde_json::to_value(o).ok())),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes what was made of `generation` of `Mesh` [`NAME`] to its status.
pub async fn write_status(
    client: Client,
    generation: i64,
    outcome: &Outcome,
) -> Result<(), kube::Error> {
    write(&api(client), generation, outcome).await
}

async fn write(
    api: &Api<DynamicObject>,
    generation: i64,
    outcome: &Outcome,
) -> Result<(), kube::Error> {
    let body = status(generation, outcome);
    api.patch_status(NAME, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
}

/// Watches `Mesh` [`NAME`], handing each new generation's text to `apply` and writing its
/// outcome to the status.
pub async fn watch<F, Fut>(client: Client, mut apply: F)
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Outcome>,
{
    let api = api(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    let stream = watcher::watcher(api.clone(), config).default_backoff();
    tokio::pin!(stream);
    // The generation last applied and whether its status was written.
    let mut done: Option<(i64, bool)> = None;
    let mut broken = false;
    while let Some(event) = stream.next().await {
        let object = match event {
            Ok(Event::Apply(o) | Event::InitApply(o)) => o,
            Ok(Event::Delete(_)) => {
                tracing::warn!("Mesh `{NAME}` deleted: the mesh file in force stays");
                done = None;
                continue;
            }
            Ok(Event::Init) => continue,
            Ok(Event::InitDone) => {
                broken = false;
                continue;
            }
            Err(e) => {
                if !std::mem::replace(&mut broken, true) {
                    tracing::warn!(
                        "Mesh: the watch broke ({e}); serving what was last read and retrying"
                    );
                }
                continue;
            }
        };
        let Ok(value) = serde_json::to_value(&object) else {
            continue;
        };
        let generation = object.metadata.generation.unwrap_or(0);
        if done == Some((generation, true)) {
            continue;
        }
        let outcome = match mesh_text(&value) {
            Ok((text, _)) => apply(text).await,
            Err(why) => Outcome::refused("Invalid", why),
        };
        let written = match write(&api, generation, &outcome).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("Mesh `{NAME}`: status not written: {e}");
                false
            }
        };
        done = Some((generation, written));
    }
}
