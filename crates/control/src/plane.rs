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

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hopwise_analyze::{Finding, Options as CheckOptions, Report, Severity};
use hopwise_model::{Diagnostics, Mesh};

use crate::ca::{self, Ca, CaError, IssueError, Issued, Place};
use crate::pb;
use crate::registry::{LeaseId, Registry, RegistryError};
use crate::store::etcd::{AckValue, Change, Effect, Key, ProxyValue};
use crate::store::{self, CaState, MeshState, Rotation, Secret, State, Store, StoreError};
use crate::token::{self, RandomError};

mod admin;
pub mod delta;
pub mod proxies;
pub mod wake;
pub use admin::admin_addr;
pub use wake::Wake;

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

/// With a shared store, etcd expires the leases; the registry's own clock never does.
const SHARED_LEASE_HORIZON: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// An etcd revision as a version.
fn revision(r: i64) -> u64 {
    u64::try_from(r).unwrap_or(0)
}

/// A copy seen in the shared store, into the registry (its lease expires in etcd, not here).
fn put_copy(registry: &mut Registry, effect: Effect, far: Instant) {
    if let Effect::CopyPut {
        service,
        lease,
        value,
    } = effect
    {
        registry.put(
            LeaseId(lease),
            &service,
            value.addr,
            value.healthy,
            value.ttl(),
            far,
        );
        if let Some(admin) = value.admin {
            let _ = registry.set_admin(LeaseId(lease), admin);
        }
    }
}

/// What a batch of changes seen on the shared store did to this replica.
#[derive(Debug, Default)]
pub struct Followed {
    /// Something proxies may be sent changed: wake the streams it concerns
    /// ([`Plane::take_wake`]).
    pub publish: bool,
    /// Tokens changed: write the token files.
    pub tokens: bool,
    /// The trust bundle changed: write `ca.pem`.
    pub bundle: bool,
    /// Records that could not be read (kept as before), for the log.
    pub problems: Vec<String>,
}

/// Shared store: the records of proxies this replica is to write, attached to its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyWrites {
    pub lease: u64,
    /// Keys and values.
    pub puts: Vec<(String, Vec<u8>)>,
    /// Keys of records to delete (proxies whose records were pruned).
    pub deletes: Vec<String>,
}

/// A mesh file given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// Its name, for diagnostics.
    pub name: String,
    pub text: String,
}

/// The operator's own CA, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// The mesh file: required on the first start; later the stored one is used (see
    /// [`Started::notes`]).
    pub config: Option<ConfigFile>,
    /// The operator's CA; without it a root is generated on the first start.
    pub ca_files: Option<CaFiles>,
    /// Lifetime of issued certificates.
    pub cert_lifetime: Duration,
}

impl Options {
    /// A first start on the mesh file `text` (named `name`), with a generated CA and
    /// certificates of `cert_lifetime`.
    pub fn first(name: &str, text: &str, cert_lifetime: Duration) -> Options {
        Options {
            config: Some(ConfigFile {
                name: name.to_owned(),
                text: text.to_owned(),
            }),
            ca_files: None,
            cert_lifetime,
        }
    }
}

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
    #[error("{name}: `hopwise check` finds {} error(s); the control plane did not start", .findings.iter().filter(|f| f.severity == "error").count())]
    Refused {
        name: String,
        findings: Vec<pb::Finding>,
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
}

/// What `start` has to say besides the plane itself.
#[derive(Debug)]
pub struct Started {
    pub plane: Plane,
    /// Things the operator should know (e.g. `--config` differs from the stored mesh file).
    pub notes: Vec<String>,
    /// The token files written.
    pub token_files: Vec<PathBuf>,
    /// `<state>/ca.pem`.
    pub bundle_file: PathBuf,
    /// `<state>/admin-token`.
    pub admin_token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Default)]
struct ProxyRecord {
    streams: usize,
    last_sent: u64,
    ack: Option<AckRecord>,
    cert_not_after: Option<SystemTime>,
    /// The CA generation of the last certificate issued to it.
    cert_issued: Option<u64>,
    /// The CA generation of the certificate it says it presents (from its acknowledgements,
    /// sent once a new certificate is in use).
    cert_in_force: Option<u64>,
    /// The highest version it acknowledged with the snapshot's trust bundle in force.
    bundle_confirmed: u64,
    /// Its admin endpoint (`SubscribeRequest.admin_addr`), for the dashboard.
    admin: Option<SocketAddr>,
}

impl ProxyRecord {
    /// What this replica knows of the proxy, as replicas share it (`replica`: this one's name).
    fn facts(&self, replica: &str) -> ProxyValue {
        ProxyValue {
            replica: replica.to_owned(),
            connected: self.streams > 0,
            last_sent: self.last_sent,
            ack: self.ack.as_ref().map(|a| AckValue {
                version: a.version,
                accepted: a.accepted,
                reason: a.reason.clone(),
                at_unix_ms: unix_ms(a.at),
            }),
            cert_not_after_unix: self.cert_not_after.map(ca::unix_seconds),
            cert_issued: self.cert_issued,
            cert_in_force: self.cert_in_force,
            bundle_confirmed: self.bundle_confirmed,
            admin: self.admin,
        }
    }
}

/// A stage of a CA rotation (`hopwise control rotate-ca --stage …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotateStage {
    /// A new root is generated and trusted after the old one; the old one still signs.
    Add,
    /// The new root signs; every proxy renews at once.
    Reissue,
    /// The old root leaves the trust bundle.
    Retire,
}

impl RotateStage {
    pub fn name(self) -> &'static str {
        match self {
            RotateStage::Add => "add",
            RotateStage::Reissue => "reissue",
            RotateStage::Retire => "retire",
        }
    }

    pub fn parse(text: &str) -> Result<RotateStage, ApiError> {
        match text {
            "add" => Ok(RotateStage::Add),
            "reissue" => Ok(RotateStage::Reissue),
            "retire" => Ok(RotateStage::Retire),
            other => Err(ApiError::BadStage(other.to_owned())),
        }
    }
}

/// The name of a rotation's stage in the API (`""`: none in progress).
fn rotation_name(r: Option<&Rotation>) -> &'static str {
    match r {
        None => "",
        Some(Rotation::Added { .. }) => "added",
        Some(Rotation::Reissued { .. }) => "reissued",
    }
}

#[derive(Debug, Clone)]
struct AckRecord {
    version: u64,
    accepted: bool,
    reason: String,
    at: SystemTime,
}

#[derive(Debug, Clone, Copy, Default)]
struct IssuedRecord {
    count: u64,
    not_after: Option<SystemTime>,
}

/// What a caller needs to sign a certificate outside the plane's lock.
#[derive(Debug, Clone)]
pub struct IssueTicket {
    pub service: String,
    pub identity: String,
    pub ca: Arc<Ca>,
    /// The generation of `ca`'s signing root.
    pub generation: u64,
    pub lifetime: Duration,
}

/// A mesh file read and checked, ready to [`Plane::commit`]. Reading and checking take the
/// time; they need no lock.
#[derive(Debug)]
pub struct Prepared {
    text: String,
    file_name: String,
    result: Result<(Mesh, Report), Diagnostics>,
}

