//! The proxy as the control plane's client: its identity from a CSR (the key never leaves this
//! process), its configuration and its upstreams' copies from a stream of snapshots, its own
//! copy registered with a lease and the app's health. What it learnt is cached on disk, so a
//! proxy that restarts while the control plane is down serves from its last snapshot.
//!
//! Snapshots come whole first, then as deltas on the last one received on the stream
//! (`delta.rs`): the merged, whole snapshot goes through the same accept-or-refuse path, and the
//! cache holds it whole. A delta that does not fit what the stream sent is refused in the
//! acknowledgement with the reason, and the stream is opened again (it starts whole).
//!
//! Contract: with the control plane down, a running proxy keeps its last snapshot and its
//! certificate until that certificate expires; it keeps trying to reconnect meanwhile.
//!
//! Replicas: a proxy may be given several control-plane addresses (replicas sharing one etcd).
//! It talks to one at a time; when its stream breaks or a call fails, it moves to the next one
//! (at once for the first move, then with back-off once it has tried them all). Its lease is
//! kept across the move: a lease granted through one replica is renewed through any other
//! (they are etcd leases). Only `unknown-lease` makes it register again.
//!
//! CA rotation: every snapshot carries the trust bundle, which is written to `ca.pem` (and put
//! in force at once) whenever it differs from the file, and the CA's generation: when it grows,
//! the proxy asks for a new certificate at once. Acknowledgements say whether the bundle is in
//! force and which generation the certificate in use is from, so the control plane knows when
//! the next stage of a rotation is safe.
//!
//! Transport (`channel.rs`): TLS 1.3 only; the server must present the control plane's identity
//! under `--control-ca` or the last snapshot's bundle. The proxy presents its certificate once it
//! has one; if a session fails before its first snapshot while presenting it (a certificate the
//! control plane no longer trusts: expired, or from a retired root), the next one goes without,
//! so such a certificate cannot lock the proxy out (the join token authenticates, and `Issue`
//! replaces the certificate).
//!
//! Files by job: `session.rs` (bootstrap, and the run over the replicas: failover, back-off,
//! the goodbye), `stream.rs` (one session with one replica: the snapshot stream, renewals, the
//! acknowledgements), `identity.rs` (the key and the CSR), `issued.rs` (an `IssueResponse`
//! taken before anything is written, and the renewal's time; pure), `snapshot.rs` (a snapshot
//! made the proxy's configuration, and put in force), `lease.rs` (registration, lease and the
//! app's health), `cache.rs` (what is kept on disk), `token.rs` (the credential, read again at
//! every call), `channel.rs` and `delta.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

mod cache;
mod channel;
mod delta;
mod identity;
pub mod issued;
mod lease;
mod session;
mod snapshot;
mod stream;
mod token;

/// Each message of the snapshot stream merged onto the last (pure; public for the
/// `control_messages` fuzz target).
pub use delta::{Received, Resync};
/// The wire types: `hopwise-api`'s, compiled once for the proxy and the control plane.
pub use hopwise_api::pb;
pub use session::{Session, bootstrap};
pub use token::Token;

/// A client of one control-plane replica.
type Client = pb::control_client::ControlClient<tonic::transport::Channel>;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot reach the control plane at {server}: {reason}")]
    Unreachable { server: String, reason: String },
    #[error("the control plane refused: {0}")]
    Refused(String),
    #[error("cannot make a key or a certificate request: {0}")]
    Csr(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the configuration from the control plane is not usable: {0}")]
    Config(String),
    #[error("no control plane, and no cached snapshot in {0} to start from")]
    NoCache(PathBuf),
    #[error("--control {url}: {why}")]
    Address { url: String, why: String },
    #[error("--control-ca {path}: {reason}")]
    ControlCa { path: PathBuf, reason: String },
}

/// How this proxy talks to the control plane.
#[derive(Debug, Clone)]
pub struct ControlOptions {
    /// The control plane's replicas, `https://HOST:PORT` each, tried in this order.
    pub servers: Vec<String>,
    /// The CA bundle the control plane's certificate must chain to (`--control-ca`; its
    /// `ca.pem`). The last snapshot's bundle is trusted too.
    pub control_ca: PathBuf,
    /// What it presents on every call (read again each time: [`Token`]).
    pub token: Token,
    pub service: String,
    pub copy: usize,
    /// A name for this proxy in `hopwise status`.
    pub name: String,
    /// Where certificates and the last snapshot are kept.
    pub cache: PathBuf,
    /// The app's health check: a GET on this path; a status below 500 is healthy.
    pub health_path: String,
    pub lease_ttl: Duration,
    /// The IP other proxies reach this one at, registered in place of an unspecified listening
    /// address (`--advertise`; on Kubernetes the pod's IP).
    pub advertise: Option<std::net::IpAddr>,
    /// The labels this copy registers with (`--label`), which route subsets select by.
    pub labels: hopwise_model::labels::Labels,
}

/// The last accepted snapshot, as cached on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cached {
    pub version: u64,
    /// The control plane's version of the mesh file (0 in caches written before it was kept).
    #[serde(default)]
    pub config_version: u64,
    pub mesh_yaml: String,
    /// Endpoints by upstream service.
    pub upstreams: IndexMap<String, Vec<SocketAddr>>,
    pub allowed_callers: Vec<String>,
    /// The labels of the endpoints that carry any, by upstream service (absent in caches
    /// written before labels).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub labels: IndexMap<String, BTreeMap<SocketAddr, hopwise_model::labels::Labels>>,
}
