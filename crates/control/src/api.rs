//! The gRPC server (`proto/control.proto`) over a [`Plane`]: each call locks the plane, does its
//! work with the real clock's `now`, and — when what proxies are sent changed — publishes: it
//! wakes the `Subscribe` streams the change concerns ([`Plane::take_wake`]: the callers of a
//! service whose copies changed; everyone when the mesh file or the CA changed), through one
//! `watch` channel per subscribed service, paced ([`pace`]: at once after a quiet spell, then
//! at most once per 50 ms while a burst lasts, the last wake carrying the final state). A woken
//! stream takes its service's snapshot from the plane's cache (built once per change per
//! service, the same `Arc` while its content is the same) and sends only when it is not the
//! one it sent last; to a proxy that asked for deltas it sends only what changed since that
//! last one, the first snapshot being whole — each message computed once per service and
//! shared by its streams ([`feed`]). So a change costs the services it concerns plus a pointer
//! compare and a small send per subscriber that calls them, not a snapshot per subscriber. A
//! background task drops expired leases at the moment they expire, so a copy that stops
//! renewing leaves the snapshots at once.
//!
//! With a shared store (`--store etcd://…`) several replicas serve the same mesh: leases are etcd
//! leases (a lease granted by one replica is renewed through any other), registrations and
//! health are keys attached to them, and one watch per replica feeds its plane every change
//! made through any replica ([`Plane::follow`]); a call that wrote to etcd answers once this
//! replica's watch has seen its write, so the caller reads what it wrote. Each replica also
//! writes what it learns of its proxies (streams, acknowledgements) on an etcd lease of its own,
//! so `Status` and CA rotation on any replica see every proxy.
//!
//! Transport: HTTP/2 over TLS 1.3 only ([`crate::tls`]: the control plane's own certificate,
//! `spiffe://<trust-domain>/control`, from its own CA, renewed while it serves), bounded by
//! [`Limits`] ([`crate::conn`]: streams per connection, resets, deadlines, connections per
//! client address, a timeout on each call). The join token
//! authenticates issuance, registration, lease calls, subscriptions and acknowledgements; the
//! admin token (`authorization: Bearer <token>`) authenticates `Apply`, `RotateCa` and `Status`
//! (see docs/control.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use tokio::sync::{Notify, watch};
use tonic::{Request, Response, Status};

use crate::pb;
use crate::pb::control_server::Control;
use crate::plane::{Plane, Wake};
use crate::tls::{ServerTls, TlsError};

// The shared store's calls and watch: with the `etcd` feature, on etcd; without it, a stand-in
// with the same signatures that cannot be constructed (no `#[cfg]` below this).
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(not(feature = "etcd"))]
#[path = "api/no_etcd.rs"]
mod etcd;

use etcd::SharedEtcd;

// Pure parts: whether a replica cut off etcd must stop serving (only the `etcd` build uses it),
// and the replica's name.
mod admin;
mod direct;
mod expiry;
mod feed;
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
mod fence;
mod leases;
mod pace;
mod refusal;
mod replica;
mod server;
mod streams;
mod vouch;
pub mod wire;
pub use server::{Options, PlaneHandle, Running, spawn, spawn_with, spawn_with_options};

use refusal::fenced_status;