/// Reads and `hopwise check`s a mesh file, as `Apply` does before anything changes.
pub fn prepare(text: &str, file_name: &str) -> Prepared {
    let file_name = if file_name.is_empty() {
        "<applied>"
    } else {
        file_name
    };
    let result = Mesh::from_yaml(text).map(|mesh| {
        let report = hopwise_analyze::check(&mesh, &CheckOptions::default());
        (mesh, report)
    });
    Prepared {
        text: text.to_owned(),
        file_name: file_name.to_owned(),
        result,
    }
}

/// A finding as the API sends it.
pub fn finding(f: &Finding) -> pb::Finding {
    pb::Finding {
        code: f.code.to_owned(),
        severity: f.severity.label().to_owned(),
        subject: f.subject.clone(),
        path: f.path.clone(),
        message: f.message.clone(),
        fix: f.fix.clone(),
    }
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
    /// Shared store: the proxies whose record this replica has yet to write.
    proxies_dirty: BTreeSet<(String, String)>,
    /// Since when each proxy has had no stream open (as [`Plane::prune_proxies`] saw it).
    proxies_idle: BTreeMap<(String, String), Instant>,
    /// Shared store: pruned proxies whose record this replica has yet to delete.
    proxies_pruned: BTreeSet<(String, String)>,
}

fn read(path: &Path) -> Result<String, StartError> {
    std::fs::read_to_string(path).map_err(|source| StartError::Read {
        path: path.to_owned(),
        source,
    })
}

fn load_ca(
    stored: Option<&CaState>,
    files: Option<&CaFiles>,
    mesh_name: &str,
    dir: &str,
    now: SystemTime,
) -> Result<(Ca, CaState, Option<String>), StartError> {
    let supplied = |f: &CaFiles| -> Result<(Ca, String), StartError> {
        let cert = read(&f.cert)?;
        let key = read(&f.key)?;
        let what = format!("{} and {}", f.cert.display(), f.key.display());
        let ca = Ca::from_pem(&cert, &key, &what, now)?;
        Ok((ca, cert))
    };
    match (stored, files) {
        (None, None) => {
            let (ca, root) = Ca::generate(mesh_name, now)?;
            let state = CaState::Generated {
                cert_pem: root.cert_pem,
                key_pem: Secret(root.key_pem),
            };
            Ok((ca, state, Some("generated a new CA (ECDSA P-256)".into())))
        }
        (None, Some(f)) => {
            let (ca, cert_pem) = supplied(f)?;
            let state = CaState::Supplied {
                cert_path: f.cert.clone(),
                key_path: f.key.clone(),
                cert_pem,
            };
            Ok((ca, state, None))
        }
        (Some(state @ CaState::Generated { cert_pem, key_pem }), None) => {
            let what = format!("the CA stored in {dir}");
            let ca = Ca::from_pem(cert_pem, &key_pem.0, &what, now)?;
            Ok((ca, state.clone(), None))
        }
        (Some(CaState::Generated { .. }), Some(f)) => Err(StartError::CaConflict(format!(
            "{} already holds a CA that the control plane generated; it cannot switch to {} \
             (a CA rotation is done on the running control plane: `hopwise control rotate-ca`): \
             drop --ca-cert/--ca-key, or start on a new state directory",
            dir,
            f.cert.display()
        ))),
        (
            Some(CaState::Supplied {
                cert_path,
                key_path,
                cert_pem,
            }),
            f,
        ) => {
            let f = f.cloned().unwrap_or(CaFiles {
                cert: cert_path.clone(),
                key: key_path.clone(),
            });
            let (ca, cert) = supplied(&f)?;
            if !ca::same_certificate(&cert, cert_pem) {
                return Err(StartError::CaConflict(format!(
                    "{} holds a different CA certificate than the one {} was started with \
                     (a CA rotation is done on the running control plane: `hopwise control \
                     rotate-ca`)",
                    f.cert.display(),
                    dir
                )));
            }
            let state = CaState::Supplied {
                cert_path: f.cert.clone(),
                key_path: f.key.clone(),
                cert_pem: cert,
            };
            Ok((ca, state, None))
        }
    }
}

/// The CA of `state` (stored, or the operator's files, or generated when there is none), with
/// the other root trusted while a rotation is in progress.
fn ca_of(
    state: &State,
    files: Option<&CaFiles>,
    mesh_name: &str,
    place: &str,
    now: SystemTime,
) -> Result<(Ca, CaState, Option<String>), StartError> {
    let (ca, ca_state, note) = load_ca(state.ca.as_ref(), files, mesh_name, place, now)?;
    let ca = match &state.rotation {
        None => ca,
        Some(Rotation::Added { next_cert_pem, .. }) => ca.trusting(
            next_cert_pem,
            Place::After,
            &format!("the new root stored in {place}"),
        )?,
        Some(Rotation::Reissued {
            previous_cert_pem, ..
        }) => ca.trusting(
            previous_cert_pem,
            Place::Before,
            &format!("the old root stored in {place}"),
        )?,
    };
    Ok((ca, ca_state, note))
}

