//! Listeners and workers. Each worker is a thread with its own single-threaded runtime, its own
//! listening sockets (SO_REUSEPORT: the kernel spreads connections) and its own upstream pools —
//! measured cheaper per hop than one multi-threaded runtime (docs/performance-notes). Shutdown:
//! stop accepting, let requests in flight finish (up to the drain timeout), exit.

use std::cell::RefCell;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use arc_swap::{ArcSwap, Cache};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use indexmap::IndexMap;
use socket2::{Domain, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::admin;
use crate::config::ProxyConfig;
use crate::conn::{self, Guard};
use crate::forward::{Dispatch, Entry, Outbound};
use crate::inbound::Caller;
use crate::listeners::{self, ConnCap, NotLoopback};
use crate::live::Live;
use crate::metrics::{Direction, Metrics};
use crate::tls::{CertStore, TlsError};

/// Largest request head (request line and headers) accepted; beyond it: 431.
const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        addr: SocketAddr,
        what: String,
        source: std::io::Error,
    },
    #[error("cannot start a worker: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{0} requires certificates (the inbound port is mutual TLS)")]
    NeedCerts(String),
    #[error(transparent)]
    NotLoopback(#[from] NotLoopback),
}

/// What a running proxy listens on (real ports, also when the file said port 0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bound {
    pub inbound: Option<SocketAddr>,
    pub outbound: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub upstreams: IndexMap<String, SocketAddr>,
}

/// Loads the [`Live`] in force: compares one pointer with the one it holds (a relaxed atomic
/// load) and only on a change loads the new one.
type LiveCache = Cache<Arc<ArcSwap<Live>>, Arc<Live>>;

/// Shared between workers, the admin endpoint and the control plane's session.
#[derive(Debug)]
pub struct State {
    /// The configuration in force with every worker's forwarding state: loaded once per
    /// request (through a connection's [`LiveCache`]), replaced whole by [`State::replace`].
    live: Arc<ArcSwap<Live>>,
    /// The control plane's snapshot version last accepted, and the version of the mesh file in
    /// force (0: not from a control plane). For `/config`.
    pub version: AtomicU64,
    pub config_version: AtomicU64,
    /// The names of the per-upstream listeners, in the order of their [`Dispatch::Port`].
    ports: Vec<String>,
    /// Held while a new configuration is built and put in force (never by a request).
    replacing: Mutex<()>,
    pub metrics: Arc<Metrics>,
    pub workers: usize,
    pub ready_workers: AtomicUsize,
    pub draining: AtomicBool,
    /// The certificate, key and trust bundle in use (none in plaintext mode): the control
    /// plane's session reloads it as soon as it has written new files.
    pub certs: Option<Arc<CertStore>>,
}

impl State {
    /// The configuration in force and every worker's state under it.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// A handle that loads the configuration in force with one atomic load while it stays the
    /// same (one per connection: loading takes `&mut`).
    fn cache(&self) -> LiveCache {
        Cache::new(self.live.clone())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<ProxyConfig> {
        self.live.load().config.clone()
    }

    /// Puts `config` in force for new requests (requests in flight finish under the one they
    /// started with). Upstreams that stay keep what they learnt and their pooled connections.
    /// On an error nothing changes. Concurrent callers take turns, so none loses what another
    /// put in force.
    pub fn replace(&self, config: ProxyConfig) -> Result<(), TlsError> {
        let _turn = match self.replacing.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let previous = self.live.load_full();
        let next = Live::build(
            config,
            self.certs.as_ref(),
            &self.metrics,
            self.workers,
            &self.ports,
            Some(&previous),
        )?;
        self.live.store(Arc::new(next));
        Ok(())
    }

    pub fn ready(&self) -> bool {
        self.ready_workers.load(Ordering::Acquire) == self.workers
            && !self.draining.load(Ordering::Acquire)
    }
}

/// A started proxy.
#[derive(Debug)]
pub struct Running {
    pub bound: Bound,
    pub state: Arc<State>,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting and drains; returns at once ([`Running::wait`] waits for the end).
    pub fn shutdown(&self) {
        self.state.draining.store(true, Ordering::Release);
        let _ = self.shutdown.send(true);
    }

