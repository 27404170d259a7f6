//! One worker: a thread's single-threaded runtime serving its own sockets of every listener.
//! The accept loops (a connection past its listener's cap closed at once, before any TLS or
//! HTTP), the TLS accept on the inbound port, each connection served under its timer
//! ([`crate::conn`]) with the configuration in force loaded once per request, the certificate
//! reload on worker 0, and the drain: listeners closed, requests in flight given the drain
//! timeout. [`crate::server::start`] binds the sockets and starts the workers.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::admin;
use crate::capture;
use crate::conn::{self, Guard};
use crate::gateway::Front;
use crate::http_conn::{Proto, Servers, Settings};
use crate::inbound::Caller;
use crate::listeners::ConnCap;
use crate::metrics::{Direction, Metrics};
use crate::opaque;
use crate::outbound::{Dispatch, Entry, Outbound};
use crate::state::State;
use crate::tls::{CertStore, TUNNEL_ALPN};

mod gateway;

/// Largest request head (request line and headers) accepted; beyond it: 431.
const MAX_HEAD: usize = 64 * 1024;

/// HTTP/2 keep-alive pings on served connections: every 30 s, answered within 10 s.
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Inbound,
    Outbound,
    /// A captured app's connections ([`crate::capture`]), then served as `Outbound`.
    Capture,
    /// A local port of an upstream that is opaque TCP ([`crate::opaque::outbound`]).
    Tcp,
    Admin,
    /// A gateway's plain HTTP front door ([`crate::gateway`]).
    Gateway,
    /// A gateway's TLS front door.
    GatewayTls,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Inbound => "inbound",
            Kind::Outbound => "outbound",
            Kind::Capture => "capture",
            Kind::Tcp => "tcp",
            Kind::Admin => "admin",
            Kind::Gateway => "gateway",
            Kind::GatewayTls => "gateway-tls",
        }
    }
}

/// One worker's socket of one listener.
pub(crate) struct Socket1 {
    pub kind: Kind,
    pub entry: Option<Entry>,
    pub socket: std::net::TcpListener,
    pub cap: Arc<ConnCap>,
}

pub(crate) struct Worker {
    pub index: usize,
    pub listeners: Vec<Socket1>,
    pub ports: Vec<String>,
    pub header_read: Duration,
    pub limits: conn::Limits,
    pub acceptor: Option<TlsAcceptor>,
    /// A gateway's front door: its admission and TLS ([`crate::gateway`]).
    pub front: Option<Arc<Front>>,
    /// Worker 0's: the certificates it reloads from disk when they change.
    pub certs: Option<Arc<CertStore>>,
    pub state: Arc<State>,
    pub shutdown: watch::Receiver<bool>,
}

impl Worker {
    pub(crate) async fn run(self) {
        // Every connection task holds a sender: when all are gone, the worker has drained.
        let (open, mut drained) = mpsc::channel::<()>(1);
        let mut tasks = tokio::task::JoinSet::new();
        let servers = Arc::new(Servers::new(&Settings {
            header_read: self.header_read,
            max_head: MAX_HEAD,
            ping_interval: H2_PING_INTERVAL,
            ping_timeout: H2_PING_TIMEOUT,
        }));
        let listeners: Vec<_> = self
            .listeners
            .into_iter()
            .filter_map(|l| match TcpListener::from_std(l.socket) {
                Ok(listener) => Some((l.kind, l.entry, l.cap, listener)),
                Err(e) => {
                    tracing::error!("cannot register a listener: {e}");
                    None
                }
            })
            .collect();
        for (kind, entry, cap, listener) in listeners {
            let ctx = Conn {
                kind,
                worker: self.index,
                dispatch: entry.as_ref().map(|e| Outbound::dispatch(e, &self.ports)),
                header_read: self.header_read,
                limits: self.limits,
                acceptor: self.acceptor.clone(),
                front: self.front.clone(),
                state: self.state.clone(),
                servers: servers.clone(),
            };
            let accepting = accept(listener, cap, ctx, open.clone(), self.shutdown.clone());
            tasks.spawn(accepting);
        }
        if let Some(certs) = self.certs {
            let what = "certificates";
            let shutdown = self.shutdown.clone();
            tokio::spawn(reload(what, move || certs.reload_if_changed(), shutdown));
        }
        // A gateway's own certificates, by worker 0 too (the front door is shared).
        if let Some(certs) =
            (self.front.as_ref().and_then(|f| f.certs.clone())).filter(|_| self.index == 0)
        {
            let what = "gateway certificates";
            let shutdown = self.shutdown.clone();
            tokio::spawn(reload(what, move || certs.reload_if_changed(), shutdown));
        }
        self.state.ready_workers.fetch_add(1, Ordering::AcqRel);
        while tasks.join_next().await.is_some() {}
        // Listeners are closed and every connection asked to finish; let requests in flight do.
        drop(open);
        let drain = self.state.config().timeouts.drain;
        let _ = tokio::time::timeout(drain, drained.recv()).await;
    }
}

