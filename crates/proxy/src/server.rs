//! Starting a proxy: every listener bound (once per worker, SO_REUSEPORT: the kernel spreads
//! connections) before anything is served, the shared [`State`] built, one thread with its own
//! single-threaded runtime and its own upstream pools per worker ([`crate::worker`]) —
//! measured cheaper per hop than one multi-threaded runtime (docs/performance-notes). Shutdown:
//! stop accepting, let requests in flight finish (up to the drain timeout), exit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use indexmap::IndexMap;
use socket2::{Domain, Socket, Type};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::capture;
use crate::config::ProxyConfig;
use crate::conn;
use crate::listeners::{self, ConnCap, NotLoopback};
use crate::live::Live;
use crate::metrics::Metrics;
use crate::outbound::Entry;
pub use crate::state::State;
use crate::tls::{CertStore, TlsError};
use crate::worker::{Kind, Socket1, Worker};

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
    #[error(transparent)]
    Otlp(#[from] crate::otlp::OtlpError),
    #[error(
        "the proxy of {0} has nothing to listen on: no inbound port, no outbound port, no \
         upstream port, no capture listener (give its copy in the mesh file an `inbound`, \
         `outbound` or `upstreams`, or pass --inbound, --outbound, --upstream or --capture)"
    )]
    NothingToListenOn(String),
    #[error(transparent)]
    AccessLog(#[from] crate::access_log::LogError),
}

/// What a running proxy listens on (real ports, also when the file said port 0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bound {
    pub inbound: Option<SocketAddr>,
    pub outbound: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    /// The capture listener (inside the copy's namespace, when it has one).
    pub capture: Option<SocketAddr>,
    /// A gateway's plain HTTP listener.
    pub gateway_http: Option<SocketAddr>,
    /// A gateway's TLS listener.
    pub gateway_https: Option<SocketAddr>,
    pub upstreams: IndexMap<String, SocketAddr>,
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
        // Taps never end on their own: the drain would wait for them.
        self.state.metrics.tap().close();
        let _ = self.shutdown.send(true);
    }

    /// Waits until every worker has drained and stopped.
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
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

fn bind(
    addr: SocketAddr,
    what: &str,
    reuse_port: bool,
    transparent: bool,
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
    // Capture's listener takes the namespace's connections to service addresses by TPROXY
    // (crate::capture): the kernel hands it sockets addressed elsewhere only if it may.
    #[cfg(target_os = "linux")]
    if transparent {
        match addr {
            SocketAddr::V4(_) => socket.set_ip_transparent_v4(true),
            SocketAddr::V6(_) => socket.set_ip_transparent_v6(true),
        }
        .map_err(err)?;
    }
    // `[::]` takes IPv4 too whatever the host's `net.ipv6.bindv6only` says: an IPv6 pod's
    // listeners (`sidecar`'s `in_family`) still answer its IPv4 callers.
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        socket.set_only_v6(false).map_err(err)?;
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
    transparent: bool,
) -> Result<Vec<std::net::TcpListener>, ServerError> {
    let first = bind(addr, what, workers > 1, transparent)?;
    let actual = first.local_addr().map_err(|source| ServerError::Bind {
        addr,
        what: what.to_owned(),
        source,
    })?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(bind(actual, what, true, transparent)?);
    }
    Ok(all)
}

/// The capture listener, and its IPv6 twin: `[::1]` at the same port, where the rules redirect
/// the app's IPv6 connections — in a copy's own namespace, or a Kubernetes pod's, whose
/// rules (`capture-init`) redirect both families (docs/capture.md). A namespace without IPv6
/// has no `::1` to bind and no IPv6 path to redirect: no twin then.
fn bind_capture(
    c: &crate::config::CaptureConfig,
    workers: usize,
) -> Result<Vec<Vec<std::net::TcpListener>>, ServerError> {
    let in_netns = c.netns.is_some();
    let v4 = bind_all(c.listen, "capture", workers, in_netns)?;
    let mut all = vec![v4];
    if c.listen.is_ipv4() && c.listen.ip().is_loopback() {
        let port = all[0][0].local_addr().map_or(c.listen.port(), |a| a.port());
        let twin = SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), port);
        // Not transparent: IPv6 is only ever redirected (NAT) here, never handed over by TPROXY.
        match bind_all(twin, "capture (IPv6)", workers, false) {
            Ok(s) => all.push(s),
            // No `::1` (EADDRNOTAVAIL), or no IPv6 at all (EAFNOSUPPORT).
            Err(ServerError::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrNotAvailable
                    || source.raw_os_error() == Some(nix::libc::EAFNOSUPPORT) =>
            {
                tracing::info!("capture: the namespace has no IPv6, so no IPv6 listener");
            }
            // Outside a namespace of the copy's own, `[::1]` at that port is another's to
            // hold: IPv4 is still captured.
            Err(e) if !in_netns => tracing::warn!("capture: no IPv6 listener: {e}"),
            Err(e) => return Err(e),
        }
    }
    Ok(all)
}

