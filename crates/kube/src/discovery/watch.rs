//! The watch on every namespace's EndpointSlices that feeds [`Slices`], and through it the
//! control plane. Breaks (the API server away, a watch expired) are retried with kube's
//! back-off; each retry relists, so nothing that changed meanwhile is missed.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio_stream::StreamExt;

use super::{Change, SERVICE_NAME_LABEL, Slices};

/// A client from kube's usual configuration (a pod's ServiceAccount, else `$KUBECONFIG` or
/// `~/.kube/config`).
pub async fn client() -> Result<Client, kube::Error> {
    Client::try_default().await
}

/// Watches EndpointSlices that belong to a Service and tells `sink` every change of what a
/// Service lists. Runs until the task is dropped; a break is logged and retried, the last state
/// told standing meanwhile.
pub async fn watch(client: Client, mut sink: impl FnMut(Change)) {
    let api = Api::<EndpointSlice>::all(client);
    let config = watcher::Config::default().labels(SERVICE_NAME_LABEL);
    let stream = watcher::watcher(api, config).default_backoff();
    tokio::pin!(stream);
    let mut slices = Slices::default();
    let mut broken = false;
    while let Some(event) = stream.next().await {
        let changes = match event {
            Ok(Event::Apply(s)) => slices.apply(&s),
            Ok(Event::Delete(s)) => slices.delete(&s),
            Ok(Event::Init) => {
                slices.relist();
                Vec::new()
            }
            Ok(Event::InitApply(s)) => {
                slices.listed(&s);
                Vec::new()
            }
            Ok(Event::InitDone) => {
                if std::mem::take(&mut broken) {
                    tracing::info!("EndpointSlices: the watch is back; caught up by a relist");
                }
                slices.listed_all()
            }
            Err(e) => {
                if !std::mem::replace(&mut broken, true) {
                    tracing::warn!(
                        "EndpointSlices: the watch broke ({e}); serving what was last listed \
                         and retrying"
                    );
                }
                Vec::new()
            }
        };
        for change in changes {
            tracing::debug!(service = %change.service.name, namespace = %change.service.namespace, "EndpointSlices changed");
            sink(change);
        }
    }
}