/// One listener's accept loop, until shutdown; each connection served on its own task, which
/// holds a place under the listener's cap and a sender of `open` while it lives.
async fn accept(
    listener: TcpListener,
    cap: Arc<ConnCap>,
    ctx: Conn,
    open: mpsc::Sender<()>,
    mut shutdown: watch::Receiver<bool>,
) {
    let kind = ctx.kind;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    // Full: closed at once, before any TLS or HTTP.
                    let Some(place) = cap.take() else {
                        ctx.state.metrics.connection_refused(kind.name(), "limit");
                        drop(tcp);
                        continue;
                    };
                    let (ctx, open, drain) = (ctx.clone(), open.clone(), shutdown.clone());
                    tokio::spawn(async move {
                        ctx.serve(tcp, drain).await;
                        drop((place, open));
                    });
                }
                // Out of file descriptors and the like: back off, do not spin.
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
}

/// Reloads certificates when their files change (`changed`: every 2 s), until shutdown.
async fn reload(
    what: &'static str,
    changed: impl Fn() -> Result<bool, crate::tls::TlsError>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = tick.tick() => match changed() {
                Ok(true) => tracing::info!("{what} reloaded"),
                Ok(false) => {}
                Err(e) => tracing::warn!("keeping the old {what}: {e}"),
            },
            _ = shutdown.changed() => break,
        }
    }
}

#[derive(Clone)]
struct Conn {
    kind: Kind,
    /// The worker serving this connection: its forwarding state in each configuration.
    worker: usize,
    /// Outbound listeners: where their requests go, resolved once.
    dispatch: Option<Dispatch>,
    header_read: Duration,
    limits: conn::Limits,
    acceptor: Option<TlsAcceptor>,
    front: Option<Arc<Front>>,
    state: Arc<State>,
    servers: Arc<Servers>,
}