impl Plane {
    /// Starts on `store`: counts the start, loads or creates the CA, takes the mesh file (the
    /// stored one if there is one, else `opts.config`, which must pass `hopwise check`), makes
    /// a join token for every service that runs a proxy, and writes the state, the token files
    /// and the trust bundle.
    pub fn start(mut store: Store, opts: Options, now: SystemTime) -> Result<Started, StartError> {
        if opts.cert_lifetime < Duration::from_secs(1) {
            return Err(StartError::Lifetime(opts.cert_lifetime));
        }
        let dir = store.location();
        let mut next: State = store.state().clone();
        let mut notes = Vec::new();
        next.starts += 1;
        // An older layout is written back in the current one.
        next.format = store::FORMAT;

        // The mesh file.
        let mesh = match (&next.mesh, &opts.config) {
            (None, None) => return Err(StartError::NoConfig { location: dir }),
            (None, Some(config)) => {
                let prepared = prepare(&config.text, &config.name);
                let (mesh, report) = match prepared.result {
                    Ok(ok) => ok,
                    Err(diags) => {
                        return Err(StartError::InvalidConfig {
                            name: config.name.clone(),
                            rendered: diags.render(&config.name),
                            count: diags.0.len(),
                        });
                    }
                };
                if report.has_errors() {
                    return Err(StartError::Refused {
                        name: config.name.clone(),
                        findings: report.findings.iter().map(finding).collect(),
                    });
                }
                next.mesh = Some(MeshState {
                    text: config.text.clone(),
                    version: 1,
                    source: config.name.clone(),
                    applied_unix_ms: unix_ms(now),
                });
                mesh
            }
            (Some(stored), given) => {
                let mesh = Mesh::from_yaml(&stored.text).map_err(|d| StartError::StoredConfig {
                    location: store.location(),
                    rendered: d.render(&stored.source),
                })?;
                if let Some(given) = given
                    && given.text != stored.text
                {
                    notes.push(format!(
                        "{} differs from the mesh file in force (version {}, from {}); it was \
                         NOT applied: send it with `hopwise control apply {} --server ADDR --state DIR`",
                        given.name, stored.version, stored.source, given.name
                    ));
                }
                mesh
            }
        };

        // The CA (a rotation in progress: the other root is trusted too).
        let (ca, ca_state, note) = ca_of(&next, opts.ca_files.as_ref(), &mesh.name, &dir, now)?;
        next.ca = Some(ca_state);
        notes.extend(note);
        if let Some(r) = &next.rotation {
            notes.push(format!(
                "a CA rotation is in progress (stage {} done); continue it with `hopwise control \
                 rotate-ca --stage {} --server ADDR --state DIR`",
                rotation_name(Some(r)),
                match r {
                    Rotation::Added { .. } => "reissue",
                    Rotation::Reissued { .. } => "retire",
                }
            ));
        }

        // A token for every service that runs a proxy, and the admin token.
        add_tokens(&mut next, &mesh)?;
        if next.admin_token.is_none() {
            next.admin_token = Some(Secret(token::new_admin_token()?));
        }

        let written = store.commit(next)?;
        let token_files = store.write_tokens()?;
        let admin_token_file = store.write_admin_token()?;
        let bundle_file = store.write_bundle(&ca.trust_bundle_pem())?;
        let ca_generation = store.state().ca_generation;
        // Embedded: versions are (start count, changes since). Shared: the etcd revision, the
        // same for every replica and growing across etcd's restarts.
        let (epoch, changes) = match store.etcd() {
            None => (store.state().starts, 0),
            Some(e) => (0, written.unwrap_or(0).max(revision(e.view().revision()))),
        };
        let mut registry = Registry::starting_after(epoch << 32);
        let mut remote = proxies::Remote::default();
        if let Some(e) = store.etcd_mut() {
            let far = Instant::now() + SHARED_LEASE_HORIZON;
            for effect in e.take_initial_copies() {
                remote.learn(None, &effect);
                put_copy(&mut registry, effect, far);
            }
        }
        let mut plane = Plane {
            store,
            ca: Arc::new(ca),
            ca_generation,
            bundle_version: 0,
            started_at: now,
            mesh: Arc::new(mesh),
            lifetime: opts.cert_lifetime,
            registry,
            epoch,
            changes,
            proxies: BTreeMap::new(),
            issued: BTreeMap::new(),
            mesh_text_in_force: String::new(),
            tokens_seen: BTreeMap::new(),
            wake_everyone: false,
            replica: String::new(),
            replica_lease: None,
            remote,
            proxies_dirty: BTreeSet::new(),
            proxies_idle: BTreeMap::new(),
            proxies_pruned: BTreeSet::new(),
        };
        plane.mesh_text_in_force = plane.mesh_text().to_owned();
        plane.tokens_seen = plane.store.state().tokens.clone();
        // Every proxy confirms the bundle again after a restart; with a shared store, the
        // other replicas' proxies may have confirmed it already, from the CA's revision on.
        plane.bundle_version = plane.ca_revision().unwrap_or(plane.version());
        Ok(Started {
            plane,
            notes,
            token_files,
            bundle_file,
            admin_token_file,
        })
    }

    /// The version proxies are sent now.
    pub fn version(&self) -> u64 {
        (self.epoch << 32) | self.changes
    }

    /// A change proxies may see: the next version (embedded), or the etcd revision it was
    /// written at (shared; versions never go back).
    fn bump(&mut self, written: Option<u64>) {
        match written {
            Some(rev) if self.store.etcd().is_some() => self.changes = self.changes.max(rev),
            _ if self.store.etcd().is_some() => {}
            _ => self.changes += 1,
        }
    }

    /// Whose snapshot streams the changes since the last call concern: every stream after a
    /// change of the mesh file, the trust bundle or the CA generation; else the callers of the
    /// services whose endpoint sets changed. The caller wakes those streams.
    pub fn take_wake(&mut self) -> Wake {
        let copies_of = self.registry.take_touched();
        if std::mem::take(&mut self.wake_everyone) {
            Wake::Everyone
        } else {
            Wake::Services(wake::concerned(&self.mesh, &copies_of))
        }
    }

    /// Whether replicas share the state through etcd (`--store etcd://…`).
    pub fn shared(&self) -> bool {
        self.store.etcd().is_some()
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

    fn token_service(&self, token: &str) -> Result<String, ApiError> {
        token::service_of(&self.store.state().tokens, token)
            .map(str::to_owned)
            .ok_or(ApiError::UnknownToken)
    }

    /// The service a token names, which must be a service of the mesh in force that runs a
    /// proxy.
    fn proxied_service(&self, token: &str) -> Result<String, ApiError> {
        let service = self.token_service(token)?;
        match self.mesh.services.get(&service) {
            None => Err(ApiError::UnknownService(service)),
            Some(s) if s.external.is_some() => Err(ApiError::External(service)),
            Some(_) => Ok(service),
        }
    }

    /// Checks a token for issuance and returns what signing needs.
    pub fn issue_ticket(&self, token: &str) -> Result<IssueTicket, IssueError> {
        let service = self.proxied_service(token).map_err(|e| match e {
            ApiError::UnknownService(s) => IssueError::UnknownService(s),
            ApiError::External(s) => IssueError::External(s),
            _ => IssueError::UnknownToken,
        })?;
        Ok(IssueTicket {
            identity: self.mesh.identity(&service),
            service,
            ca: self.ca.clone(),
            generation: self.ca_generation,
            lifetime: self.lifetime,
        })
    }

    /// Remembers a certificate issued (signed under CA `generation`), for `Status` and for
    /// `rotate-ca --stage retire`.
    pub fn record_issued(
        &mut self,
        service: &str,
        proxy: &str,
        not_after: SystemTime,
        generation: u64,
    ) {
        let rec = self.issued.entry(service.to_owned()).or_default();
        rec.count += 1;
        rec.not_after = Some(not_after);
        if !proxy.is_empty() {
            let p = self
                .proxies
                .entry((service.to_owned(), proxy.to_owned()))
                .or_default();
            p.cert_not_after = Some(not_after);
            p.cert_issued = Some(generation);
            self.share(service, proxy);
        }
    }

    /// Issuance in one step (token, CSR, signature, record), for callers without a lock to
    /// avoid.
    pub fn issue(
        &mut self,
        token: &str,
        csr_pem: &str,
        proxy: &str,
        now: SystemTime,
    ) -> Result<Issued, IssueError> {
        let ticket = self.issue_ticket(token)?;
        let issued = ticket
            .ca
            .issue(csr_pem, &ticket.identity, ticket.lifetime, now)?;
        self.record_issued(&ticket.service, proxy, issued.not_after, ticket.generation);
        Ok(issued)
    }

    fn registry_changed(&mut self, before: u64) -> bool {
        if self.registry.version() != before {
            self.bump(None);
            true
        } else {
            false
        }
    }

    fn lease_of(&self, token: &str, lease: u64) -> Result<LeaseId, ApiError> {
        let service = self.token_service(token)?;
        let id = LeaseId(lease);
        match self.registry.copy(id) {
            None => Err(ApiError::UnknownLease(lease)),
            Some(c) if c.service != service => Err(ApiError::NotYourLease(lease)),
            Some(_) => Ok(id),
        }
    }

    fn registry_error(e: RegistryError) -> ApiError {
        match e {
            RegistryError::UnknownLease(id) => ApiError::UnknownLease(id.0),
            RegistryError::TtlTooShort(ttl) => ApiError::Ttl(ttl),
        }
    }

    /// Registers a copy of the token's service. Returns the lease, its TTL, and whether the
    /// endpoint sets changed (a healthy copy at the same address was replaced).
    pub fn register(
        &mut self,
        token: &str,
        inbound: &str,
        ttl_ms: u64,
        now: Instant,
    ) -> Result<(LeaseId, Duration, bool), ApiError> {
        let (service, addr, ttl) = self.lease_terms(token, inbound, ttl_ms)?;
        let before = self.registry.version();
        let id = self
            .registry
            .register(&service, addr, ttl, now)
            .map_err(Self::registry_error)?;
        Ok((id, ttl, self.registry_changed(before)))
    }

    /// Records where a copy's admin endpoint is (`RegisterRequest.admin_addr`, read by
    /// [`admin_addr`]): the dashboard reads its `/metrics` there.
    pub fn set_admin(&mut self, lease: LeaseId, admin: SocketAddr) -> Result<(), ApiError> {
        self.registry
            .set_admin(lease, admin)
            .map_err(Self::registry_error)
    }

    /// Renews a lease. Renewing changes no endpoint set.
    pub fn renew(&mut self, token: &str, lease: u64, now: Instant) -> Result<bool, ApiError> {
        self.expire(now);
        let id = self.lease_of(token, lease)?;
        let before = self.registry.version();
        self.registry.renew(id, now).map_err(Self::registry_error)?;
        Ok(self.registry_changed(before))
    }

    /// Records a copy's health. Returns whether the endpoint sets changed.
    pub fn set_health(
        &mut self,
        token: &str,
        lease: u64,
        healthy: bool,
        now: Instant,
    ) -> Result<bool, ApiError> {
        let expired = self.expire(now);
        let id = self.lease_of(token, lease)?;
        let before = self.registry.version();
        self.registry
            .set_health(id, healthy, now)
            .map_err(Self::registry_error)?;
        Ok(self.registry_changed(before) || expired)
    }

    /// Removes a copy at once. Returns whether the endpoint sets changed.
    pub fn deregister(&mut self, token: &str, lease: u64) -> Result<bool, ApiError> {
        let id = self.lease_of(token, lease)?;
        let before = self.registry.version();
        self.registry.deregister(id);
        Ok(self.registry_changed(before))
    }

    /// Drops the leases expired by `now`. Returns whether the endpoint sets changed.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = self.registry.version();
        self.registry.expire(now);
        self.registry_changed(before)
    }

