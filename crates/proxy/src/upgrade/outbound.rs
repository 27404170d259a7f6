//! An app's protocol switch or CONNECT to an upstream, read top to bottom: the upstream (by
//! listener or `Host`) → its `upgrade` block accepts the ask (else 405 for CONNECT, 501 for a
//! protocol) → between proxies with certificates (else 501) → `limits.max_connections` (else
//! 503, never queued) → hop-by-hop headers stripped and the ask put back, the path canonical,
//! the app's claim to an identity removed → a copy ([`crate::balance`]: p2c, ejection) on a
//! fresh HTTP/1.1 mutual-TLS connection within the connect timeout, the next copy only after a
//! connect failure → the request sent once, its answer within the route timeout → the callee
//! said yes: its answer to the app and the two connections spliced on their own task (holding
//! the connection's place and the copy's); said no: its answer to the app as it is.

use std::sync::Arc;

use hopwise_model::{GrpcCode, Policy, TcpPolicy};
use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tower_service::Service;

use super::side::Side;
use super::{Counted, Switch, carry, send};
use crate::balance::connect::Failures;
use crate::balance::{Endpoints, InFlight};
use crate::body::Body;
use crate::cluster::ClusterState;
use crate::error::{ProxyError, local};
use crate::headers::{PEER, host_of, normalize_path, rewrite_h1, strip_hop_by_hop};
use crate::metrics::{Direction, Metrics};
use crate::upstream::{self, Connector, Stream};

/// Serves `req`, which asks for `switch`, from `service`'s app to `state`'s upstream.
pub async fn serve(
    state: Option<&ClusterState>,
    switch: Switch,
    mut req: Request<Incoming>,
    metrics: &Arc<Metrics>,
    service: &str,
) -> Response<Body> {
    // A refusal is an HTTP answer, counted with the HTTP path's local replies.
    let refuse = |err: ProxyError| {
        metrics.local_reply(Direction::Outbound, service, err.reason());
        local(err, false, GrpcCode::Unavailable)
    };
    let Some(state) = state else {
        return refuse(ProxyError::NoRoute(
            host_of(&req).unwrap_or_default().to_owned(),
        ));
    };
    let cluster = &state.cluster;
    let name = cluster.service.as_str();
    let Some(upgrade) = (cluster.upgrade.as_ref()).filter(|u| u.accepts(switch.asked())) else {
        return refuse(switch.refusal());
    };
    let Some(connector) = &state.upgrades else {
        return refuse(ProxyError::UpgradeUnsupported(super::NO_TLS));
    };
    let Some(slot) = state.shared.connections.try_take() else {
        metrics.limit_tripped(name, "max_connections");
        return refuse(ProxyError::Overflow("max_connections"));
    };
    let app_side = hyper::upgrade::on(&mut req);
    let req = match ready(&switch, req) {
        Ok(r) => r,
        Err(e) => return refuse(e),
    };
    let preset;
    let policy: &Policy = match cluster.routes.first() {
        Some(r) => &r.policy,
        None => {
            preset = hopwise_model::Preset::Hopwise.policy();
            &preset
        }
    };
    let tcp = upgrade.policy(policy);
    let (in_flight, io) = match connect(&state.shared.endpoints, connector, &tcp, name).await {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let within = policy.timeout.map(|t| t.get());
    let mut resp = match send(io, req, within, ProxyError::RouteTimeout).await {
        Ok(r) => r,
        Err(e) => return refuse(e),
    };
    let switched = switch.switched(resp.status());
    let callee_side = switched.then(|| hyper::upgrade::on(&mut resp));
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let Some(callee_side) = callee_side else {
        // The callee's proxy or app said no: that answer is the app's.
        return Response::from_parts(parts, Body::Upstream(body));
    };
    switch.restore(&mut parts.headers);
    let counted = Counted {
        metrics: metrics.clone(),
        direction: Direction::Outbound,
        service: name.to_owned(),
        idle: tcp.idle_timeout,
    };
    tokio::spawn(async move {
        match callee_side.await {
            Ok(callee) => {
                carry(app_side, Side::of(callee), counted, (slot, in_flight)).await;
            }
            Err(e) => tracing::debug!("upgrade to {}: no connection: {e}", counted.service),
        }
    });
    Response::from_parts(parts, Body::local(bytes::Bytes::new()))
}

/// The request made ready for the callee's proxy: hop-by-hop headers gone before the ask is put
/// back (nothing the app sends can name ours), the path canonical, no identity claimed, in
/// HTTP/1.1 (CONNECT keeps its authority-form target).
fn ready(switch: &Switch, mut req: Request<Incoming>) -> Result<Request<Incoming>, ProxyError> {
    strip_hop_by_hop(req.headers_mut());
    req.headers_mut().remove(PEER);
    switch.restore(req.headers_mut());
    if *switch == Switch::Connect {
        *req.version_mut() = Version::HTTP_11;
        return Ok(req);
    }
    normalize_path(&mut req).map_err(ProxyError::BadPath)?;
    Ok(rewrite_h1(req, None))
}

/// A connection to a copy of the upstream: chosen as HTTP tries choose, each within the connect
/// timeout, the next copy only after a connect failure (nothing was sent), each result recorded
/// for ejection.
async fn connect(
    endpoints: &Endpoints,
    connector: &Connector,
    policy: &TcpPolicy,
    service: &str,
) -> Result<(InFlight, TokioIo<Stream>), ProxyError> {
    // Every error here is a connect failure: nothing of the request was sent yet.
    let failures = Failures {
        timed_out: || ProxyError::ConnectTimeout,
        connect_failure: |_| true,
    };
    let none = ProxyError::NoEndpoint(service.to_owned());
    let on = endpoints
        .connect_each(policy, ("upgrade", service), failures, none, |copy| {
            let mut connector = connector.clone();
            async move {
                let uri: Uri = format!("http://{}", copy.addr)
                    .parse()
                    .map_err(|_| ProxyError::NoEndpoint(copy.addr.to_string()))?;
                connector
                    .call(uri)
                    .await
                    .map_err(|e| upstream::classify_connect(&e))
            }
        })
        .await?;
    Ok((on.in_flight, on.conn))
}
