//! The control plane's state in one place, and every operation the API offers on it: the CA,
//! the mesh file in force (checked before it changes), the registry of copies, the join tokens,
//! and what each proxy was sent and acknowledged. It reads no clock — every call that needs the
//! time takes `now` — and does no I/O but through the [`Store`] (and, at start, reading the
//! operator's CA files), so it is tested without a network or a real clock. The gRPC server
//! ([`crate::api`]) wraps it in a mutex.
//!
//! Versions: every change that can alter what a proxy is sent (a copy joins or leaves, the mesh
//! file changes) increments the version. Its high 32 bits are the number of control-plane starts
//! on this state directory and its low 32 bits count changes since this start, so versions (and
//! lease ids, numbered the same way) never repeat across restarts. [`Plane::take_wake`] tells
//! whose streams the changes concern ([`wake`]): a copy's change, the callers of its service;
//! the mesh file or the CA, everyone.
//!
//! CA rotation ([`Plane::rotate_ca`]) runs in three stages, each refused until it is safe:
//! `add` (a new root joins the trust bundle after the old one), `reissue` (once every proxy has
//! confirmed that bundle, the new root signs and the CA generation in snapshots grows, so every
//! proxy asks for a new certificate at once), `retire` (once every proxy's certificate is from
//! the new root, the old root leaves the bundle).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hopwise_analyze::{Finding, Severity};
use hopwise_model::Mesh;

use crate::ca::{Ca, CaError};
use crate::registry::Registry;
use crate::store::{Secret, Store, StoreError};
use crate::token::{RandomError, TokenIndex};

mod admin;
mod apply;
pub mod delta;
mod discovered;
mod inbound;
mod kube_overlay;
mod leases;
mod mode;
pub mod proxies;
mod records;
mod replicas;
pub mod request;
mod rotation;
mod snapshot;
mod start;
mod status;
mod vouched;
pub mod wake;
pub use admin::admin_addr;
pub use apply::{Applied, Prepared, prepare};
pub use inbound::inbound_addr;
pub use kube_overlay::{Refused, Verdict};
pub use leases::IssueTicket;
pub use records::Ack;
pub use replicas::{Followed, ProxyWrites};
pub use rotation::{PendingProxy, RotateStage, Rotated};
pub use snapshot::{Fixed, Snapshot, Upstream};
pub use start::{CaFiles, ConfigFile, Options, Started};
pub use status::{CopyStatus, ProxyStatus, ServiceStatus, Status};
pub use wake::Wake;

use mode::Mode;
use records::{IssuedRecord, ProxyRecord};
use rotation::rotation_name;
use start::{add_tokens, ca_of};

/// A lease's TTL when the request gives none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// The longest lease granted: a copy that vanishes without a goodbye leaves within this.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// After a start the plane knows no proxy yet; `rotate-ca --stage reissue|retire` waits this
/// long for them to reconnect (they retry with back-off up to 5 s) before it trusts that the
/// proxies it knows are all there are.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(10);

/// The most copies one service may hold at once (a registration at an address it already
/// holds replaces that copy and does not count).
pub const MAX_COPIES_PER_SERVICE: usize = 1024;
/// The most proxy names one service's join token may use (each one is a record kept while its
/// stream is open, or while its certificate is valid; see [`PROXY_RECORD_TTL`]).
pub const MAX_PROXY_NAMES_PER_SERVICE: usize = 1024;

/// How long the record of a proxy with no stream open is kept once its certificate (if it was
/// issued one) has expired: longer than the default lease and than a proxy's longest back-off,
/// so a proxy that reconnects finds it.
pub const PROXY_RECORD_TTL: Duration = Duration::from_secs(60);