impl Conn {
    async fn serve(self, tcp: TcpStream, drain: watch::Receiver<bool>) {
        // The header-read allowance counts from here, TLS handshake included.
        let guard = Guard::new(self.limits);
        let _ = tcp.set_nodelay(true);
        let direction = match self.kind {
            Kind::Inbound => Direction::Inbound,
            _ => Direction::Outbound,
        };
        let metrics = self.state.metrics.clone();
        if self.kind != Kind::Admin {
            metrics.connection_opened(direction);
        }
        // Each kind's work is a future of its own on the heap: the task stays small, and a
        // connection holds only its own kind's state (an HTTP connection does not carry the
        // opaque splice's or the handshake's, ~8 KiB inline).
        match self.kind {
            Kind::Admin => Box::pin(self.serve_admin(tcp, guard, drain)).await,
            Kind::Outbound => {
                let proto = Proto::sniff(&tcp, guard.header_deadline()).await;
                Box::pin(self.serve_outbound(tcp, proto, None, guard, drain)).await;
            }
            Kind::Capture => Box::pin(self.serve_captured(tcp, guard, drain, &metrics)).await,
            Kind::Gateway => {
                let proto = Proto::sniff(&tcp, guard.header_deadline()).await;
                let from = tcp.peer_addr().ok().map(|a| a.ip());
                let client = crate::gateway::Client::new(from, false);
                Box::pin(self.serve_gateway(tcp, proto, client, guard, drain)).await;
            }
            Kind::GatewayTls => Box::pin(self.serve_gateway_tls(tcp, guard, drain, &metrics)).await,
            Kind::Tcp => {
                let (live, dispatch) = (
                    self.state.live(),
                    self.dispatch.clone().unwrap_or(Dispatch::ByHost),
                );
                let state = live.worker(self.worker).outbound.cluster_of(&dispatch);
                Box::pin(opaque::outbound::serve(
                    state,
                    tcp,
                    Bytes::new(),
                    None,
                    &metrics,
                ))
                .await;
            }
            Kind::Inbound => match &self.acceptor {
                Some(acceptor) => {
                    self.serve_inbound(acceptor, tcp, guard, drain, &metrics)
                        .await
                }
                None => Box::pin(self.serve_plain_inbound(tcp, guard, drain)).await,
            },
        }
        if self.kind != Kind::Admin {
            metrics.connection_closed(direction);
        }
    }

