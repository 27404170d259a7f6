//! Serving a plane: the tonic server on the TLS listener with the connection limits, the
//! background tasks it starts, the handle the dashboard reads through, and a graceful stop.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::etcd::{self, SharedEtcd};
use super::expiry::{expire_leases, renew_certificate};
use super::{ControlService, ServeError, Shared, direct, replica, wire};
use crate::conn::Limits;
use crate::conn::track::Tracked;
use crate::pb;
use crate::plane::Plane;
use crate::review::{Reviews, TokenReviewer};
use crate::tls::{self, ServerTls};

/// How often HTTP/2 pings check that a subscriber is still there.
const KEEPALIVE: Duration = Duration::from_secs(10);

/// A server running in the background.
#[derive(Debug)]
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    expiry: JoinHandle<()>,
    renewal: JoinHandle<()>,
    service: ControlService,
}

/// The running plane for what runs beside the API: the dashboard ([`crate::dashboard`]) reads
/// it, locking it only long enough to copy what it shows; discovery feeds it.
#[derive(Clone)]
pub struct PlaneHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PlaneHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaneHandle").finish_non_exhaustive()
    }
}

impl PlaneHandle {
    pub(super) fn of(shared: Arc<Shared>) -> PlaneHandle {
        PlaneHandle { shared }
    }

    /// Runs `f` on the plane, under its lock (keep `f` short: the gRPC API waits meanwhile).
    pub fn read<R>(&self, f: impl FnOnce(&Plane) -> R) -> R {
        f(&self.shared.plane())
    }

    /// Discovery's input ([`Plane::set_discovered`]): what Kubernetes lists for Service `name`
    /// in `namespace`. Wakes the streams it concerns, as a copy's change does.
    pub fn set_discovered(
        &self,
        namespace: &str,
        name: &str,
        endpoints: Option<hopwise_model::kubernetes::Endpoints>,
    ) {
        let changed = self
            .shared
            .plane()
            .set_discovered(namespace, name, endpoints);
        if changed {
            self.shared.publish();
        }
    }

    /// Services' input ([`Plane::set_front`]): Service `name`'s ClusterIP and ports (`None`:
    /// gone). Every stream is woken when the mesh file served changed.
    pub fn set_front(
        &self,
        namespace: &str,
        name: &str,
        front: Option<hopwise_model::kubernetes::Front>,
    ) {
        let changed = self.shared.plane().set_front(namespace, name, front);
        if changed {
            self.shared.publish();
        }
    }

    /// Routes' input ([`Plane::set_kube_route`]): an HTTPRoute or GRPCRoute whose parent is a
    /// Service (`None`: deleted). Every stream is woken when the mesh file served changed.
    /// Returns what was made of the route, for its status.
    pub fn set_kube_route(
        &self,
        namespace: &str,
        name: &str,
        route: Option<hopwise_model::kubernetes::KubeRoute>,
    ) -> Option<crate::plane::Verdict> {
        let (verdict, changed) = {
            let mut plane = self.shared.plane();
            let stamp = plane.config_stamp();
            let verdict = plane.set_kube_route(namespace, name, route);
            (verdict, plane.config_stamp() != stamp)
        };
        if changed {
            self.shared.publish();
        }
        verdict
    }

    /// A new mesh file, applied as `hopwise control apply` applies one (read and checked off
    /// the async threads, refused whole on an error); the streams woken when it changed.
    /// `Err` only when the state could not be saved.
    pub async fn apply(
        &self,
        text: String,
        file_name: String,
    ) -> Result<crate::plane::Applied, crate::plane::ApiError> {
        let shared = self.shared.clone();
        let applied = tokio::task::spawn_blocking(move || {
            let prepared = crate::plane::prepare(&text, &file_name);
            shared.plane().commit(prepared, SystemTime::now())
        })
        .await
        .map_err(|e| crate::plane::ApiError::Store(format!("apply failed: {e}")))??;
        if applied.applied && !applied.unchanged {
            tracing::info!(version = applied.version, "{}", applied.message);
            self.shared.publish();
        } else if !applied.applied {
            tracing::warn!("{}", applied.message);
        }
        Ok(applied)
    }

    /// What was last made of route `namespace/name` ([`Plane::kube_route_verdict`]).
    pub fn kube_route_verdict(&self, namespace: &str, name: &str) -> Option<crate::plane::Verdict> {
        self.shared.plane().kube_route_verdict(namespace, name)
    }