    /// Waits until every worker has drained and stopped.
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inbound,
    Outbound,
    Admin,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Inbound => "inbound",
            Kind::Outbound => "outbound",
            Kind::Admin => "admin",
        }
    }
}

struct Listen {
    kind: Kind,
    entry: Option<Entry>,
    sockets: Vec<std::net::TcpListener>,
    /// Its open connections, shared by the workers' sockets.
    cap: Arc<ConnCap>,
}

/// One worker's socket of one listener.
struct Socket1 {
    kind: Kind,
    entry: Option<Entry>,
    socket: std::net::TcpListener,
    cap: Arc<ConnCap>,
}

fn bind(
    addr: SocketAddr,
    what: &str,
    reuse_port: bool,
) -> Result<std::net::TcpListener, ServerError> {
    let err = |source| ServerError::Bind {
        addr,
        what: what.to_owned(),
        source,
    };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(err)?;
    socket.set_reuse_address(true).map_err(err)?;
    #[cfg(unix)]
    if reuse_port {
        socket.set_reuse_port(true).map_err(err)?;
    }
    socket.bind(&addr.into()).map_err(err)?;
    socket.listen(1024).map_err(err)?;
    socket.set_nonblocking(true).map_err(err)?;
    Ok(socket.into())
}

/// Binds `addr` once per worker (the first resolves port 0; the rest share its port).
fn bind_all(
    addr: SocketAddr,
    what: &str,
    workers: usize,
) -> Result<Vec<std::net::TcpListener>, ServerError> {
    let first = bind(addr, what, workers > 1)?;
    let actual = first.local_addr().map_err(|source| ServerError::Bind {
        addr,
        what: what.to_owned(),
        source,
    })?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(bind(actual, what, true)?);
    }
    Ok(all)
}

/// Resolves on SIGTERM or Ctrl-C: when a proxy drains, and when the lab's runs stop their
/// children. Never resolves if neither can be watched (no signal is not a signal).
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                () = ctrl_c => {}
            }
        }
        Err(_) => ctrl_c.await,
    }
}

