//! `Subscribe` streams: each woken by the changes that concern its service, sending a snapshot
//! only when its content changed (whole first, then deltas to a proxy that asked for them), ended
//! when the token changes, the service leaves, the server stops or the replica is fenced; and
//! `Ack`, what a proxy says of each snapshot. A woken stream's work is a pointer compare when
//! its snapshot did not change, and otherwise a clone of the message its service's [`feed`]
//! computed once for all its streams: no stream builds, compares or diffs a snapshot itself.
//!
//! [`feed`]: super::feed

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::refusal::{admin_of, api_status, caller, fenced_status};
use super::{ControlService, Shared, wire};
use crate::pb;
use crate::plane::Snapshot;
use crate::review::LEASE_FRESHNESS;

/// The messages of a `Subscribe` stream.
pub(super) type SubscribeStream = ReceiverStream<Result<pb::Snapshot, Status>>;

/// Marks a subscriber's stream closed when its task ends, however it ends.
pub(super) struct StreamGuard {
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

pub(super) async fn subscribe(
    svc: &ControlService,
    request: Request<pb::SubscribeRequest>,
) -> Result<Response<SubscribeStream>, Status> {
    svc.shared.serving()?;
    let from = caller(&request);
    let r = request.into_inner();
    // Read before anything logs it (`admin_of` names the proxy in a warning).
    crate::plane::request::proxy_name(&r.proxy).map_err(|e| api_status(&e))?;
    let admin = admin_of(&r.admin_addr, from, &r.proxy)?;
    svc.shared.vouch(&r.token, Some(LEASE_FRESHNESS)).await?;
    let service = {
        let mut plane = svc.shared.plane();
        let service = plane
            .authorize(&r.token, &r.service)
            .map_err(|e| api_status(&e))?;
        // Refuse at once a service that has no snapshot (external, or not in the file).
        plane
            .shared_snapshot(&service, Instant::now())
            .map_err(|e| api_status(&e))?;
        plane
            .subscriber_joined(&service, &r.proxy, admin)
            .map_err(|e| api_status(&e))?;
        service
    };
    tracing::info!(service = %service, proxy = %r.proxy, "subscriber joined");
    let deltas = r.deltas;
    let token = r.token;
    let guard = StreamGuard {
        shared: svc.shared.clone(),
        service,
        proxy: r.proxy,
    };
    let (tx, rx) = mpsc::channel(4);
    let mut changes = svc.shared.watch(&guard.service);
    let mut shutdown = svc.shared.shutdown.clone();
    let mut fence = svc.shared.fence.subscribe();
    tokio::spawn(async move {
        let guard = guard;
        let mut last: Option<Arc<Snapshot>> = None;
        // The configuration stamp the token was last authorized under.
        let mut authorized: Option<u64> = None;
        loop {
            changes.borrow_and_update();
            // About to authorize again (the configuration moved): a vouched token is asked
            // about again if its review is older than the lease calls' freshness.
            if authorized != Some(guard.shared.plane().config_stamp())
                && let Err(status) = guard.shared.vouch(&token, Some(LEASE_FRESHNESS)).await
            {
                let _ = tx.send(Err(status)).await;
                return;
            }
            let snapshot = {
                let mut plane = guard.shared.plane();
                // A token rotated or revoked since: the stream ends (the proxy must subscribe
                // again with the new one). Tokens change only with the configuration stamp.
                let stamp = plane.config_stamp();
                let checked = match authorized {
                    Some(at) if at == stamp => Ok(()),
                    _ => plane.authorize(&token, &guard.service).map(|_| {
                        authorized = Some(stamp);
                    }),
                };
                checked.and_then(|()| plane.shared_snapshot(&guard.service, Instant::now()))
            };
            match snapshot {
                Err(e) => {
                    // The service left the mesh file, or its token changed: the stream
                    // ends with the reason.
                    let _ = tx.send(Err(api_status(&e))).await;
                    return;
                }
                // The same snapshot as the last one sent: nothing in it changed.
                Ok(s) if last.as_ref().is_some_and(|l| Arc::ptr_eq(l, &s)) => {}
                Ok(s) => {
                    // The first snapshot on a stream is whole; after it, a proxy that applies
                    // deltas gets only what changed since the last one sent. Each is computed
                    // once for all the service's streams.
                    let message = guard.shared.feed(&guard.service, |feed| {
                        feed.message(last.as_ref(), &s, deltas)
                    });
                    if tx.send(Ok(pb::Snapshot::clone(&message))).await.is_err() {
                        return;
                    }
                    guard
                        .shared
                        .plane()
                        .record_sent(&guard.service, &guard.proxy, s.version);
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

pub(super) async fn ack(
    svc: &ControlService,
    request: Request<pb::AckRequest>,
) -> Result<Response<pb::AckResponse>, Status> {
    let r = wire::ack(request.into_inner()).map_err(|e| api_status(&e))?;
    svc.shared
        .plane()
        .ack_request(&r, SystemTime::now())
        .map_err(|e| api_status(&e))?;
    if !r.accepted {
        tracing::warn!(service = %r.service, proxy = %r.proxy, version = r.version, "a proxy rejected a snapshot: {}", r.reason);
    }
    Ok(Response::new(pb::AckResponse {}))
}