    /// Changes each time some route's verdict changed: after a route's own change, or a new
    /// mesh file's (`hopwise control apply`, another replica's).
    pub fn kube_verdicts_changed(&self) -> watch::Receiver<u64> {
        self.shared.plane().kube_verdicts_changed()
    }
}

impl Running {
    /// A handle for reading the plane while it serves.
    pub fn handle(&self) -> PlaneHandle {
        PlaneHandle {
            shared: self.service.shared.clone(),
        }
    }

    /// The same answer as the `Status` call.
    pub fn status(&self) -> pb::StatusResponse {
        wire::status(self.service.shared.plane().status(Instant::now()))
    }

    /// Ends every stream, stops accepting, and waits for the server to finish.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        self.shutdown.send_replace(true);
        let result = self.server.await;
        // With a shared store, this task revokes the replica's lease as it ends (bounded
        // inside), so its records leave at once; the bound here is only a safety net.
        let mut expiry = self.expiry;
        if tokio::time::timeout(Duration::from_secs(3), &mut expiry)
            .await
            .is_err()
        {
            expiry.abort();
        }
        self.renewal.abort();
        result??;
        Ok(())
    }
}

/// Serves `plane` on `listener` over TLS in the background (needs a Tokio runtime), with the
/// default [`Limits`].
pub fn spawn(plane: Plane, listener: tokio::net::TcpListener) -> Result<Running, ServeError> {
    spawn_with(plane, listener, Limits::default())
}

/// [`spawn`] with the given limits on the control port's connections.
pub fn spawn_with(
    plane: Plane,
    listener: tokio::net::TcpListener,
    limits: Limits,
) -> Result<Running, ServeError> {
    spawn_with_options(
        plane,
        listener,
        Options {
            limits,
            reviewer: None,
        },
    )
}

/// How a plane is served beyond its state.
#[derive(Default)]
pub struct Options {
    /// Bounds on the control port's connections.
    pub limits: Limits,
    /// Who vouches for tokens that are not join tokens ([`crate::review`]: Kubernetes).
    pub reviewer: Option<Arc<dyn TokenReviewer>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("limits", &self.limits)
            .field("reviewer", &self.reviewer.is_some())
            .finish()
    }
}

/// [`spawn`] with [`Options`].
pub fn spawn_with_options(
    mut plane: Plane,
    listener: tokio::net::TcpListener,
    options: Options,
) -> Result<Running, ServeError> {
    let Options { limits, reviewer } = options;
    let addr = listener.local_addr().map_err(ServeError::Addr)?;
    // Its name where `Status` says which replica a proxy is connected to.
    plane.set_replica(&replica::name(addr, replica::hostname().as_deref()));
    let tls = ServerTls::new(
        plane.ca().clone(),
        plane.mesh().control_identity(),
        plane.cert_lifetime(),
        SystemTime::now(),
    )?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let etcd = plane.store().etcd().map(SharedEtcd::new);
    let shared = Arc::new(Shared {
        plane: Mutex::new(plane),
        wakes: Mutex::new(BTreeMap::new()),
        feeds: Mutex::new(BTreeMap::new()),
        pace: Mutex::new(Default::default()),
        kick: Notify::new(),
        shutdown: shutdown_rx.clone(),
        etcd,
        tls: tls.clone(),
        fence: watch::channel(None).0,
        reviews: reviewer.map(Reviews::new),
    });
    let service = ControlService {
        shared: shared.clone(),
    };
    // Leases expire here (embedded), or in etcd, which the watch follows (shared).
    let expiry = if shared.etcd.is_some() {
        tokio::spawn(etcd::follow(shared.clone(), shutdown_rx.clone()))
    } else {
        tokio::spawn(expire_leases(shared.clone(), shutdown_rx.clone()))
    };
    let renewal = tokio::spawn(renew_certificate(shared.clone()));
    let mut stop = shutdown_rx;
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE))
            .http2_keepalive_timeout(Some(KEEPALIVE))
            .max_concurrent_streams(limits.streams_per_connection)
            .http2_max_local_error_reset_streams(Some(limits.local_error_resets))
            .http2_max_pending_accept_reset_streams(Some(limits.pending_accept_resets))
            .timeout(limits.request_timeout)
            .add_service(Tracked(direct::Direct::new(service.clone())))
            .serve_with_incoming_shutdown(tls::incoming(listener, tls, limits), async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            }),
    );
    Ok(Running {
        addr,
        shutdown: shutdown_tx,
        server,
        expiry,
        renewal,
        service,
    })
}