    /// When the next lease expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.registry.next_expiry()
    }

    /// The service a subscriber may watch: the token's, which must be `asked` when `asked` is
    /// given.
    pub fn authorize(&self, token: &str, asked: &str) -> Result<String, ApiError> {
        let service = self.token_service(token)?;
        if !asked.is_empty() && asked != service {
            return Err(ApiError::WrongService {
                token_for: service,
                asked: asked.to_owned(),
            });
        }
        Ok(service)
    }

    /// Everything `service`'s proxies need, at the current version, whole.
    pub fn snapshot(&self, service: &str, now: Instant) -> Result<pb::Snapshot, ApiError> {
        let s = self
            .mesh
            .services
            .get(service)
            .ok_or_else(|| ApiError::UnknownService(service.to_owned()))?;
        if s.external.is_some() {
            return Err(ApiError::External(service.to_owned()));
        }
        // The only part that comes from the registry: what `wake::concerned` follows.
        let upstreams: Vec<pb::Upstream> = wake::upstreams(&self.mesh, s)
            .into_iter()
            .map(|to| {
                let mut endpoints: Vec<String> = self
                    .registry
                    .endpoints(to, now)
                    .iter()
                    .map(SocketAddr::to_string)
                    .collect();
                // Sorted as text, the order a delta's receiver rebuilds (delta.rs), and once
                // each: a delta carries a set, and two leases on one address (a stale etcd
                // lease not yet revoked) are one endpoint to route to.
                endpoints.sort_unstable();
                endpoints.dedup();
                pb::Upstream {
                    service: to.to_owned(),
                    identity: self.mesh.identity(to),
                    endpoints,
                    removed_endpoints: Vec::new(),
                }
            })
            .collect();
        let mut allowed_callers: Vec<String> = self
            .mesh
            .calls()
            .filter(|c| c.to == service)
            .map(|c| self.mesh.identity(&c.from))
            .collect();
        allowed_callers.sort();
        allowed_callers.dedup();
        Ok(pb::Snapshot {
            version: self.version(),
            config_version: self.config_version(),
            service: service.to_owned(),
            identity: self.mesh.identity(service),
            mesh_yaml: Some(self.mesh_text().to_owned()),
            policy_json: Some(serde_json::to_string(s).unwrap_or_default()),
            upstreams,
            trust_bundle_pem: Some(self.ca.trust_bundle_pem()),
            allowed_callers,
            ca_generation: self.ca_generation,
            ..Default::default()
        })
    }

    /// Refuses a proxy name that `service` has not used yet once it has used
    /// [`MAX_PROXY_NAMES_PER_SERVICE`] (records a join-token holder could otherwise grow
    /// without end).
    pub fn admit_proxy(&self, service: &str, proxy: &str) -> Result<(), ApiError> {
        let key = (service.to_owned(), proxy.to_owned());
        if self.proxies.contains_key(&key) {
            return Ok(());
        }
        let names = self
            .proxies
            .range((service.to_owned(), String::new())..)
            .take_while(|((s, _), _)| s == service)
            .count();
        if names >= MAX_PROXY_NAMES_PER_SERVICE {
            return Err(ApiError::TooManyProxies {
                service: service.to_owned(),
                cap: MAX_PROXY_NAMES_PER_SERVICE,
            });
        }
        Ok(())
    }

    fn proxy(&mut self, service: &str, proxy: &str) -> &mut ProxyRecord {
        self.proxies
            .entry((service.to_owned(), proxy.to_owned()))
            .or_default()
    }

    /// A subscriber's stream opened.
    pub fn stream_opened(&mut self, service: &str, proxy: &str) {
        let p = self.proxy(service, proxy);
        p.streams += 1;
        if p.streams == 1 {
            self.share(service, proxy);
        }
    }

    /// Where a subscribed proxy's admin endpoint is (checked by [`admin_addr`]).
    pub fn set_proxy_admin(&mut self, service: &str, proxy: &str, addr: SocketAddr) {
        let p = self.proxy(service, proxy);
        if p.admin.replace(addr) != Some(addr) {
            self.share(service, proxy);
        }
    }

    /// The proxies whose snapshot stream is open and that said where their admin endpoint is:
    /// (service, proxy name, admin address). The dashboard reads their metrics.
    pub fn subscribed_admins(&self) -> Vec<(String, String, SocketAddr)> {
        self.proxies
            .iter()
            .filter(|(_, p)| p.streams > 0)
            .filter_map(|((service, proxy), p)| Some((service.clone(), proxy.clone(), p.admin?)))
            .collect()
    }

    /// A subscriber's stream closed.
    pub fn stream_closed(&mut self, service: &str, proxy: &str) {
        let p = self.proxy(service, proxy);
        p.streams = p.streams.saturating_sub(1);
        if p.streams == 0 {
            self.share(service, proxy);
        }
    }

    /// A snapshot was sent to a subscriber.
    pub fn record_sent(&mut self, service: &str, proxy: &str, version: u64) {
        self.proxy(service, proxy).last_sent = version;
    }

    /// A proxy accepted or rejected a version.
    #[allow(clippy::too_many_arguments)]
    pub fn ack(
        &mut self,
        token: &str,
        service: &str,
        proxy: &str,
        version: u64,
        accepted: bool,
        reason: &str,
        now: SystemTime,
    ) -> Result<(), ApiError> {
        self.ack_request(
            &pb::AckRequest {
                service: service.to_owned(),
                version,
                accepted,
                reason: reason.to_owned(),
                token: token.to_owned(),
                proxy: proxy.to_owned(),
                cert_ca_generation: 0,
                trust_bundle_applied: false,
            },
            now,
        )
    }

    /// A proxy accepted or rejected a version, and said which CA generation its certificate is
    /// from and whether the snapshot's trust bundle is in force.
    pub fn ack_request(&mut self, r: &pb::AckRequest, now: SystemTime) -> Result<(), ApiError> {
        let service = self.authorize(&r.token, &r.service)?;
        self.admit_proxy(&service, &r.proxy)?;
        let p = self.proxy(&service, &r.proxy);
        p.ack = Some(AckRecord {
            version: r.version,
            accepted: r.accepted,
            reason: r.reason.clone(),
            at: now,
        });
        if r.cert_ca_generation > 0 {
            p.cert_in_force = Some(r.cert_ca_generation);
        }
        if r.trust_bundle_applied {
            p.bundle_confirmed = p.bundle_confirmed.max(r.version);
        }
        // Every acknowledgement: `Status` on the other replicas shows its version and time.
        // The writer coalesces (the latest facts of each proxy, at most every 100 ms).
        self.share(&service, &r.proxy);
        Ok(())
    }

    /// Shared store: the revision at which the CA last changed. Snapshots from that version on,
    /// sent by any replica, carry its trust bundle: every replica's view is in revision order,
    /// and versions are the revision it is at. (Not the revision this replica's view reached
    /// when it took the change in: that may be later than any version the others' proxies
    /// were sent, and `reissue` would wait for a snapshot nobody sends.)
    fn ca_revision(&self) -> Option<u64> {
        let view = self.store.etcd()?.view();
        Some(revision(view.modified(&Key::Ca))).filter(|r| *r > 0)
    }

    /// This replica's name in `Status` (its listen address).
    pub fn set_replica(&mut self, name: &str) {
        self.replica = name.to_owned();
    }

    /// Shared store: the etcd lease this replica's records of proxies are attached to, newly
    /// granted (every record is written again: a lost lease took them with it), or lost.
    pub fn set_replica_lease(&mut self, lease: Option<u64>) {
        self.replica_lease = lease;
        if lease.is_some() {
            self.reshare_proxies();
        }
    }

    /// Shared store: every record of a proxy is to be written again (a write failed).
    pub fn reshare_proxies(&mut self) {
        if self.shared() {
            self.proxies_dirty = self.proxies.keys().cloned().collect();
        }
    }

    /// Shared store: what changed about `proxy` is to be written.
    fn share(&mut self, service: &str, proxy: &str) {
        if self.shared() {
            self.proxies_dirty
                .insert((service.to_owned(), proxy.to_owned()));
        }
    }

    /// Drops the records of proxies that have had no stream open for [`PROXY_RECORD_TTL`] and
    /// hold no certificate valid at `wall` (a proxy that may still be serving is kept: CA
    /// rotation waits for it). Returns how many were dropped. Call it now and then (the
    /// server does, every second).
    pub fn prune_proxies(&mut self, now: Instant, wall: SystemTime) -> usize {
        let mut gone = Vec::new();
        for (key, p) in &self.proxies {
            if p.streams > 0 {
                self.proxies_idle.remove(key);
                continue;
            }
            let since = *self.proxies_idle.entry(key.clone()).or_insert(now);
            let valid = p.cert_not_after.is_some_and(|t| t > wall);
            if now.saturating_duration_since(since) >= PROXY_RECORD_TTL && !valid {
                gone.push(key.clone());
            }
        }
        for key in &gone {
            self.proxies.remove(key);
            self.proxies_idle.remove(key);
            self.proxies_dirty.remove(key);
            if self.shared() {
                self.proxies_pruned.insert(key.clone());
            }
        }
        gone.len()
    }

    /// Shared store: the records of proxies to write now — keys and values, attached to the
    /// lease returned — each proxy's latest facts once. Empty without a lease (they wait).
    pub fn take_proxy_writes(&mut self) -> Option<ProxyWrites> {
        let lease = self.replica_lease?;
        let layout = self.store.etcd()?.view().layout().clone();
        let dirty = std::mem::take(&mut self.proxies_dirty);
        let puts = dirty
            .into_iter()
            .filter_map(|key| {
                let facts = self.proxies.get(&key)?.facts(&self.replica);
                let (service, proxy) = key;
                let key = layout.key(&Key::Proxy {
                    service,
                    proxy,
                    lease,
                });
                Some((key, facts.encode()))
            })
            .collect();
        let deletes = std::mem::take(&mut self.proxies_pruned)
            .into_iter()
            .map(|(service, proxy)| {
                layout.key(&Key::Proxy {
                    service,
                    proxy,
                    lease,
                })
            })
            .collect();
        Some(ProxyWrites {
            lease,
            puts,
            deletes,
        })
    }

    /// A record of a proxy seen on the shared store ([`proxies::Remote::learn`]).
    fn learn_proxy(&mut self, effect: &Effect) {
        self.remote.learn(self.replica_lease, effect);
    }

    /// Every proxy known to this replica or, through the shared store, to another one, with
    /// their facts merged.
    fn all_proxies(&self) -> BTreeMap<(String, String), ProxyValue> {
        let local = self
            .proxies
            .iter()
            .map(|(k, p)| (k.clone(), p.facts(&self.replica)))
            .collect();
        self.remote.merged(local)
    }

    /// The rotation in progress, if any.
    pub fn rotation(&self) -> Option<&Rotation> {
        self.store.state().rotation.as_ref()
    }

    /// The proxies that may still be serving and are not ready for `stage`, with the reason:
    /// every proxy of the mesh, whichever replica it is connected to.
    fn not_ready(&self, stage: RotateStage, now: SystemTime) -> Vec<pb::PendingProxy> {
        let now_unix = ca::unix_seconds(now);
        let mut pending = Vec::new();
        for ((service, proxy), p) in self.all_proxies() {
            // A service that left the mesh file has no snapshots, certificates or copies.
            let in_mesh = self
                .mesh
                .services
                .get(&service)
                .is_some_and(|s| s.external.is_none());
            if !in_mesh || !proxies::live(&p, now_unix) {
                continue;
            }
            if let Some(reason) =
                proxies::not_ready(&p, stage, self.ca_generation, self.bundle_version)
            {
                pending.push(pb::PendingProxy {
                    service,
                    proxy,
                    connected: p.connected,
                    reason,
                    replica: p.replica,
                });
            }
        }
        pending
    }

    fn rotate_response(
        &self,
        done: bool,
        unchanged: bool,
        message: String,
    ) -> pb::RotateCaResponse {
        pb::RotateCaResponse {
            done,
            unchanged,
            rotation: rotation_name(self.rotation()).to_owned(),
            ca_generation: self.ca_generation,
            version: self.version(),
            trust_bundle: self.ca.root_names(),
            pending: Vec::new(),
            message,
            retry: false,
        }
    }

    /// One stage of a CA rotation. Refused (`done: false`, nothing changes) when the stage does
    /// not follow the one done last, or — unless `force` — when a proxy that may be serving is
    /// not ready: `reissue` waits until every proxy has confirmed the bundle with the new root,
    /// `retire` until every proxy's certificate is from the new root. `Err` only when the state
    /// could not be saved or the CA could not be made (then nothing changed either).
    pub fn rotate_ca(
        &mut self,
        stage: RotateStage,
        force: bool,
        now: SystemTime,
    ) -> Result<pb::RotateCaResponse, ApiError> {
        let refused = |plane: &Plane, message: &str| {
            Ok(plane.rotate_response(false, false, message.to_owned()))
        };
        let unchanged = |plane: &Plane, message: &str| {
            Ok(plane.rotate_response(true, true, message.to_owned()))
        };
        match (stage, self.rotation()) {
            (RotateStage::Add, Some(Rotation::Added { .. })) => {
                return unchanged(
                    self,
                    "the new root is already in the trust bundle; next: reissue",
                );
            }
            (RotateStage::Add, Some(Rotation::Reissued { .. })) => {
                return refused(
                    self,
                    "a rotation is in progress (reissue done): retire the old root before adding another",
                );
            }
            (RotateStage::Reissue, None) => {
                return refused(self, "no rotation in progress: add a new root first");
            }
            (RotateStage::Reissue, Some(Rotation::Reissued { .. })) => {
                return unchanged(self, "the new root already signs; next: retire");
            }
            (RotateStage::Retire, None) => {
                return refused(
                    self,
                    "no rotation in progress: the trust bundle holds one root, nothing to retire",
                );
            }
            (RotateStage::Retire, Some(Rotation::Added { .. })) => {
                return refused(
                    self,
                    "the new root does not sign yet: reissue before retiring the old root",
                );
            }
            _ => {}
        }
        let since_start = now.duration_since(self.started_at).unwrap_or_default();
        if stage != RotateStage::Add && since_start < RECONNECT_GRACE && !force {
            let mut r = self.rotate_response(
                false,
                false,
                format!(
                    "the control plane started {}s ago and proxies may still be reconnecting: \
                     ask again in {}s",
                    since_start.as_secs(),
                    (RECONNECT_GRACE - since_start).as_secs().max(1)
                ),
            );
            r.retry = true;
            return Ok(r);
        }
        let pending = self.not_ready(stage, now);
        if !pending.is_empty() && !force {
            let mut r = self.rotate_response(
                false,
                false,
                format!(
                    "{} proxy(ies) not ready for {}; nothing changed (wait, or --force)",
                    pending.len(),
                    stage.name()
                ),
            );
            r.pending = pending;
            r.retry = true;
            return Ok(r);
        }
        let dir = self.store.location();
        let at_unix_ms = unix_ms(now);
        let ca_error = |e: CaError| ApiError::Ca(e.to_string());
        let mut next = self.store.state().clone();
        let current = next.rotation.clone();
        let (ca, generation, bundle_changed, what) = match (stage, current.as_ref()) {
            (RotateStage::Add, _) => {
                let generation = self.ca_generation + 1;
                let name = format!("hopwise CA ({}) #{generation}", self.mesh.name);
                let (_, root) = Ca::generate_named(&name, now).map_err(ca_error)?;
                let ca = self
                    .ca
                    .trusting(&root.cert_pem, Place::After, "the new root")
                    .map_err(ca_error)?;
                next.rotation = Some(Rotation::Added {
                    next_cert_pem: root.cert_pem,
                    next_key_pem: Secret(root.key_pem),
                    at_unix_ms,
                });
                let what = format!(
                    "added `{name}` to the trust bundle; `{}` still signs",
                    ca::common_name(self.ca.signer_pem())
                );
                (ca, self.ca_generation, true, what)
            }
            (
                RotateStage::Reissue,
                Some(Rotation::Added {
                    next_cert_pem,
                    next_key_pem,
                    ..
                }),
            ) => {
                let what = format!("the new root stored in {dir}");
                let signer =
                    Ca::from_pem(next_cert_pem, &next_key_pem.0, &what, now).map_err(ca_error)?;
                let ca = signer
                    .trusting(self.ca.signer_pem(), Place::Before, "the old root")
                    .map_err(ca_error)?;
                let generation = self.ca_generation + 1;
                next.ca = Some(CaState::Generated {
                    cert_pem: next_cert_pem.clone(),
                    key_pem: next_key_pem.clone(),
                });
                next.ca_generation = generation;
                next.rotation = Some(Rotation::Reissued {
                    previous_cert_pem: self.ca.signer_pem().to_owned(),
                    at_unix_ms,
                });
                let what = format!(
                    "`{}` signs now (CA generation {generation}); every proxy renews its certificate",
                    ca::common_name(signer.signer_pem())
                );
                (ca, generation, false, what)
            }
            (
                RotateStage::Retire,
                Some(Rotation::Reissued {
                    previous_cert_pem, ..
                }),
            ) => {
                let what = format!(
                    "retired `{}`; the trust bundle holds `{}` only",
                    ca::common_name(previous_cert_pem),
                    ca::common_name(self.ca.signer_pem())
                );
                next.rotation = None;
                (self.ca.alone(), self.ca_generation, true, what)
            }
            // Every other pair was answered above.
            _ => return refused(self, "the rotation is not at a stage where this applies"),
        };
        let written = self
            .store
            .commit(next)
            .map_err(|e| ApiError::Store(e.to_string()))?;
        self.ca = Arc::new(ca);
        self.ca_generation = generation;
        self.bump(written);
        self.wake_everyone = true;
        let mut message = what;
        if bundle_changed {
            self.bundle_version = self.version();
            // The state is saved, so the change is in force even if this file is not written
            // (it is rewritten on every start).
            if let Err(e) = self.store.write_bundle(&self.ca.trust_bundle_pem()) {
                message.push_str(&format!("; the trust bundle file was not written: {e}"));
            }
        }
        if !pending.is_empty() {
            message.push_str(&format!(
                " (forced: {} proxy(ies) were not ready)",
                pending.len()
            ));
        }
        let mut r = self.rotate_response(true, false, message);
        r.pending = pending;
        Ok(r)
    }

    /// Applies a prepared mesh file: refused (nothing changes) when it could not be read,
    /// `hopwise check` finds an error, or it changes the trust domain; otherwise written to the
    /// store first, then put in force with a new version. Tokens are made for new services.
    /// `Err` only when the state could not be saved (then nothing changed either).
    pub fn commit(
        &mut self,
        prepared: Prepared,
        now: SystemTime,
    ) -> Result<pb::ApplyResponse, ApiError> {
        let Prepared {
            text,
            file_name,
            result,
        } = prepared;
        let refused = |plane: &Plane, message: String| pb::ApplyResponse {
            applied: false,
            unchanged: false,
            config_version: plane.config_version(),
            version: plane.version(),
            diagnostics: Vec::new(),
            findings: Vec::new(),
            message,
        };
        let (mesh, report) = match result {
            Ok(ok) => ok,
            Err(diags) => {
                let mut r = refused(
                    self,
                    format!(
                        "{file_name}: {} problem(s); nothing was applied",
                        diags.0.len()
                    ),
                );
                r.diagnostics = diags.0.iter().map(|d| d.render(&file_name)).collect();
                return Ok(r);
            }
        };
        let findings: Vec<pb::Finding> = report.findings.iter().map(finding).collect();
        if report.has_errors() {
            let errors = report
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .count();
            let mut r = refused(
                self,
                format!(
                    "{file_name}: `hopwise check` finds {errors} error(s); nothing was applied"
                ),
            );
            r.findings = findings;
            return Ok(r);
        }
        if mesh.trust_domain != self.mesh.trust_domain {
            let mut r = refused(
                self,
                format!("{file_name}: the trust domain cannot change; nothing was applied"),
            );
            r.diagnostics = vec![format!(
                "{file_name}: mesh.trust_domain: `{}` would replace `{}`, which every issued \
                 certificate names; changing it is not supported yet",
                mesh.trust_domain, self.mesh.trust_domain
            )];
            return Ok(r);
        }
        if text == self.mesh_text() {
            return Ok(pb::ApplyResponse {
                applied: true,
                unchanged: true,
                config_version: self.config_version(),
                version: self.version(),
                diagnostics: Vec::new(),
                findings,
                message: format!(
                    "{file_name}: unchanged (config version {})",
                    self.config_version()
                ),
            });
        }
        let mut next = self.store.state().clone();
        let version = self.config_version() + 1;
        next.mesh = Some(MeshState {
            text,
            version,
            source: file_name.clone(),
            applied_unix_ms: unix_ms(now),
        });
        let new_tokens =
            add_tokens(&mut next, &mesh).map_err(|e| ApiError::Store(e.to_string()))?;
        let store_error = |e: StoreError| ApiError::Store(e.to_string());
        let written = self.store.commit(next).map_err(store_error)?;
        // The state is saved, so the change is in force even if a token file cannot be written
        // (it is rewritten on the next start; the new service's proxies wait until then).
        let tokens_note = match new_tokens {
            0 => String::new(),
            n => match self.store.write_tokens() {
                Ok(_) => format!(
                    "; {n} new token(s) in {}",
                    self.store.dir().join(crate::store::TOKENS_DIR).display()
                ),
                Err(e) => format!("; {n} new token(s), but the token files were not written: {e}"),
            },
        };
        self.mesh = Arc::new(mesh);
        self.mesh_text_in_force = self.mesh_text().to_owned();
        self.tokens_seen = self.store.state().tokens.clone();
        self.bump(written);
        self.wake_everyone = true;
        Ok(pb::ApplyResponse {
            applied: true,
            unchanged: false,
            config_version: version,
            version: self.version(),
            diagnostics: Vec::new(),
            findings,
            message: format!("{file_name}: applied as config version {version}{tokens_note}"),
        })
    }

    /// Replaces `service`'s join token with a new one: in the store first, then the token files.
    /// The old token is refused from the next call on, and the streams opened with it are woken
    /// to end ([`Plane::take_wake`]). Returns the new token and its file.
    pub fn rotate_token(&mut self, service: &str) -> Result<(String, PathBuf), ApiError> {
        match self.mesh.services.get(service) {
            None => return Err(ApiError::UnknownService(service.to_owned())),
            Some(s) if s.external.is_some() => {
                return Err(ApiError::External(service.to_owned()));
            }
            Some(_) => {}
        }
        let fresh = token::new_token().map_err(|e| ApiError::Store(e.to_string()))?;
        let mut next = self.store.state().clone();
        next.tokens
            .insert(service.to_owned(), Secret(fresh.clone()));
        let written = self
            .store
            .commit(next)
            .map_err(|e| ApiError::Store(e.to_string()))?;
        self.tokens_seen = self.store.state().tokens.clone();
        self.bump(written);
        self.wake_everyone = true;
        let file = self
            .store
            .dir()
            .join(crate::store::TOKENS_DIR)
            .join(service);
        // Saved, so in force even if the file cannot be written (it is at the next start).
        self.store
            .write_tokens()
            .map_err(|e| ApiError::Store(format!("the new token is in force, but {e}")))?;
        Ok((fresh, file))
    }

    /// Validates a registration: the token's service, the address and the TTL (0: the
    /// default). Shared by both stores.
    pub fn lease_terms(
        &self,
        token: &str,
        inbound: &str,
        ttl_ms: u64,
    ) -> Result<(String, SocketAddr, Duration), ApiError> {
        let service = self.proxied_service(token)?;
        let addr: SocketAddr = inbound
            .trim()
            .parse()
            .map_err(|_| ApiError::BadAddress(inbound.to_owned()))?;
        if addr.ip().is_unspecified() || addr.port() == 0 {
            return Err(ApiError::BadAddress(inbound.to_owned()));
        }
        let ttl = if ttl_ms == 0 {
            DEFAULT_TTL
        } else {
            Duration::from_millis(ttl_ms)
        };
        if ttl > MAX_TTL || ttl < Duration::from_secs(1) {
            return Err(ApiError::Ttl(ttl));
        }
        let held = self
            .registry
            .copies()
            .filter(|(_, c)| c.service == service && c.inbound != addr)
            .count();
        if held >= MAX_COPIES_PER_SERVICE {
            return Err(ApiError::TooManyCopies {
                service,
                cap: MAX_COPIES_PER_SERVICE,
            });
        }
        Ok((service, addr, ttl))
    }

    /// The leases that hold `service` at `addr` (a registration there replaces them).
    pub fn leases_at(&self, service: &str, addr: SocketAddr) -> Vec<u64> {
        self.registry
            .copies()
            .filter(|(_, c)| c.service == service && c.inbound == addr)
            .map(|(id, _)| id.0)
            .collect()
    }

    /// The copy holding `lease`, which must be of the token's service.
    pub fn leased_copy(&self, token: &str, lease: u64) -> Result<crate::registry::Copy, ApiError> {
        let id = self.lease_of(token, lease)?;
        self.registry
            .copy(id)
            .cloned()
            .ok_or(ApiError::UnknownLease(lease))
    }

    /// Takes in changes seen on the shared store (the watch, in revision order): the view, the
    /// registry, and — when the CA, the mesh file or the tokens changed — what is in force.
    /// The version becomes the revision. Nothing happens with the embedded store.
    pub fn follow(&mut self, changes: &[Change], now: Instant, wall: SystemTime) -> Followed {
        let mut out = Followed::default();
        let Some(e) = self.store.etcd_mut() else {
            return out;
        };
        let (effects, problems) = e.view_mut().apply(changes);
        let rev = revision(e.view().revision());
        out.problems = problems;
        let far = now + SHARED_LEASE_HORIZON;
        for effect in effects {
            match effect {
                Effect::State => self.reload_shared(rev, wall, &mut out),
                put @ Effect::CopyPut { .. } => {
                    put_copy(&mut self.registry, put, far);
                    out.publish = true;
                }
                Effect::CopyGone { lease } => {
                    self.registry.deregister(LeaseId(lease));
                    out.publish = true;
                }
                // Nothing a proxy is sent: no stream wakes.
                proxy @ (Effect::ProxyPut { .. } | Effect::ProxyGone { .. }) => {
                    self.learn_proxy(&proxy);
                }
            }
        }
        self.changes = self.changes.max(rev);
        out
    }

    /// After the watch was broken: the whole prefix as read now (`changes`, at `at`). Keys the
    /// view holds that are gone, and copies that are gone, are removed.
    pub fn resync(
        &mut self,
        changes: Vec<Change>,
        at: i64,
        now: Instant,
        wall: SystemTime,
    ) -> Followed {
        let Some(e) = self.store.etcd() else {
            return Followed::default();
        };
        let layout = e.view().layout().clone();
        let present: std::collections::BTreeSet<&str> =
            changes.iter().map(|c| c.key.as_str()).collect();
        let mut all = e.view().missing(&present, at);
        for (id, c) in self.registry.copies() {
            let key = layout.key(&Key::Copy {
                service: c.service.clone(),
                lease: id.0,
            });
            if !present.contains(key.as_str()) {
                all.push(Change {
                    key,
                    value: None,
                    revision: at,
                });
            }
        }
        for (service, proxy, lease) in self.remote.keys() {
            let key = layout.key(&Key::Proxy {
                service: service.to_owned(),
                proxy: proxy.to_owned(),
                lease,
            });
            if !present.contains(key.as_str()) {
                all.push(Change {
                    key,
                    value: None,
                    revision: at,
                });
            }
        }
        all.extend(changes);
        self.follow(&all, now, wall)
    }

    /// The CA, the mesh file or the tokens changed in the shared store: put them in force.
    fn reload_shared(&mut self, rev: u64, wall: SystemTime, out: &mut Followed) {
        let state = self.store.state().clone();
        let place = self.store.location();
        let text_in_force = self.mesh_text_in_force.clone();
        if let Some(m) = &state.mesh
            && m.text != text_in_force
        {
            match Mesh::from_yaml(&m.text) {
                Ok(mesh) => {
                    self.mesh = Arc::new(mesh);
                    self.mesh_text_in_force = m.text.clone();
                    self.wake_everyone = true;
                    out.publish = true;
                }
                Err(d) => out.problems.push(format!(
                    "the mesh file stored in {place} (version {}) is not valid, keeping the one \
                     in force:\n{}",
                    m.version,
                    d.render(&m.source)
                )),
            }
        }
        let bundle_before = self.ca.trust_bundle_pem();
        let signer_before = self.ca.signer_pem().to_owned();
        if state.ca.is_some() {
            match ca_of(&state, None, &self.mesh.name, &place, wall) {
                Ok((ca, _, _)) => {
                    let bundle = ca.trust_bundle_pem();
                    if bundle != bundle_before
                        || ca.signer_pem() != signer_before
                        || state.ca_generation != self.ca_generation
                    {
                        self.ca = Arc::new(ca);
                        self.ca_generation = state.ca_generation;
                        self.wake_everyone = true;
                        out.publish = true;
                    }
                    if bundle != bundle_before {
                        self.bundle_version = self.ca_revision().unwrap_or(rev);
                        out.bundle = true;
                    }
                }
                Err(e) => out.problems.push(format!(
                    "the CA stored in {place}: {e}; keeping the one in force"
                )),
            }
        }
        if state.tokens != self.tokens_seen {
            self.tokens_seen = state.tokens.clone();
            out.tokens = true;
            // A rotated token: the streams opened with the old one must end here too.
            self.wake_everyone = true;
            out.publish = true;
        }
    }

    /// The proxies, the copies of every service, and the versions.
    pub fn status(&self, now: Instant) -> pb::StatusResponse {
        let unix = |t: SystemTime| ca::unix_seconds(t);
        let proxies = self
            .all_proxies()
            .into_iter()
            .map(|((service, proxy), p)| pb::ProxyStatus {
                service,
                proxy,
                connected: p.connected,
                last_sent_version: p.last_sent,
                last_acked_version: p.ack.as_ref().map_or(0, |a| a.version),
                last_ack_accepted: p.ack.as_ref().is_some_and(|a| a.accepted),
                last_ack_reason: p.ack.as_ref().map(|a| a.reason.clone()).unwrap_or_default(),
                last_ack_unix_ms: p.ack.as_ref().map(|a| a.at_unix_ms),
                cert_not_after_unix: p.cert_not_after_unix,
                cert_ca_generation: p.cert_in_force.or(p.cert_issued),
                replica: p.replica,
            })
            .collect();
        let services = self
            .mesh
            .services
            .values()
            .map(|s| {
                let issued = self.issued.get(&s.name).copied().unwrap_or_default();
                pb::ServiceStatus {
                    service: s.name.clone(),
                    external: s.external.is_some(),
                    copies: self
                        .registry
                        .copies()
                        .filter(|(_, c)| c.service == s.name && c.expires > now)
                        .map(|(id, c)| pb::CopyStatus {
                            lease_id: id.0,
                            inbound_addr: c.inbound.to_string(),
                            healthy: c.healthy,
                            // Shared: etcd keeps the lease; its TTL is shown.
                            expires_in_ms: u64::try_from(
                                if self.shared() {
                                    c.ttl
                                } else {
                                    c.expires.saturating_duration_since(now)
                                }
                                .as_millis(),
                            )
                            .unwrap_or(u64::MAX),
                        })
                        .collect(),
                    certs_issued: issued.count,
                    cert_not_after_unix: issued.not_after.map(unix),
                }
            })
            .collect();
        pb::StatusResponse {
            mesh: self.mesh.name.clone(),
            version: self.version(),
            config_version: self.config_version(),
            proxies,
            services,
            ca_not_after_unix: self.ca.not_after().map_or(0, unix),
            ca_generation: self.ca_generation,
            ca_rotation: rotation_name(self.rotation()).to_owned(),
            trust_bundle: self.ca.root_names(),
            store: self.store.location(),
        }
    }
}

/// Adds a token for every service of `mesh` that runs a proxy and has none. Returns how many.
fn add_tokens(state: &mut State, mesh: &Mesh) -> Result<usize, RandomError> {
    let mut added = 0;
    for s in mesh.services.values() {
        if s.external.is_none() && !state.tokens.contains_key(&s.name) {
            state
                .tokens
                .insert(s.name.clone(), Secret(token::new_token()?));
            added += 1;
        }
    }
    Ok(added)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod rotation_tests;

#[cfg(test)]
mod prune_tests;
