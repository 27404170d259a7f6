//! Protocol switches (`Upgrade: websocket`) and `CONNECT` on the HTTP path (docs/tcp.md): which
//! requests ask for one ([`Switch::of`], the one cheap check both lifecycles make per request),
//! and the headers that carry the ask across a hop ([`Switch::restore`]). [`outbound`]: the
//! caller's proxy sends the request to a copy over a fresh HTTP/1.1 mutual-TLS connection and
//! splices the app's connection to it once the callee said yes; [`inbound`]: the callee's proxy,
//! the caller checked as for any request, carries it to its app. [`splice`]: both ways, half-close
//! carried, the idle timeout, opaque TCP's byte counts. Only services whose `upgrade` block
//! accepts the ask are reached; anything else is refused with one status (405 for CONNECT, 501
//! for a protocol). An upgraded connection is never retried: its request was sent.

pub mod inbound;
pub mod outbound;
pub mod side;
pub mod splice;

use std::sync::Arc;
use std::time::Duration;

use hopwise_model::upgrade::Asked;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, Version};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::error::ProxyError;
use crate::metrics::{Direction, Metrics};
use splice::{Counts, End};

/// Why a proxy without certificates refuses every switch.
pub const NO_TLS: &str =
    "a proxy without certificates carries none: upgrades go over mutual TLS only";

/// What a request asks to switch to, owned so the request can be changed and sent on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switch {
    /// `Upgrade: <protocol>` with `Connection: upgrade` (HTTP/1.1): the first protocol offered.
    Protocol(HeaderValue),
    /// The `CONNECT` method.
    Connect,
}

impl Switch {
    /// The switch `req` asks for, if any. A request without `Upgrade` costs a method compare
    /// and one header lookup. `Upgrade: h2c` is no switch to carry (the proxies speak HTTP/2
    /// between themselves): it is stripped as a hop-by-hop header, as is an `Upgrade` that
    /// `Connection` does not name, or one over HTTP/2 (which has none).
    pub fn of<B>(req: &Request<B>) -> Option<Switch> {
        if req.method() == Method::CONNECT {
            return Some(Switch::Connect);
        }
        let offered = req.headers().get(header::UPGRADE)?;
        if req.version() != Version::HTTP_11 || !names_upgrade(req.headers()) {
            return None;
        }
        let first = offered.to_str().ok()?.split(',').next()?.trim();
        if first.is_empty() || first.split('/').next()?.eq_ignore_ascii_case("h2c") {
            return None;
        }
        HeaderValue::from_str(first).ok().map(Switch::Protocol)
    }

    /// As the mesh file's rules read it.
    pub fn asked(&self) -> Asked<'_> {
        match self {
            Switch::Connect => Asked::Connect,
            Switch::Protocol(p) => Asked::Protocol(p.to_str().unwrap_or("")),
        }
    }

    /// Puts the ask back after the hop-by-hop headers went (`Connection: upgrade` and the one
    /// protocol), on a request to the next hop or a `101` to the previous one.
    pub fn restore(&self, headers: &mut HeaderMap) {
        if let Switch::Protocol(p) = self {
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            headers.insert(header::UPGRADE, p.clone());
        }
    }

    /// The answer to an ask the service's `upgrade` block does not accept (or it has none):
    /// CONNECT 405 as before there was a block, a protocol 501.
    pub fn refusal(&self) -> ProxyError {
        match self {
            Switch::Connect => ProxyError::ConnectMethod,
            Switch::Protocol(_) => ProxyError::UpgradeUnsupported(
                "the service's mesh file entry does not list the protocol in `upgrade.protocols`",
            ),
        }
    }

    /// Whether `status` is the next hop saying yes: `101` to a protocol, any 2xx to CONNECT.
    pub fn switched(&self, status: http::StatusCode) -> bool {
        match self {
            Switch::Protocol(_) => status == http::StatusCode::SWITCHING_PROTOCOLS,
            Switch::Connect => status.is_success(),
        }
    }
}

/// Sends `req` on a fresh HTTP/1.1 connection over `io` that may switch protocols, its answer's
/// head awaited `within` (none: as long as the next hop takes). An error is a failure before
/// any answer: the request may have been sent, so it is never sent again.
pub(crate) async fn send<I>(
    io: I,
    req: Request<Incoming>,
    within: Option<Duration>,
    late: ProxyError,
) -> Result<Response<Incoming>, ProxyError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(io)
        .await
        .map_err(|_| ProxyError::Protocol)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!("upgrade connection: {e}");
        }
    });
    let answer = sender.send_request(req);
    let answer = match within {
        Some(t) => tokio::time::timeout(t, answer).await.map_err(|_| late)?,
        None => answer.await,
    };
    answer.map_err(|e| {
        if e.is_parse() {
            ProxyError::Protocol
        } else {
            ProxyError::Reset
        }
    })
}