    /// The inbound port: the handshake within the header-read allowance, then the tunnel
    /// (its ALPN) or HTTP. The TLS stream is boxed at once and never bound across an await
    /// here: moved through futures by value, each would keep a dead copy of it.
    async fn serve_inbound(
        &self,
        acceptor: &TlsAcceptor,
        tcp: TcpStream,
        guard: Guard,
        drain: watch::Receiver<bool>,
        metrics: &Metrics,
    ) {
        let handshake = Box::pin(tokio::time::timeout(self.header_read, acceptor.accept(tcp)));
        let served: Pin<Box<dyn Future<Output = ()> + Send + '_>> = match handshake.await {
            Ok(Ok(tls)) => {
                metrics.handshake(Direction::Inbound, true);
                let tls = Box::new(tls);
                if tls.get_ref().1.alpn_protocol() == Some(TUNNEL_ALPN) {
                    let caller = Caller::of_tls(tls.get_ref().1.peer_certificates());
                    let state = self.state.clone();
                    Box::pin(opaque::inbound::serve(
                        *tls,
                        caller,
                        state,
                        self.limits,
                        drain,
                    ))
                } else {
                    Box::pin(self.serve_tls(tls, guard, drain))
                }
            }
            Ok(Err(e)) => {
                metrics.handshake(Direction::Inbound, false);
                tracing::debug!("inbound handshake refused: {e}");
                return;
            }
            Err(_) => {
                metrics.handshake(Direction::Inbound, false);
                return;
            }
        };
        served.await;
    }

    /// A captured connection: where it was going decides the service; detection decides
    /// between the HTTP path and opaque TCP.
    async fn serve_captured(
        &self,
        tcp: TcpStream,
        guard: Guard,
        drain: watch::Receiver<bool>,
        metrics: &Metrics,
    ) {
        let live = self.state.live();
        if let Some((tcp, to)) = capture::admit(tcp, &live.config, metrics).await {
            let to = opaque::captured::Destination {
                service: to.service,
                port: to.port,
                target: to.target,
            };
            // The destination names the callee, not the `Host` the app wrote; the port it
            // dialed goes with each request, for the callee's proxy to map (`ports`).
            let to_service = Dispatch::Service(to.service.into(), to.port);
            let http = |tcp: TcpStream, proto| {
                self.serve_outbound(tcp, proto, Some(to_service), guard, drain)
            };
            opaque::captured::serve(&live, self.worker, metrics, tcp, to, http).await;
        }
    }

    async fn serve_admin(&self, tcp: TcpStream, guard: Guard, drain: watch::Receiver<bool>) {
        let state = self.state.clone();
        // The guard names the server by the address this connection reached (an IPv4 one as
        // written, not as `[::ffff:…]`, when `[::]` took it).
        let Ok(local) = tcp.local_addr() else { return };
        let local = std::net::SocketAddr::new(local.ip().to_canonical(), local.port());
        let svc = service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, Infallible>(admin::handle(&state, local, req).await) }
        });
        let svc = guard.track(svc);
        let servers = &self.servers;
        servers
            .serve(tcp, Proto::Unknown, false, svc, guard, drain)
            .await;
    }

    /// The HTTP path of an outbound connection: an accepted one, or (capture) one detection
    /// peeked at, its callee given (`dispatch`) in place of the listener's.
    async fn serve_outbound<I>(
        &self,
        tcp: I,
        proto: Proto,
        dispatch: Option<Dispatch>,
        guard: Guard,
        drain: watch::Receiver<bool>,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let live = RefCell::new(self.state.cache());
        let dispatch = dispatch.or_else(|| self.dispatch.clone());
        let (w, dispatch) = (self.worker, dispatch.unwrap_or(Dispatch::ByHost));
        let svc = service_fn(move |req: hyper::Request<Incoming>| {
            // The configuration in force now, kept by this request to its end: one
            // atomic load and the reference count (as the handler's own `Arc` was).
            let live = live.borrow_mut().load().clone();
            let dispatch = dispatch.clone();
            async move {
                let resp = live.worker(w).outbound.handle(&dispatch, req).await;
                Ok::<_, Infallible>(resp)
            }
        });
        // Upgrades on (crate::upgrade): hyper prepares one only for a request that asks for it.
        let svc = guard.track(svc);
        let servers = &self.servers;
        servers.serve(tcp, proto, true, svc, guard, drain).await;
    }

    /// The inbound port after its handshake: the caller is who its certificate names (a
    /// certificate from the CA that names nobody is kept as such: refused).
    async fn serve_tls(
        &self,
        tls: Box<tokio_rustls::server::TlsStream<TcpStream>>,
        guard: Guard,
        drain: watch::Receiver<bool>,
    ) {
        let caller = Arc::new(Caller::of_tls(tls.get_ref().1.peer_certificates()));
        let from = tls.get_ref().0.peer_addr().ok();
        let proto = Proto::of_alpn(tls.get_ref().1.alpn_protocol());
        let (live, w) = (RefCell::new(self.state.cache()), self.worker);
        let svc = service_fn(move |req: hyper::Request<Incoming>| {
            let live = live.borrow_mut().load().clone();
            let caller = caller.clone();
            async move { Ok::<_, Infallible>(live.worker(w).inbound.handle(&caller, from, req).await) }
        });
        let svc = guard.track(svc);
        let servers = &self.servers;
        servers.serve(tls, proto, true, svc, guard, drain).await;
    }

    /// The inbound port of a proxy without TLS (`--plaintext`): nobody to identify.
    async fn serve_plain_inbound(
        &self,
        tcp: TcpStream,
        guard: Guard,
        drain: watch::Receiver<bool>,
    ) {
        let (live, w) = (RefCell::new(self.state.cache()), self.worker);
        let from = tcp.peer_addr().ok();
        let svc = service_fn(move |req: hyper::Request<Incoming>| {
            let live = live.borrow_mut().load().clone();
            async move {
                let inbound = &live.worker(w).inbound;
                Ok::<_, Infallible>(inbound.handle(&Caller::Plaintext, from, req).await)
            }
        });
        let proto = Proto::sniff(&tcp, guard.header_deadline()).await;
        let svc = guard.track(svc);
        let servers = &self.servers;
        servers.serve(tcp, proto, false, svc, guard, drain).await;
    }
}