/// Binds every listener and starts the workers. Errors (a port in use, unreadable
/// certificates) come back before anything is served.
pub fn start(config: ProxyConfig) -> Result<Running, ServerError> {
    listeners::check_loopback(&config)?;
    match listeners::raise_open_files() {
        Ok(n) => tracing::info!("open files: up to {n}"),
        Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
    }
    let workers = config.workers.max(1);
    let cap = config.listeners.max_connections;
    let certs = match (&config.certs, config.plaintext) {
        (Some(files), false) => Some(CertStore::open(files.clone())?),
        _ => None,
    };
    if config.inbound.is_some() && certs.is_none() && !config.plaintext() {
        return Err(ServerError::NeedCerts(config.service.clone()));
    }
    let acceptor = match &certs {
        Some(c) => Some(TlsAcceptor::from(c.server_config()?)),
        None => None,
    };
    let mut listens = Vec::new();
    let mut bound = Bound::default();
    if let Some(a) = config.inbound {
        let s = bind_all(a, "inbound", workers)?;
        bound.inbound = s[0].local_addr().ok();
        listens.push(Listen {
            kind: Kind::Inbound,
            entry: None,
            sockets: s,
            cap: ConnCap::new(cap),
        });
    }
    if let Some(a) = config.outbound {
        let s = bind_all(a, "outbound", workers)?;
        bound.outbound = s[0].local_addr().ok();
        listens.push(Listen {
            kind: Kind::Outbound,
            entry: Some(Entry::HttpProxy),
            sockets: s,
            cap: ConnCap::new(cap),
        });
    }
    for (name, a) in &config.upstream_ports {
        let s = bind_all(*a, &format!("upstream {name}"), workers)?;
        if let Ok(local) = s[0].local_addr() {
            bound.upstreams.insert(name.clone(), local);
        }
        listens.push(Listen {
            kind: Kind::Outbound,
            entry: Some(Entry::Upstream(name.clone())),
            sockets: s,
            cap: ConnCap::new(cap),
        });
    }
    let admin_socket = match config.admin {
        Some(a) => {
            let s = bind(a, "admin", false)?;
            bound.admin = s.local_addr().ok();
            Some(s)
        }
        None => None,
    };

    let metrics = Metrics::new();
    let header_read = config.timeouts.header_read;
    let limits = conn::Limits {
        header_read,
        idle: config.timeouts.idle,
    };
    let ports: Vec<String> = config.upstream_ports.keys().cloned().collect();
    // Budgets, caps and what we know of each copy are per proxy, shared by its workers; pools
    // are per worker.
    let live = Live::build(config, certs.as_ref(), &metrics, workers, &ports, None)?;
    let state = Arc::new(State {
        live: Arc::new(ArcSwap::from_pointee(live)),
        version: AtomicU64::new(0),
        config_version: AtomicU64::new(0),
        ports: ports.clone(),
        replacing: Mutex::new(()),
        metrics: metrics.clone(),
        workers,
        ready_workers: AtomicUsize::new(0),
        draining: AtomicBool::new(false),
        certs: certs.clone(),
    });
    let (shutdown, watch_rx) = watch::channel(false);
    let mut threads = Vec::new();
    let mut admin_socket = admin_socket.map(|socket| Socket1 {
        kind: Kind::Admin,
        entry: None,
        socket,
        cap: ConnCap::new(listeners::ADMIN_MAX_CONNECTIONS),
    });
    for w in 0..workers {
        let mut mine: Vec<Socket1> = listens
            .iter_mut()
            .filter_map(|l| {
                Some(Socket1 {
                    kind: l.kind,
                    entry: l.entry.clone(),
                    socket: l.sockets.pop()?,
                    cap: l.cap.clone(),
                })
            })
            .collect();
        if w == 0 {
            mine.extend(admin_socket.take());
        }
        let worker = Worker {
            index: w,
            listeners: mine,
            ports: ports.clone(),
            header_read,
            limits,
            acceptor: acceptor.clone(),
            certs: if w == 0 { certs.clone() } else { None },
            state: state.clone(),
            shutdown: watch_rx.clone(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Runtime)?;
        let handle = std::thread::Builder::new()
            .name(format!("hopwise-worker-{w}"))
            .spawn(move || runtime.block_on(worker.run()))
            .map_err(ServerError::Runtime)?;
        threads.push(handle);
    }
    Ok(Running {
        bound,
        state,
        shutdown,
        threads,
    })
}

struct Worker {
    index: usize,
    listeners: Vec<Socket1>,
    ports: Vec<String>,
    header_read: Duration,
    limits: conn::Limits,
    acceptor: Option<TlsAcceptor>,
    certs: Option<Arc<CertStore>>,
    state: Arc<State>,
    shutdown: watch::Receiver<bool>,
}

impl Worker {
    async fn run(self) {
        // Every connection task holds a sender: when all are gone, the worker has drained.
        let (open, mut drained) = mpsc::channel::<()>(1);
        let mut tasks = tokio::task::JoinSet::new();
        let builder = Arc::new(server_builder(self.header_read));
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
                state: self.state.clone(),
                builder: builder.clone(),
            };
            let open = open.clone();
            let mut shutdown = self.shutdown.clone();
            tasks.spawn(async move {
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
            });
        }
        if let Some(certs) = self.certs {
            let mut shutdown = self.shutdown.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(2));
                loop {
                    tokio::select! {
                        _ = tick.tick() => match certs.reload_if_changed() {
                            Ok(true) => tracing::info!("certificates reloaded"),
                            Ok(false) => {}
                            Err(e) => tracing::warn!("keeping the old certificates: {e}"),
                        },
                        _ = shutdown.changed() => break,
                    }
                }
            });
        }
        self.state.ready_workers.fetch_add(1, Ordering::AcqRel);
        while tasks.join_next().await.is_some() {}
        // Listeners are closed and every connection asked to finish; let requests in flight do.
        drop(open);
        let drain = self.state.config().timeouts.drain;
        let _ = tokio::time::timeout(drain, drained.recv()).await;
    }
}

