//! A tunnel connection from another proxy (its ALPN [`crate::tls::TUNNEL_ALPN`], after the
//! mutual-TLS handshake named the caller), read top to bottom: the HTTP/2 handshake within the
//! header-read allowance → each stream, under the h2 limits below: a CONNECT (else 405) → to an
//! opaque port of this service (else 404) → a caller the handshake identified and `allow`
//! admits (else 403: fail closed) → the inbound caps, per proxy and per caller (else 503) →
//! the app's port within [`APP_CONNECT`] (refused 502, silent 504) → 200 and splice. The
//! connection goes away once it carried no stream for the idle allowance, or on drain.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use h2::RecvStream;
use h2::server::SendResponse;
use http::{Method, Request, Response, StatusCode};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;

use crate::conn;
use crate::inbound::Caller;
use crate::inbound::limits::CallerKey;
use crate::live::Live;
use crate::metrics::{Direction, Metrics};
use crate::state::State;
use crate::tcp::client::{CONNECTION_WINDOW, STREAM_WINDOW};
use crate::tcp::splice::{self, Counts, Stream};

/// Streams one tunnel connection carries at once.
pub const MAX_STREAMS: u32 = 256;
/// How long the app may take to accept a tunnelled connection (as the HTTP path's pool).
pub const APP_CONNECT: Duration = Duration::from_secs(1);

/// Serves one tunnel connection until its peer closes it, it idles, or the proxy drains.
pub async fn serve(
    tls: TlsStream<TcpStream>,
    caller: Caller,
    state: Arc<State>,
    limits: conn::Limits,
    mut drain: watch::Receiver<bool>,
) {
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(MAX_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(16 * 1024)
        .handshake::<_, Bytes>(tls);
    let Ok(Ok(mut h2)) = tokio::time::timeout(limits.header_read, handshake).await else {
        return;
    };
    let caller = Arc::new(caller);
    let open = Arc::new(AtomicUsize::new(0));
    let mut quiet_since = Instant::now();
    loop {
        let idle_at = quiet_since + limits.idle;
        tokio::select! {
            next = poll_fn(|cx| h2.poll_accept(cx)) => match next {
                Some(Ok((req, respond))) => {
                    let (state, caller, open) = (state.clone(), caller.clone(), open.clone());
                    open.fetch_add(1, Ordering::AcqRel);
                    tokio::spawn(async move {
                        stream(&state.live(), &state.metrics, &caller, req, respond).await;
                        open.fetch_sub(1, Ordering::AcqRel);
                    });
                }
                Some(Err(e)) => {
                    tracing::debug!("tunnel connection: {e}");
                    return;
                }
                None => return,
            },
            () = tokio::time::sleep_until(idle_at) => {
                if open.load(Ordering::Acquire) == 0 {
                    h2.graceful_shutdown();
                    break;
                }
                quiet_since = Instant::now();
            }
            _ = drain.changed() => {
                h2.graceful_shutdown();
                break;
            }
        }
    }
    // Streams in flight finish (the worker bounds the drain); new ones are refused.
    while let Some(Ok((_, mut respond))) = poll_fn(|cx| h2.poll_accept(cx)).await {
        respond.send_reset(h2::Reason::REFUSED_STREAM);
    }
}

/// One CONNECT stream: refused with a status, or spliced to the app.
async fn stream(
    live: &Live,
    metrics: &Metrics,
    caller: &Caller,
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) {
    let config = &live.config;
    let service = config.service.as_str();
    let refuse = |respond: &mut SendResponse<Bytes>, status: StatusCode, reason| {
        metrics.tcp.refused(Direction::Inbound, service, reason);
        let _ = respond.send_response(answer(status), true);
    };
    if req.method() != Method::CONNECT {
        return refuse(&mut respond, StatusCode::METHOD_NOT_ALLOWED, "not-connect");
    }
    let id = match caller {
        Caller::Verified(p) if config.authorizes_tcp(&p.id) => p.id.clone(),
        Caller::Verified(_) => return refuse(&mut respond, StatusCode::FORBIDDEN, "forbidden"),
        _ => return refuse(&mut respond, StatusCode::FORBIDDEN, "no-identity"),
    };
    let asked = req.uri().authority().and_then(|a| a.port_u16());
    let target = match (&config.tcp, config.app, asked) {
        // A whole-TCP service whose `ports` list targets: the one the caller's proxy mapped
        // the dialed port to, if listed; 0 (an explicit listener names none): its app's.
        (Some(tcp), Some(app), Some(port)) if tcp.whole() && !config.ports.is_empty() => match port
        {
            0 => Some(app),
            p => (config.ports.accepts(p, app.port())).then(|| SocketAddr::new(app.ip(), p)),
        },
        (Some(tcp), Some(app), Some(port)) => tcp
            .target_port(port, app.port())
            .map(|p| SocketAddr::new(app.ip(), p)),
        _ => None,
    };
    let Some(target) = target else {
        return refuse(&mut respond, StatusCode::NOT_FOUND, "not-opaque");
    };
    let Ok(_admitted) = live.inbound.admit(Some(CallerKey::of(&id))) else {
        metrics.limit_tripped(service, "inbound.max_requests");
        return refuse(&mut respond, StatusCode::SERVICE_UNAVAILABLE, "overflow");
    };
    let mut app = match tokio::time::timeout(APP_CONNECT, TcpStream::connect(target)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(_)) => return refuse(&mut respond, StatusCode::BAD_GATEWAY, "app-refused"),
        Err(_) => return refuse(&mut respond, StatusCode::GATEWAY_TIMEOUT, "app-timeout"),
    };
    let _ = app.set_nodelay(true);
    let Ok(send) = respond.send_response(answer(StatusCode::OK), false) else {
        return;
    };
    let handles = metrics.tcp.opened(Direction::Inbound, service);
    let start = Instant::now();
    let tunnel = Stream {
        send,
        recv: req.into_body(),
    };
    let counts = Counts {
        from_tcp: &handles.to_caller,
        to_tcp: &handles.to_callee,
    };
    let idle = config.tcp.as_ref().and_then(|t| t.idle_timeout);
    splice::splice(&mut app, tunnel, Bytes::new(), idle, counts).await;
    handles.closed(start.elapsed());
}

fn answer(status: StatusCode) -> Response<()> {
    let mut r = Response::new(());
    *r.status_mut() = status;
    r
}