/// Who an upgraded connection is counted for: opaque TCP's families, by direction and service.
#[derive(Debug)]
pub(crate) struct Counted {
    pub metrics: Arc<Metrics>,
    pub direction: Direction,
    pub service: String,
    pub idle: Option<Duration>,
}

/// A side that a failure of the other's is passed on to as a TCP reset: the app's own socket
/// (CONNECT), or an upgraded connection taken back from hyper ([`side::Side`]).
pub(crate) trait Reset {
    fn reset(&self);
}

impl Reset for tokio::net::TcpStream {
    fn reset(&self) {
        crate::tcp::splice::reset(self);
    }
}

/// Carries one upgraded connection: `caller` (the side the request came from, upgraded once
/// its answer is written) spliced to `callee` until both ways end, counted open, by bytes each
/// way and by duration; `held` (caps, the copy's place) is given back when it ends.
pub(crate) async fn carry<B, H>(caller: OnUpgrade, mut callee: B, counted: Counted, held: H) -> End
where
    B: AsyncRead + AsyncWrite + Unpin + Reset,
{
    let Counted {
        metrics,
        direction,
        service,
        idle,
    } = counted;
    let mut caller = match caller.await {
        Ok(c) => side::Side::of(c),
        Err(e) => {
            tracing::debug!("upgrade to {service}: the caller's side did not switch: {e}");
            return End::Failed;
        }
    };
    let handles = metrics.tcp.opened(direction, &service);
    let start = Instant::now();
    let counts = Counts {
        to_callee: &handles.to_callee,
        to_caller: &handles.to_caller,
    };
    let end = splice::splice(&mut caller, &mut callee, idle, counts).await;
    if end == End::Failed {
        // Whichever side failed, the other learns it as its peer would have: a reset.
        caller.reset();
        callee.reset();
    }
    handles.closed(start.elapsed());
    drop(held);
    end
}

fn names_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, version: Version, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder()
            .method(method)
            .uri("/chat")
            .version(version);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn only_a_named_upgrade_or_connect_is_a_switch() {
        let h11 = Version::HTTP_11;
        let ws = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket, foo"),
        ];
        assert_eq!(
            Switch::of(&req("GET", h11, &ws)),
            Some(Switch::Protocol(HeaderValue::from_static("websocket")))
        );
        let plain: [(&str, &str); 0] = [];
        assert_eq!(
            Switch::of(&req("CONNECT", h11, &plain)),
            Some(Switch::Connect)
        );
        assert_eq!(Switch::of(&req("GET", h11, &plain)), None);
        let unnamed = [("upgrade", "websocket")];
        assert_eq!(
            Switch::of(&req("GET", h11, &unnamed)),
            None,
            "Connection must name it"
        );
        let h2c = [
            ("connection", "Upgrade, HTTP2-Settings"),
            ("upgrade", "h2c"),
        ];
        assert_eq!(
            Switch::of(&req("GET", h11, &h2c)),
            None,
            "curl --http2's h2c"
        );
        assert_eq!(Switch::of(&req("GET", Version::HTTP_2, &ws)), None);
        let empty = [("connection", "upgrade"), ("upgrade", " ,x")];
        assert_eq!(Switch::of(&req("GET", h11, &empty)), None);
    }

    #[test]
    fn the_ask_is_restored_after_stripping_and_read_as_the_rules_read_it() {
        let s = Switch::Protocol(HeaderValue::from_static("websocket"));
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("upgrade, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        crate::headers::strip_hop_by_hop(&mut h);
        s.restore(&mut h);
        assert_eq!(h[header::CONNECTION], "upgrade");
        assert_eq!(h[header::UPGRADE], "websocket");
        assert!(h.get("x-secret").is_none());
        assert_eq!(s.asked(), Asked::Protocol("websocket"));
        assert!(s.switched(http::StatusCode::SWITCHING_PROTOCOLS));
        assert!(!s.switched(http::StatusCode::OK));
        assert!(Switch::Connect.switched(http::StatusCode::OK));
        assert!(!Switch::Connect.switched(http::StatusCode::FORBIDDEN));
        let mut none = HeaderMap::new();
        Switch::Connect.restore(&mut none);
        assert!(none.is_empty());
    }
}