/// Why the server failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot read the listening address: {0}")]
    Addr(std::io::Error),
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("the gRPC server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

struct Shared {
    plane: Mutex<Plane>,
    /// Per subscribed service, a counter of the changes that concerned it; the service's
    /// Subscribe streams watch it.
    wakes: Mutex<BTreeMap<String, watch::Sender<u64>>>,
    /// Per subscribed service, the messages for its latest snapshot, computed once.
    feeds: Mutex<BTreeMap<String, feed::Feed>>,
    /// How often each service's streams are woken (bursts joined).
    pace: Mutex<pace::Pace>,
    /// Wakes the expiry task when a lease is granted (it may expire before the one it waits for).
    kick: Notify,
    shutdown: watch::Receiver<bool>,
    /// The shared store, when replicas share one.
    etcd: Option<SharedEtcd>,
    /// The control port's certificate.
    tls: Arc<ServerTls>,
    /// Why this replica serves no proxies (it lost the shared store), or `None` while it does.
    fence: watch::Sender<Option<String>>,
    /// Who vouches for tokens that are not join tokens (Kubernetes), if anyone.
    reviews: Option<crate::review::Reviews>,
}

impl Shared {
    fn plane(&self) -> MutexGuard<'_, Plane> {
        match self.plane.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Wakes the streams that the changes made since the last call concern, and re-signs the
    /// control port's certificate if the CA changed (before the caller answers: a `retire` right
    /// after a `reissue` must find the port already on the new root). Call it after every
    /// change, without holding the plane's lock.
    fn publish(self: &Arc<Self>) {
        self.renew_certificate();
        let wake = self.plane().take_wake();
        let now = tokio::time::Instant::now();
        let wakes = self.wakes();
        let services: Vec<&String> = match &wake {
            Wake::Everyone => wakes.keys().collect(),
            Wake::Services(services) => {
                services.iter().filter(|s| wakes.contains_key(*s)).collect()
            }
        };
        let mut pace = self.pace();
        for service in services {
            match pace.change(service, now) {
                pace::Step::Wake => wake_streams(&wakes, service),
                pace::Step::Joined => {}
                pace::Step::At(at) => {
                    let shared = self.clone();
                    let service = service.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep_until(at).await;
                        shared.pace().fire(&service, tokio::time::Instant::now());
                        wake_streams(&shared.wakes(), &service);
                    });
                }
            }
        }
    }

    fn pace(&self) -> MutexGuard<'_, pace::Pace> {
        match self.pace.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Runs `f` on `service`'s feed.
    fn feed<T>(&self, service: &str, f: impl FnOnce(&mut feed::Feed) -> T) -> T {
        let mut feeds = match self.feeds.lock() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        match feeds.get_mut(service) {
            Some(feed) => f(feed),
            None => f(feeds.entry(service.to_owned()).or_default()),
        }
    }

    /// Signs the control port's certificate again when the CA changed or it is past ~70 % of
    /// its life; a failure keeps the old one (logged).
    fn renew_certificate(&self) {
        let signer = || {
            let plane = self.plane();
            (plane.ca().clone(), plane.cert_lifetime())
        };
        match self.tls.refresh(signer, SystemTime::now()) {
            Ok(true) => tracing::info!("signed a new certificate for the control port"),
            Ok(false) => {}
            Err(e) => tracing::warn!("keeping the control port's certificate: {e}"),
        }
    }

    fn wakes(&self) -> MutexGuard<'_, BTreeMap<String, watch::Sender<u64>>> {
        match self.wakes.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Refuses a proxy's call while this replica is fenced, so the proxy moves to another.
    fn serving(&self) -> Result<(), Status> {
        match &*self.fence.borrow() {
            None => Ok(()),
            Some(why) => Err(fenced_status(why)),
        }
    }

    /// A receiver that sees every change that concerns `service`'s streams from now on.
    fn watch(&self, service: &str) -> watch::Receiver<u64> {
        self.wakes()
            .entry(service.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }
}

/// Wakes `service`'s streams.
fn wake_streams(wakes: &BTreeMap<String, watch::Sender<u64>>, service: &str) {
    if let Some(sender) = wakes.get(service) {
        sender.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The `Control` service.
#[derive(Clone)]
pub struct ControlService {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ControlService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlService").finish_non_exhaustive()
    }
}

#[tonic::async_trait]
impl Control for ControlService {
    async fn issue(
        &self,
        request: Request<pb::IssueRequest>,
    ) -> Result<Response<pb::IssueResponse>, Status> {
        leases::issue(self, request).await
    }

    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        leases::register(self, request).await
    }

    async fn renew(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        leases::renew(self, request).await
    }

    async fn set_health(
        &self,
        request: Request<pb::SetHealthRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        leases::set_health(self, request).await
    }

    async fn deregister(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        leases::deregister(self, request).await
    }

    type SubscribeStream = streams::SubscribeStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        streams::subscribe(self, request).await
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        streams::ack(self, request).await
    }

    async fn apply(
        &self,
        request: Request<pb::ApplyRequest>,
    ) -> Result<Response<pb::ApplyResponse>, Status> {
        admin::apply(self, request).await
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        admin::status(self, request).await
    }

    async fn token(
        &self,
        request: Request<pb::TokenRequest>,
    ) -> Result<Response<pb::TokenResponse>, Status> {
        admin::token(self, request).await
    }

    async fn rotate_ca(
        &self,
        request: Request<pb::RotateCaRequest>,
    ) -> Result<Response<pb::RotateCaResponse>, Status> {
        admin::rotate_ca(self, request).await
    }
}