/// Resolves on SIGTERM or Ctrl-C: when a proxy drains, and when the lab's runs stop their
/// children (`hopwise-api`'s one wait).
pub use hopwise_api::shutdown::signal as shutdown_signal;

/// Binds every listener and starts the workers. Errors (a port in use, unreadable
/// certificates) come back before anything is served.
pub fn start(config: ProxyConfig) -> Result<Running, ServerError> {
    // A proxy serving nothing would run silently and help no one.
    if config.inbound.is_none()
        && config.outbound.is_none()
        && config.upstream_ports.is_empty()
        && config.capture.is_none()
        && config.gateway.is_none()
    {
        return Err(ServerError::NothingToListenOn(config.service.clone()));
    }
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
        let s = bind_all(a, "inbound", workers, false)?;
        bound.inbound = s[0].local_addr().ok();
        listens.push(Listen {
            kind: Kind::Inbound,
            entry: None,
            sockets: s,
            cap: ConnCap::new(cap),
        });
    }
    if let Some(a) = config.outbound {
        let s = bind_all(a, "outbound", workers, false)?;
        bound.outbound = s[0].local_addr().ok();
        listens.push(Listen {
            kind: Kind::Outbound,
            entry: Some(Entry::HttpProxy),
            sockets: s,
            cap: ConnCap::new(cap),
        });
    }
    if let Some(c) = &config.capture {
        let families = capture::in_netns(c.netns.as_deref(), || bind_capture(c, workers))
            .map_err(|source| ServerError::Bind {
                addr: c.listen,
                what: "capture".to_owned(),
                source,
            })??;
        bound.capture = families[0][0].local_addr().ok();
        // One cap for both families: they are one listener to the app.
        let shared = ConnCap::new(cap);
        for s in families {
            listens.push(Listen {
                kind: Kind::Capture,
                entry: Some(Entry::HttpProxy),
                sockets: s,
                cap: shared.clone(),
            });
        }
    }
    for (name, a) in &config.upstream_ports {
        let s = bind_all(*a, &format!("upstream {name}"), workers, false)?;
        if let Ok(local) = s[0].local_addr() {
            bound.upstreams.insert(name.clone(), local);
        }
        // An opaque TCP upstream's local port carries TCP, not HTTP.
        let tcp = config.clusters.get(name).is_some_and(|c| c.whole_tcp());
        listens.push(Listen {
            kind: if tcp { Kind::Tcp } else { Kind::Outbound },
            entry: Some(Entry::Upstream(name.clone())),
            sockets: s,
            cap: ConnCap::new(cap),
        });
    }
    // A gateway's front door: bound anywhere (it is the listener strangers are meant to reach),
    // under the same cap, header-read and idle timeouts as every other.
    let front = crate::gateway::Front::new(&config)?;
    if let Some(g) = &config.gateway {
        let https = g.gateway.https.as_ref().map(|h| h.listen);
        for (addr, kind, what) in [
            (g.gateway.http, Kind::Gateway, "gateway http"),
            (https, Kind::GatewayTls, "gateway https"),
        ] {
            let Some(a) = addr else { continue };
            let s = bind_all(a, what, workers, false)?;
            let local = s[0].local_addr().ok();
            match kind {
                Kind::Gateway => bound.gateway_http = local,
                _ => bound.gateway_https = local,
            }
            listens.push(Listen {
                kind,
                entry: Some(Entry::Gateway),
                sockets: s,
                cap: ConnCap::new(cap),
            });
        }
    }
    let admin_socket = match config.admin {
        Some(a) => {
            let s = bind(a, "admin", false, false)?;
            bound.admin = s.local_addr().ok();
            Some(s)
        }
        None => None,
    };

    let metrics = Metrics::new();
    if let Some(t) = &config.tracing
        && let Some(sink) =
            crate::otlp::start(t, &config.service, config.copy, metrics.spans_dropped())?
    {
        metrics.set_span_sink(sink);
    }
    if let Some(log) = &config.access_log {
        metrics.set_log_sink(crate::access_log::start(log, metrics.log_dropped())?);
    }
    let header_read = config.timeouts.header_read;
    let limits = conn::Limits {
        header_read,
        idle: config.timeouts.idle,
    };
    let ports: Vec<String> = config.upstream_ports.keys().cloned().collect();
    // Budgets, caps and what we know of each copy are per proxy, shared by its workers; pools
    // are per worker.
    let live = Live::build(config, certs.as_ref(), &metrics, workers, &ports, None)?;
    let state = Arc::new(State::new(
        live,
        ports.clone(),
        metrics.clone(),
        workers,
        certs.clone(),
    ));
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
            front: front.clone(),
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
