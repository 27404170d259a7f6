//! A protocol switch or CONNECT arriving from another proxy, once [`crate::inbound`] identified
//! and authorised the caller, took its places under the inbound caps and set the identity
//! header: this service's `upgrade` block accepts the ask (else 405 / 501) → the app's address
//! within [`APP_CONNECT`] (else 503 / 504) → CONNECT: 200, and the caller's connection spliced
//! to the app's; a protocol: the request sent once, the app's answer within `inbound.timeout`,
//! and on its `101` the two spliced, else its answer as it is. The splice runs on its own task,
//! holding the caps' places until the connection ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hopwise_model::Upgrade;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::side::Side;
use super::{Counted, Switch, carry, send};
use crate::body::Body;
use crate::error::ProxyError;
use crate::headers::{rewrite_h1, strip_hop_by_hop};
use crate::metrics::{Direction, Metrics};

/// How long the app may take to accept the connection (as the HTTP path's pool to it).
pub const APP_CONNECT: Duration = Duration::from_secs(1);

/// This proxy's app as an upgraded connection reaches it.
#[derive(Debug, Clone, Copy)]
pub struct App<'a> {
    pub addr: SocketAddr,
    /// The service's `upgrade` block, if it has one.
    pub upgrade: Option<&'a Upgrade>,
    pub metrics: &'a Arc<Metrics>,
    pub service: &'a str,
    /// How long the app may take to answer a protocol switch (`inbound.timeout`).
    pub timeout: Option<Duration>,
}

/// Carries `req` (stripped of hop-by-hop headers, the identity header set) to `app`; `held` is
/// kept until the upgraded connection ends. An error is the answer to give, and nothing reached
/// the app but, at most, its connection.
pub async fn serve<H: Send + 'static>(
    app: App<'_>,
    switch: Switch,
    mut req: Request<Incoming>,
    held: H,
) -> Result<Response<Body>, ProxyError> {
    let Some(upgrade) = app.upgrade.filter(|u| u.accepts(switch.asked())) else {
        return Err(switch.refusal());
    };
    let caller_side = hyper::upgrade::on(&mut req);
    let tcp = match tokio::time::timeout(APP_CONNECT, TcpStream::connect(app.addr)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(_)) => return Err(ProxyError::ConnectRefused),
        Err(_) => return Err(ProxyError::AppTimeout),
    };
    let _ = tcp.set_nodelay(true);
    let counted = Counted {
        metrics: app.metrics.clone(),
        direction: Direction::Inbound,
        service: app.service.to_owned(),
        idle: upgrade.idle_timeout,
    };
    if switch == Switch::Connect {
        tokio::spawn(carry(caller_side, tcp, counted, held));
        let mut ok = Response::new(Body::local(bytes::Bytes::new()));
        *ok.status_mut() = StatusCode::OK;
        return Ok(ok);
    }
    switch.restore(req.headers_mut());
    let req = rewrite_h1(req, None);
    let mut resp = send(TokioIo::new(tcp), req, app.timeout, ProxyError::AppTimeout).await?;
    let app_side = switch
        .switched(resp.status())
        .then(|| hyper::upgrade::on(&mut resp));
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let Some(app_side) = app_side else {
        return Ok(Response::from_parts(parts, Body::Upstream(body)));
    };
    switch.restore(&mut parts.headers);
    tokio::spawn(async move {
        match app_side.await {
            Ok(upgraded) => {
                carry(caller_side, Side::of(upgraded), counted, held).await;
            }
            Err(e) => tracing::debug!("upgrade to the app: no connection: {e}"),
        }
    });
    Ok(Response::from_parts(
        parts,
        Body::local(bytes::Bytes::new()),
    ))
}
