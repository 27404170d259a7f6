//! `RequestMirror` (docs/routes.md): a copy of a request sent to another service, its answer
//! read and dropped. Fire and forget, and never at the request's expense: the copy is its own
//! task; its body follows what the request's tries pull ([`crate::replay`]'s follower), so
//! it neither reads the caller's body nor holds it back; it is one try, no retry, within the
//! mirror's route timeout; and at most [`MAX_IN_FLIGHT`] copies are out at once per proxy —
//! past that a copy is not made, and counted (`limits_tripped{limit="mirror.max_in_flight"}`).
//! A body the request's tries did not keep whole (past [`BODY_LIMIT`], or broken) is never sent
//! in part: the copy is reset. The copy is counted under the mirror service's route, as a
//! request to it would be.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::uri::Scheme;
use http::{Request, Response};
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::attempts::{self, Via};
use crate::cluster::ClusterState;
use crate::config::Target;
use crate::error::ProxyError;
use crate::headers::{rewrite, rewrite_h1};
use crate::replay::ReplayBody;
use crate::upstream::Dest;

/// Copies out at once, every mirror of the proxy together.
pub const MAX_IN_FLIGHT: usize = 256;
/// How much of a mirrored request's body is kept for its copy (the retry bound when larger).
pub const BODY_LIMIT: usize = 64 * 1024;
/// The limit's name in `hopwise_limits_tripped_total`.
pub const LIMIT: &str = "mirror.max_in_flight";
/// A copy's time when the mirror's route sets no timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// A place among the copies in flight, given back on drop.
struct Place;

impl Place {
    fn take() -> Option<Place> {
        let before = IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        if before >= MAX_IN_FLIGHT {
            IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sends a copy of the request `head` (as edited for its backend) with `body` (a follower) to
/// `state`'s service, on a task of its own.
pub(crate) fn spawn(state: &ClusterState, head: &http::request::Parts, body: ReplayBody) {
    let service = &state.cluster.service;
    let Some(index) = state.cluster.route_index(head.uri.path()) else {
        return;
    };
    let rm = state.routes[index].clone();
    let Some(place) = Place::take() else {
        rm.metrics().limit_tripped(service, LIMIT);
        return;
    };
    let timeout = (state.cluster.routes[index].policy.timeout).map_or(DEFAULT_TIMEOUT, |t| t.get());
    let mut req = Request::new(body);
    *req.method_mut() = head.method.clone();
    *req.uri_mut() = head.uri.clone();
    *req.version_mut() = head.version;
    *req.headers_mut() = head.headers.clone();
    let copy = Copy {
        h1: state.h1.clone(),
        h2: state.h2.clone(),
        endpoint: match &state.cluster.target {
            Target::Mesh { .. } => state.shared.endpoints.pick(&[]).map(|e| e.addr),
            // A service outside the mesh is not mirrored to (docs/routes.md).
            Target::External { .. } => None,
        },
        service: service.clone(),
        h2_only: head.version == http::Version::HTTP_2
            || state.cluster.protocol == hopwise_model::Protocol::Grpc,
    };
    tokio::spawn(async move {
        let _place = place;
        rm.request();
        let start = Instant::now();
        let result = copy.send(req, timeout).await;
        let took = start.elapsed();
        match result {
            Ok(resp) => rm.answered(&resp, took, took),
            Err(e) => {
                rm.local_reply(e.reason());
                rm.response(e.status().as_u16(), &http::HeaderMap::new(), took, took);
            }
        }
    });
}

/// What a copy's task owns of the mirror's cluster.
struct Copy {
    h1: Arc<crate::upstream::H1Pool>,
    h2: crate::upstream::Pool,
    endpoint: Option<std::net::SocketAddr>,
    service: String,
    h2_only: bool,
}

impl Copy {
    /// One try within `timeout`, its answer read to the end and dropped.
    async fn send(
        self,
        req: Request<ReplayBody>,
        timeout: Duration,
    ) -> Result<Response<http_body_util::Empty<bytes::Bytes>>, ProxyError> {
        let addr = self.endpoint.ok_or(ProxyError::NoEndpoint(self.service))?;
        let (via, req) = if self.h2_only {
            let authority = addr.to_string();
            let req = rewrite(req, Scheme::HTTPS, &authority, true, false)?;
            (Via::H2(&self.h2, Scheme::HTTPS, authority), req)
        } else {
            (Via::H1(&self.h1, Dest::Addr(addr)), rewrite_h1(req, None))
        };
        let deadline = Instant::now() + timeout;
        let resp = attempts::send(&via, req, Some(timeout), ProxyError::RouteTimeout).await?;
        let (parts, body) = resp.into_parts();
        // Read to the end (so the connection can be used again), within the same time.
        match tokio::time::timeout_at(deadline, body.collect()).await {
            Ok(Ok(_)) => Ok(Response::from_parts(parts, http_body_util::Empty::new())),
            Ok(Err(_)) => Err(ProxyError::Reset),
            Err(_) => Err(ProxyError::RouteTimeout),
        }
    }
}
