//! Connections to upstreams, pooled and kept alive so a TLS handshake happens once per
//! connection, not per request: to other proxies over mTLS (HTTP/1.1 or HTTP/2 by ALPN), to
//! services outside the mesh (plain, or TLS we originate), and to the local app.
//!
//! [`connect`]: making one connection. [`h1`]: each worker's HTTP/1.1 pool. Here: the pooled
//! HTTP/2 (and gRPC) clients (hyper-util), where a pooled connection goes ([`Dest`]), and the
//! classification of a failure into the [`ProxyError`] that names it.

pub mod connect;
pub mod h1;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::error::ProxyError;
use crate::replay::{BodyRefused, ReplayBody};

pub use connect::{ConnectError, Connector, Stream};
pub use h1::{Failed, H1Pool};

pub type Pool = Client<Connector, ReplayBody>;

/// A pooled client: keep-alive connections per address, HTTP/1.1 or HTTP/2 only.
pub fn pool(connector: Connector, h2: bool, idle: Duration) -> Pool {
    let mut b = Client::builder(TokioExecutor::new());
    b.pool_idle_timeout(idle)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .http2_only(h2)
        // The proxy decides what to retry; the pool must not replay a request on its own.
        .retry_canceled_requests(false)
        .set_host(false);
    if h2 {
        b.http2_keep_alive_interval(Duration::from_secs(30))
            .http2_keep_alive_timeout(Duration::from_secs(10));
    }
    b.build(connector)
}

/// Maps a pooled client's error to why forwarding failed.
pub fn classify(err: &hyper_util::client::legacy::Error) -> ProxyError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(c) = e.downcast_ref::<ConnectError>() {
            return classify_connect(c);
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && let Some(p) = classify_hyper(h)
        {
            return p;
        }
        source = e.source();
    }
    if err.is_connect() {
        ProxyError::ConnectRefused
    } else {
        ProxyError::Reset
    }
}

pub(crate) fn classify_connect(c: &ConnectError) -> ProxyError {
    match c {
        ConnectError::Refused(_) => ProxyError::ConnectRefused,
        ConnectError::Timeout(_) => ProxyError::ConnectTimeout,
        ConnectError::Tls { reason, .. } => ProxyError::Tls(reason.clone()),
        ConnectError::Io { .. } | ConnectError::BadAddress(_) => ProxyError::ConnectRefused,
    }
}

fn classify_hyper(h: &hyper::Error) -> Option<ProxyError> {
    // A gateway's bounds ended the request's body (`replay::BodyCap`): the client's doing.
    if h.is_user()
        && let Some(refused) = body_refused(h)
    {
        return Some(match refused {
            BodyRefused::TooLarge(max) => ProxyError::BodyTooLarge(max),
            BodyRefused::Stalled(idle) => ProxyError::BodyTimeout(idle.as_secs()),
        });
    }
    // The pooled connection closed before our request went out: nothing was sent.
    if h.is_canceled() {
        return Some(ProxyError::ResetBeforeRequest);
    }
    if h.is_parse() || h.is_parse_status() || h.is_user() {
        return Some(ProxyError::Protocol);
    }
    None
}

/// The bound that ended the request's body, if one did.
fn body_refused(h: &hyper::Error) -> Option<BodyRefused> {
    let mut source = std::error::Error::source(h);
    while let Some(e) = source {
        if let Some(r) = e.downcast_ref::<BodyRefused>() {
            return Some(*r);
        }
        source = e.source();
    }
    None
}

/// Where a pooled HTTP/1.1 connection goes: a copy's address, or a name resolved when a
/// connection is made (a service outside the mesh).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    Addr(SocketAddr),
    Name(Arc<str>),
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dest::Addr(a) => a.fmt(f),
            Dest::Name(n) => f.write_str(n),
        }
    }
}