fn server_builder(header_read: Duration) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read)
        .max_buf_size(MAX_HEAD)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEAD as u32)
        // A peer that stops answering pings is gone: closed, whatever its streams.
        .keep_alive_interval(H2_PING_INTERVAL)
        .keep_alive_timeout(H2_PING_TIMEOUT);
    b
}

/// HTTP/2 keep-alive pings on served connections: every 30 s, answered within 10 s.
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

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
    state: Arc<State>,
    builder: Arc<auto::Builder<TokioExecutor>>,
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
        match self.kind {
            Kind::Admin => {
                let state = self.state.clone();
                let svc = service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(admin::handle(&state, req)) }
                });
                let conn = self
                    .builder
                    .serve_connection(TokioIo::new(tcp), guard.track(svc));
                guard.drive(Box::pin(conn.into_owned()), drain).await;
            }
            Kind::Outbound => {
                let live = RefCell::new(self.state.cache());
                let (w, dispatch) = (self.worker, self.dispatch.unwrap_or(Dispatch::ByHost));
                let svc = service_fn(move |req: hyper::Request<Incoming>| {
                    // The configuration in force now, kept by this request to its end: one
                    // atomic load and the reference count (as the handler's own `Arc` was).
                    let live = live.borrow_mut().load().clone();
                    async move {
                        Ok::<_, Infallible>(live.worker(w).outbound.handle(dispatch, req).await)
                    }
                });
                let conn = self
                    .builder
                    .serve_connection(TokioIo::new(tcp), guard.track(svc));
                guard.drive(Box::pin(conn.into_owned()), drain).await;
            }
            Kind::Inbound => match &self.acceptor {
                Some(acceptor) => {
                    let timeout = self.header_read;
                    let tls = match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            metrics.handshake(Direction::Inbound, false);
                            tracing::debug!("inbound handshake refused: {e}");
                            metrics.connection_closed(direction);
                            return;
                        }
                        Err(_) => {
                            metrics.handshake(Direction::Inbound, false);
                            metrics.connection_closed(direction);
                            return;
                        }
                    };
                    metrics.handshake(Direction::Inbound, true);
                    // A certificate from the CA that names nobody is kept as such: refused.
                    let caller = Arc::new(Caller::of_tls(tls.get_ref().1.peer_certificates()));
                    let (live, w) = (RefCell::new(self.state.cache()), self.worker);
                    let svc = service_fn(move |req: hyper::Request<Incoming>| {
                        let live = live.borrow_mut().load().clone();
                        let caller = caller.clone();
                        async move {
                            Ok::<_, Infallible>(live.worker(w).inbound.handle(&caller, req).await)
                        }
                    });
                    let conn = self
                        .builder
                        .serve_connection(TokioIo::new(tls), guard.track(svc));
                    guard.drive(Box::pin(conn.into_owned()), drain).await;
                }
                None => {
                    let (live, w) = (RefCell::new(self.state.cache()), self.worker);
                    let svc = service_fn(move |req: hyper::Request<Incoming>| {
                        let live = live.borrow_mut().load().clone();
                        async move {
                            Ok::<_, Infallible>(
                                live.worker(w).inbound.handle(&Caller::Plaintext, req).await,
                            )
                        }
                    });
                    let conn = self
                        .builder
                        .serve_connection(TokioIo::new(tcp), guard.track(svc));
                    guard.drive(Box::pin(conn.into_owned()), drain).await;
                }
            },
        }
        if self.kind != Kind::Admin {
            metrics.connection_closed(direction);
        }
    }
}