/// Why the control plane did not start. Each names the file or the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{location} holds no mesh file yet: pass --config MESH.yaml on the first start")]
    NoConfig { location: String },
    #[error("{rendered}\n{name}: {count} problem(s); the control plane did not start")]
    InvalidConfig {
        name: String,
        rendered: String,
        count: usize,
    },
    #[error("{name}: `hopwise check` finds {} error(s); the control plane did not start", .findings.iter().filter(|f| f.severity == Severity::Error).count())]
    Refused {
        name: String,
        findings: Vec<Finding>,
    },
    #[error(
        "the mesh file stored in {location} is no longer valid:\n{rendered}\napply a corrected file, or move the state directory away"
    )]
    StoredConfig { location: String, rendered: String },
    #[error("{0}")]
    CaConflict(String),
    #[error("--cert-lifetime {0:?} is too short; use at least 1s")]
    Lifetime(Duration),
    #[error(transparent)]
    Random(#[from] RandomError),
}

/// Why an API call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("the join token is not one this control plane issued")]
    UnknownToken,
    #[error("the token is for `{token_for}`, not `{asked}`")]
    WrongService { token_for: String, asked: String },
    #[error("lease {0} is unknown (expired, or granted before a restart): register again")]
    UnknownLease(u64),
    #[error("lease {0} belongs to another service")]
    NotYourLease(u64),
    #[error("`{0}` is not a service in the mesh file in force")]
    UnknownService(String),
    #[error("`{0}` is outside the mesh (`external`): it runs no proxy")]
    External(String),
    #[error("`{0}` is not an address other proxies can reach; send ip:port, e.g. 10.0.0.7:7001")]
    BadAddress(String),
    #[error(
        "admin address `{addr}` is not where this proxy connects from ({from}): only that \
         address, or loopback from loopback, is read by the dashboard; it is ignored"
    )]
    ForeignAdmin { addr: String, from: String },
    #[error(
        "`{service}` holds {cap} copies already (the most a service may hold); deregister \
         some or let their leases expire"
    )]
    TooManyCopies { service: String, cap: usize },
    #[error(
        "`{service}`'s join token has been used by {cap} proxy names already (the most it may \
         be); reuse a name, or wait until the records of gone proxies are dropped"
    )]
    TooManyProxies { service: String, cap: usize },
    #[error("a lease of {0:?} is not granted: use 1 s to 1 h (0 means 10 s)")]
    Ttl(Duration),
    #[error("the state could not be saved: {0}")]
    Store(String),
    #[error("`{0}` is not a stage of a CA rotation: use add, reissue or retire")]
    BadStage(String),
    #[error("the CA: {0}")]
    Ca(String),
    #[error(
        "`{0}` is not a proxy name: at most {max} bytes, no control characters",
        max = request::MAX_PROXY_NAME
    )]
    BadProxyName(String),
    #[error("the copy's labels: {0}")]
    BadLabel(String),
    #[error(
        "the token is `{0}`'s, and no service of the mesh file in force runs as it (`kubernetes: \
         {{ namespace, service_account }}`)"
    )]
    NoServiceRunsAs(String),
}

fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// The control plane's state.
#[derive(Debug)]
pub struct Plane {
    store: Store,
    ca: Arc<Ca>,
    /// The signing root's generation (as stored).
    ca_generation: u64,
    /// The version from which snapshots carry the current trust bundle.
    bundle_version: u64,
    /// When this start happened (for [`RECONNECT_GRACE`]).
    started_at: SystemTime,
    mesh: Arc<Mesh>,
    lifetime: Duration,
    registry: Registry,
    epoch: u64,
    changes: u64,
    proxies: BTreeMap<(String, String), ProxyRecord>,
    issued: BTreeMap<String, IssuedRecord>,
    /// The text of `mesh` (a shared store's state may move on before it is in force).
    mesh_text_in_force: String,
    /// The tokens last written to the token files (shared store: to notice new ones).
    tokens_seen: BTreeMap<String, Secret>,
    /// The mesh file or the CA changed since [`Plane::take_wake`]: every stream is concerned.
    wake_everyone: bool,
    /// This replica's name in `Status` (its listen address; empty until it listens).
    replica: String,
    /// Shared store: the etcd lease this replica's records of proxies are attached to (`None`:
    /// none granted yet, or lost; nothing is written meanwhile).
    replica_lease: Option<u64>,
    /// Shared store: what the other replicas know of proxies.
    remote: proxies::Remote,
    /// Since when each proxy has had no stream open (as [`Plane::prune_proxies`] saw it).
    proxies_idle: BTreeMap<(String, String), Instant>,
    /// The embedded store or a shared one: what differs between them.
    mode: Mode,
    /// Grows with every change of the mesh file, the CA or the tokens ([`Plane::everyone`]):
    /// what cached snapshot parts and streams' authorizations are checked against.
    config_stamp: u64,
    /// The parts of the latest snapshots ([`Plane::shared_snapshot`]).
    snapshots: snapshot::cache::Cache,
    /// Who calls each service, for the mesh in force (rebuilt when it changes).
    callers: wake::Callers,
    /// The join tokens by digest (rebuilt with [`Plane::everyone`]).
    token_index: TokenIndex,
    /// Tokens another authority vouched for (Kubernetes ServiceAccount tokens).
    vouched: vouched::Vouched,
    /// What Kubernetes lists of each Service, by namespace and name ([`discovered`]).
    discovered: BTreeMap<(String, String), hopwise_model::kubernetes::Endpoints>,
    /// HTTPRoutes and GRPCRoutes from Kubernetes, and the mesh file served with them in.
    kube: kube_overlay::Overlay,
}

