//! The gRPC server (`proto/control.proto`) over a [`Plane`]: each call locks the plane, does its
//! work with the real clock's `now`, and — when what proxies are sent changed — publishes: it
//! wakes the `Subscribe` streams the change concerns ([`Plane::take_wake`]: the callers of a
//! service whose copies changed; everyone when the mesh file or the CA changed), through one
//! `watch` channel per subscribed service. A woken stream sends a snapshot only when its
//! content (everything but the version) differs from the last one it sent, so a proxy hears of
//! the changes that concern it and of no others; to a proxy that asked for deltas it sends only
//! what changed since that last one ([`plane::delta`]), the first snapshot being whole. A background task drops expired leases at the
//! moment they expire, so a copy that stops renewing leaves the snapshots at once.
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
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::ca::{self, IssueError};
use crate::conn::track::Tracked;
use crate::conn::{ConnInfo, Limits};
use crate::pb;
use crate::pb::control_server::{Control, ControlServer};
use crate::plane::{self, ApiError, Plane};
use crate::tls::{self, ServerTls, TlsError};
use crate::token;

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
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
mod fence;
mod replica;
pub mod wire;

/// How often HTTP/2 pings check that a subscriber is still there.
const KEEPALIVE: Duration = Duration::from_secs(10);

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
    /// Wakes the expiry task when a lease is granted (it may expire before the one it waits for).
    kick: Notify,
    shutdown: watch::Receiver<bool>,
    /// The shared store, when replicas share one.
    etcd: Option<SharedEtcd>,
    /// The control port's certificate.
    tls: Arc<ServerTls>,
    /// Why this replica serves no proxies (it lost the shared store), or `None` while it does.
    fence: watch::Sender<Option<String>>,
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
    fn publish(&self) {
        self.renew_certificate();
        let wake = self.plane().take_wake();
        let wakes = self.wakes();
        let woken = wakes.iter().filter(|(service, _)| wake.wakes(service));
        for (_, sender) in woken {
            sender.send_modify(|n| *n = n.wrapping_add(1));
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

/// Read access to the running plane, for the dashboard ([`crate::dashboard`]): it locks the
/// plane only long enough to copy what it shows.
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
    /// Runs `f` on the plane, under its lock (keep `f` short: the gRPC API waits meanwhile).
    pub fn read<R>(&self, f: impl FnOnce(&Plane) -> R) -> R {
        f(&self.shared.plane())
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
    mut plane: Plane,
    listener: tokio::net::TcpListener,
    limits: Limits,
) -> Result<Running, ServeError> {
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
        kick: Notify::new(),
        shutdown: shutdown_rx.clone(),
        etcd,
        tls: tls.clone(),
        fence: watch::channel(None).0,
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
            .add_service(Tracked(ControlServer::new(service.clone())))
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

/// Once a second: renews the control port's certificate before it expires (a CA change renews
/// it at once, in [`Shared::publish`]; here one pointer comparison under the plane's lock), and
/// drops the records of proxies gone for good ([`Plane::prune_proxies`]).
async fn renew_certificate(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        shared.renew_certificate();
        let pruned = shared
            .plane()
            .prune_proxies(Instant::now(), SystemTime::now());
        if pruned > 0 {
            tracing::info!(pruned, "dropped the records of proxies gone for good");
        }
    }
}

/// Drops each lease the moment it expires and publishes the change.
async fn expire_leases(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let next = shared.plane().next_expiry();
        let wait = async {
            match next {
                Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait => {}
            _ = shared.kick.notified() => {}
            _ = shutdown.changed() => return,
        }
        let published = {
            let mut plane = shared.plane();
            plane.expire(Instant::now()).then(|| plane.version())
        };
        if let Some(v) = published {
            tracing::info!(version = v, "a lease expired");
            shared.publish();
        }
    }
}

/// A short, stable name for each refusal, first in the status message (`wrong-identity: …`).
fn issue_status(e: &IssueError) -> Status {
    let (code, name) = match e {
        IssueError::UnknownToken => (tonic::Code::Unauthenticated, "unknown-token"),
        IssueError::UnknownService(_) => (tonic::Code::FailedPrecondition, "unknown-service"),
        IssueError::External(_) => (tonic::Code::FailedPrecondition, "external-service"),
        IssueError::Malformed(_) => (tonic::Code::InvalidArgument, "malformed-csr"),
        IssueError::BadSignature => (tonic::Code::InvalidArgument, "bad-signature"),
        IssueError::WrongIdentity { .. } => (tonic::Code::PermissionDenied, "wrong-identity"),
        IssueError::ForbiddenName { .. } => (tonic::Code::PermissionDenied, "forbidden-name"),
        IssueError::AsksForCa => (tonic::Code::PermissionDenied, "asks-for-ca"),
        IssueError::UnsupportedKey(_) => (tonic::Code::InvalidArgument, "unsupported-key"),
        IssueError::Lifetime(_) | IssueError::Sign(_) => (tonic::Code::Internal, "signing-failed"),
    };
    Status::new(code, format!("{name}: {e}"))
}

/// What a proxy is told by a replica that lost the shared store: UNAVAILABLE, so it moves on.
fn fenced_status(why: &str) -> Status {
    Status::unavailable(format!(
        "fenced: this replica lost the shared store (etcd): {why}; it serves no proxies until \
         it holds a lease again (try another replica)"
    ))
}

fn api_status(e: &ApiError) -> Status {
    let (code, name) = match e {
        ApiError::UnknownToken => (tonic::Code::Unauthenticated, "unknown-token"),
        ApiError::WrongService { .. } => (tonic::Code::PermissionDenied, "wrong-service"),
        ApiError::NotYourLease(_) => (tonic::Code::PermissionDenied, "not-your-lease"),
        ApiError::UnknownLease(_) => (tonic::Code::NotFound, "unknown-lease"),
        ApiError::UnknownService(_) => (tonic::Code::FailedPrecondition, "unknown-service"),
        ApiError::External(_) => (tonic::Code::FailedPrecondition, "external-service"),
        ApiError::BadAddress(_) => (tonic::Code::InvalidArgument, "bad-address"),
        ApiError::ForeignAdmin { .. } => (tonic::Code::InvalidArgument, "foreign-admin-address"),
        ApiError::Ttl(_) => (tonic::Code::InvalidArgument, "bad-ttl"),
        ApiError::TooManyCopies { .. } => (tonic::Code::ResourceExhausted, "too-many-copies"),
        ApiError::TooManyProxies { .. } => (tonic::Code::ResourceExhausted, "too-many-proxies"),
        ApiError::Store(_) => (tonic::Code::Internal, "store"),
        ApiError::BadStage(_) => (tonic::Code::InvalidArgument, "bad-stage"),
        ApiError::Ca(_) => (tonic::Code::Internal, "ca"),
    };
    Status::new(code, format!("{name}: {e}"))
}

/// The IP a call comes from (the control port's connection; `None` only for a call that did
/// not come through it).
fn caller<T>(request: &Request<T>) -> Option<std::net::IpAddr> {
    request
        .extensions()
        .get::<ConnInfo>()
        .map(|info| info.remote.ip())
}

/// The admin address a proxy named (`who`, for the log), if the dashboard may read it: one
/// that is not an address is refused; another host's is ignored with a warning, so the
/// dashboard never reads a host the caller chose, and the proxy still registers or subscribes.
fn admin_of(
    text: &str,
    from: Option<std::net::IpAddr>,
    who: &str,
) -> Result<Option<SocketAddr>, Status> {
    if text.is_empty() {
        return Ok(None);
    }
    match plane::admin_addr(text, from) {
        Ok(addr) => Ok(Some(addr)),
        Err(e @ ApiError::ForeignAdmin { .. }) => {
            tracing::warn!(%who, "{e}");
            Ok(None)
        }
        Err(e) => Err(api_status(&e)),
    }
}

impl ControlService {
    /// Refuses a call that does not carry the admin token (`authorization: Bearer <token>`).
    fn admin<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if token::is_admin(self.shared.plane().admin_token(), presented) {
            return Ok(());
        }
        let what = if presented.is_none() {
            "this call needs the control plane's admin token"
        } else {
            "wrong admin token"
        };
        Err(Status::unauthenticated(format!(
            "admin-token: {what} (gRPC metadata `authorization: Bearer <token>`; the command \
             line reads it from --admin-token FILE, or DIR/admin-token with --state DIR)"
        )))
    }

    /// Runs a lease operation; publishes when the endpoint sets changed.
    fn lease_op(
        &self,
        op: impl FnOnce(&mut Plane, Instant) -> Result<bool, ApiError>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let published = {
            let mut plane = self.shared.plane();
            let changed = op(&mut plane, Instant::now()).map_err(|e| api_status(&e))?;
            changed.then(|| plane.version())
        };
        if published.is_some() {
            self.shared.publish();
        }
        Ok(Response::new(pb::LeaseResponse {}))
    }
}

/// Marks a subscriber's stream closed when its task ends, however it ends.
struct StreamGuard {
    shared: Arc<Shared>,
    service: String,
    proxy: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.shared
            .plane()
            .stream_closed(&self.service, &self.proxy);
        tracing::info!(service = %self.service, proxy = %self.proxy, "subscriber left");
    }
}

