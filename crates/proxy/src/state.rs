//! What the workers, the admin endpoint and the control plane's session share about a running
//! proxy: the configuration in force ([`Live`], behind an atomic pointer, loaded once per
//! request), its versions, readiness and draining, and the certificates in use. Putting a new
//! configuration in force happens here ([`State::replace`]); serving does not.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, Cache};

use crate::config::ProxyConfig;
use crate::live::Live;
use crate::metrics::Metrics;
use crate::tls::{CertStore, TlsError};

/// Loads the [`Live`] in force: compares one pointer with the one it holds (a relaxed atomic
/// load) and only on a change loads the new one.
pub(crate) type LiveCache = Cache<Arc<ArcSwap<Live>>, Arc<Live>>;

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
    /// The names of the per-upstream listeners, in the order of their
    /// [`crate::outbound::Dispatch::Port`].
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
    /// A proxy's shared state with `live` in force, before any worker is ready.
    pub(crate) fn new(
        live: Live,
        ports: Vec<String>,
        metrics: Arc<Metrics>,
        workers: usize,
        certs: Option<Arc<CertStore>>,
    ) -> State {
        State {
            live: Arc::new(ArcSwap::from_pointee(live)),
            version: AtomicU64::new(0),
            config_version: AtomicU64::new(0),
            ports,
            replacing: Mutex::new(()),
            metrics,
            workers,
            ready_workers: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            certs,
        }
    }

    /// The configuration in force and every worker's state under it.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// A handle that loads the configuration in force with one atomic load while it stays the
    /// same (one per connection: loading takes `&mut`).
    pub(crate) fn cache(&self) -> LiveCache {
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