impl Plane {
    /// The version proxies are sent now.
    pub fn version(&self) -> u64 {
        (self.epoch << 32) | self.changes
    }

    /// A change proxies may see: the next version (embedded), or the etcd revision it was
    /// written at (shared; versions never go back).
    fn bump(&mut self, written: Option<u64>) {
        self.mode.bump(&mut self.changes, written);
    }

    /// Whose snapshot streams the changes since the last call concern: every stream after a
    /// change of the mesh file, the trust bundle or the CA generation; else the callers of the
    /// services whose endpoint sets changed. The caller wakes those streams.
    pub fn take_wake(&mut self) -> Wake {
        let copies_of = self.registry.take_touched();
        if std::mem::take(&mut self.wake_everyone) {
            Wake::Everyone
        } else {
            if !self.callers.is_of(&self.mesh) {
                self.callers = wake::Callers::of(&self.mesh);
            }
            Wake::Services(self.callers.concerned(&copies_of))
        }
    }

    /// The mesh file, the CA or the tokens changed: every stream is concerned, every cached
    /// snapshot part is checked again, every stream authorizes its token again.
    fn everyone(&mut self) {
        self.wake_everyone = true;
        self.config_stamp += 1;
        self.token_index = TokenIndex::of(&self.store.state().tokens);
        self.regate();
    }

    /// What a stream's authorization holds under: it must authorize again once this moves.
    pub fn config_stamp(&self) -> u64 {
        self.config_stamp
    }

    /// Whether replicas share the state through etcd (`--store etcd://…`).
    pub fn shared(&self) -> bool {
        self.mode.is_shared()
    }

    /// The version of the mesh file in force.
    pub fn config_version(&self) -> u64 {
        self.store.state().mesh.as_ref().map_or(0, |m| m.version)
    }

    pub fn mesh(&self) -> &Arc<Mesh> {
        &self.mesh
    }

    /// The mesh file in force, as text.
    pub fn mesh_text(&self) -> &str {
        self.store
            .state()
            .mesh
            .as_ref()
            .map_or("", |m| m.text.as_str())
    }

    pub fn ca(&self) -> &Arc<Ca> {
        &self.ca
    }

    /// The signing root's generation: 1 for the first, +1 per rotation's `reissue`.
    pub fn ca_generation(&self) -> u64 {
        self.ca_generation
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The lifetime of issued certificates (`--cert-lifetime`), the control port's too.
    pub fn cert_lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The admin token (empty only in a state no start has written: nobody is admin then).
    pub fn admin_token(&self) -> &str {
        self.store
            .state()
            .admin_token
            .as_ref()
            .map_or("", |t| t.0.as_str())
    }

    /// The join token of `service`, if it has one.
    pub fn token(&self, service: &str) -> Option<&str> {
        self.store.state().tokens.get(service).map(|t| t.0.as_str())
    }

    /// The registry (read-only; changes go through the plane so versions follow).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod rotation_tests;

#[cfg(test)]
mod prune_tests;

#[cfg(test)]
mod snapshot_tests;