/// Equal but for the version.
fn same_content(a: &pb::Snapshot, b: &pb::Snapshot) -> bool {
    pb::Snapshot {
        version: b.version,
        ..a.clone()
    } == *b
}

#[tonic::async_trait]
impl Control for ControlService {
    async fn issue(
        &self,
        request: Request<pb::IssueRequest>,
    ) -> Result<Response<pb::IssueResponse>, Status> {
        self.shared.serving()?;
        let r = request.into_inner();
        let ticket = {
            let plane = self.shared.plane();
            let ticket = plane.issue_ticket(&r.token).map_err(|e| issue_status(&e))?;
            if !r.proxy.is_empty() {
                plane
                    .admit_proxy(&ticket.service, &r.proxy)
                    .map_err(|e| api_status(&e))?;
            }
            ticket
        };
        // Parsing, verifying and signing happen outside the lock.
        let issued = ticket
            .ca
            .issue(
                &r.csr_pem,
                &ticket.identity,
                ticket.lifetime,
                SystemTime::now(),
            )
            .map_err(|e| {
                tracing::warn!(service = %ticket.service, proxy = %r.proxy, "refused a CSR: {e}");
                issue_status(&e)
            })?;
        self.shared.plane().record_issued(
            &ticket.service,
            &r.proxy,
            issued.not_after,
            ticket.generation,
        );
        tracing::info!(service = %ticket.service, proxy = %r.proxy, "issued a certificate");
        Ok(Response::new(pb::IssueResponse {
            cert_chain_pem: issued.cert_chain_pem,
            trust_bundle_pem: issued.trust_bundle_pem,
            not_after_unix: ca::unix_seconds(issued.not_after),
            identity: issued.identity,
            ca_generation: ticket.generation,
        }))
    }

    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        self.shared.serving()?;
        let from = caller(&request);
        let r = request.into_inner();
        // A bad admin address is refused before anything is registered.
        let admin = admin_of(&r.admin_addr, from, &r.inbound_addr)?;
        if let Some(etcd) = &self.shared.etcd {
            let (lease, ttl) = etcd
                .register(&self.shared, &r, admin)
                .await
                .map_err(|e| api_status(&e))?;
            tracing::info!(lease, addr = %r.inbound_addr, "registered a copy (etcd lease)");
            return Ok(Response::new(pb::RegisterResponse {
                lease_id: lease,
                ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            }));
        }
        let (lease, ttl, published) = {
            let mut plane = self.shared.plane();
            let (lease, ttl, changed) = plane
                .register(&r.token, &r.inbound_addr, r.ttl_ms, Instant::now())
                .map_err(|e| api_status(&e))?;
            if let Some(admin) = admin {
                plane.set_admin(lease, admin).map_err(|e| api_status(&e))?;
            }
            (lease, ttl, changed.then(|| plane.version()))
        };
        self.shared.kick.notify_one();
        if published.is_some() {
            self.shared.publish();
        }
        tracing::info!(lease = lease.0, addr = %r.inbound_addr, "registered a copy");
        Ok(Response::new(pb::RegisterResponse {
            lease_id: lease.0,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }))
    }

    async fn renew(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        self.shared.serving()?;
        let r = request.into_inner();
        if let Some(etcd) = &self.shared.etcd {
            etcd.renew(&self.shared, &r.token, r.lease_id)
                .await
                .map_err(|e| api_status(&e))?;
            return Ok(Response::new(pb::LeaseResponse {}));
        }
        self.lease_op(|plane, now| plane.renew(&r.token, r.lease_id, now))
    }

    async fn set_health(
        &self,
        request: Request<pb::SetHealthRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let r = request.into_inner();
        if let Some(etcd) = &self.shared.etcd {
            etcd.set_health(&self.shared, &r.token, r.lease_id, r.healthy)
                .await
                .map_err(|e| api_status(&e))?;
            return Ok(Response::new(pb::LeaseResponse {}));
        }
        self.lease_op(|plane, now| plane.set_health(&r.token, r.lease_id, r.healthy, now))
    }

    async fn deregister(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let r = request.into_inner();
        if let Some(etcd) = &self.shared.etcd {
            etcd.deregister(&self.shared, &r.token, r.lease_id)
                .await
                .map_err(|e| api_status(&e))?;
            return Ok(Response::new(pb::LeaseResponse {}));
        }
        self.lease_op(|plane, _| plane.deregister(&r.token, r.lease_id))
    }

    type SubscribeStream = ReceiverStream<Result<pb::Snapshot, Status>>;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        self.shared.serving()?;
        let from = caller(&request);
        let r = request.into_inner();
        let admin = admin_of(&r.admin_addr, from, &r.proxy)?;
        let service = {
            let mut plane = self.shared.plane();
            let service = plane
                .authorize(&r.token, &r.service)
                .map_err(|e| api_status(&e))?;
            // Refuse at once a service that has no snapshot (external, or not in the file).
            plane
                .snapshot(&service, Instant::now())
                .map_err(|e| api_status(&e))?;
            if let Some(admin) = admin {
                plane.set_proxy_admin(&service, &r.proxy, admin);
            }
            plane
                .admit_proxy(&service, &r.proxy)
                .map_err(|e| api_status(&e))?;
            plane.stream_opened(&service, &r.proxy);
            service
        };
        tracing::info!(service = %service, proxy = %r.proxy, "subscriber joined");
        let deltas = r.deltas;
        let token = r.token;
        let guard = StreamGuard {
            shared: self.shared.clone(),
            service,
            proxy: r.proxy,
        };
        let (tx, rx) = mpsc::channel(4);
        let mut changes = self.shared.watch(&guard.service);
        let mut shutdown = self.shared.shutdown.clone();
        let mut fence = self.shared.fence.subscribe();
        tokio::spawn(async move {
            let guard = guard;
            let mut last: Option<pb::Snapshot> = None;
            loop {
                changes.borrow_and_update();
                let snapshot = {
                    let plane = guard.shared.plane();
                    // A token rotated or revoked since: the stream ends (the proxy must
                    // subscribe again with the new one).
                    plane
                        .authorize(&token, &guard.service)
                        .and_then(|_| plane.snapshot(&guard.service, Instant::now()))
                        .map(wire::snapshot)
                };
                match snapshot {
                    Err(e) => {
                        // The service left the mesh file, or its token changed: the stream
                        // ends with the reason.
                        let _ = tx.send(Err(api_status(&e))).await;
                        return;
                    }
                    Ok(s) if last.as_ref().is_some_and(|l| same_content(l, &s)) => {}
                    Ok(s) => {
                        let version = s.version;
                        // The first snapshot on a stream is whole; after it, a proxy that applies
                        // deltas gets only what changed since the last one sent.
                        let message = match &last {
                            Some(l) if deltas => plane::delta::diff(l, &s),
                            _ => s.clone(),
                        };
                        if tx.send(Ok(message)).await.is_err() {
                            return;
                        }
                        guard
                            .shared
                            .plane()
                            .record_sent(&guard.service, &guard.proxy, version);
                        last = Some(s);
                    }
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    _ = tx.closed() => return,
                    _ = shutdown.wait_for(|stopped| *stopped) => return,
                    // Cut off the shared store: the proxy moves to a replica the others see.
                    fenced = fence.wait_for(Option::is_some) => match fenced { Ok(_) => break, Err(_) => return },
                }
            }
            let why = guard.shared.fence.borrow().clone().unwrap_or_default();
            let _ = tx.send(Err(fenced_status(&why))).await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let r = wire::ack(request.into_inner());
        self.shared
            .plane()
            .ack_request(&r, SystemTime::now())
            .map_err(|e| api_status(&e))?;
        if !r.accepted {
            tracing::warn!(service = %r.service, proxy = %r.proxy, version = r.version, "a proxy rejected a snapshot: {}", r.reason);
        }
        Ok(Response::new(pb::AckResponse {}))
    }

    async fn apply(
        &self,
        request: Request<pb::ApplyRequest>,
    ) -> Result<Response<pb::ApplyResponse>, Status> {
        self.admin(&request)?;
        let r = request.into_inner();
        let shared = self.shared.clone();
        // Reading and checking a large file, and the store's fsync, stay off the async threads.
        let response = tokio::task::spawn_blocking(move || {
            let prepared = plane::prepare(&r.mesh_yaml, &r.file_name);
            shared.plane().commit(prepared, SystemTime::now())
        })
        .await
        .map_err(|e| Status::internal(format!("apply failed: {e}")))?
        .map_err(|e| api_status(&e))?;
        if response.applied && !response.unchanged {
            tracing::info!(version = response.version, "{}", response.message);
            self.shared.publish();
        } else if !response.applied {
            tracing::warn!("{}", response.message);
        }
        Ok(Response::new(wire::applied(response)))
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        self.admin(&request)?;
        let status = self.shared.plane().status(Instant::now());
        Ok(Response::new(wire::status(status)))
    }

    async fn token(
        &self,
        request: Request<pb::TokenRequest>,
    ) -> Result<Response<pb::TokenResponse>, Status> {
        self.admin(&request)?;
        let r = request.into_inner();
        let shared = self.shared.clone();
        let service = r.service.clone();
        // Random bytes and the store's fsync stay off the async threads.
        let (token, file) =
            tokio::task::spawn_blocking(move || shared.plane().rotate_token(&service))
                .await
                .map_err(|e| Status::internal(format!("token failed: {e}")))?
                .map_err(|e| api_status(&e))?;
        self.shared.publish();
        let what = if r.revoke { "revoked" } else { "rotated" };
        tracing::warn!(service = %r.service, "join token {what}; the old one is refused from now on");
        let file = file.display().to_string();
        let message = if r.revoke {
            format!(
                "`{}`'s join token is revoked: refused from the next call on, and its open \
                 streams end. A new token is in {file} on the control plane's host only; its \
                 proxies need it (or `token rotate`) to connect again",
                r.service
            )
        } else {
            format!(
                "`{}`'s join token is replaced: the old one is refused from the next call on, \
                 and its open streams end. The new one is in {file} on the control plane's host",
                r.service
            )
        };
        Ok(Response::new(pb::TokenResponse {
            service: r.service,
            token: if r.revoke { String::new() } else { token },
            token_file: file,
            message,
        }))
    }

    async fn rotate_ca(
        &self,
        request: Request<pb::RotateCaRequest>,
    ) -> Result<Response<pb::RotateCaResponse>, Status> {
        self.admin(&request)?;
        let r = request.into_inner();
        let stage = plane::RotateStage::parse(&r.stage).map_err(|e| api_status(&e))?;
        let shared = self.shared.clone();
        // Generating a key and the store's fsync stay off the async threads.
        let response = tokio::task::spawn_blocking(move || {
            shared.plane().rotate_ca(stage, r.force, SystemTime::now())
        })
        .await
        .map_err(|e| Status::internal(format!("rotate-ca failed: {e}")))?
        .map_err(|e| api_status(&e))?;
        if response.done && !response.unchanged {
            tracing::info!(
                version = response.version,
                "rotate-ca {}: {}",
                stage.name(),
                response.message
            );
            self.shared.publish();
        } else if !response.done {
            tracing::warn!("rotate-ca {} refused: {}", stage.name(), response.message);
        }
        Ok(Response::new(wire::rotated(response)))
    }
}
