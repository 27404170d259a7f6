//! The proxy as the control plane's client: its identity from a CSR (the key never leaves this
//! process), its configuration and its upstreams' copies from a stream of snapshots, its own
//! copy registered with a lease and the app's health. What it learnt is cached on disk, so a
//! proxy that restarts while the control plane is down serves from its last snapshot.
//!
//! Snapshots come whole first, then as deltas on the last one received on the stream
//! ([`delta`]): the merged, whole snapshot goes through the same accept-or-refuse path, and the
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
//! Transport ([`channel`]): TLS 1.3 only; the server must present the control plane's identity
//! under `--control-ca` or the last snapshot's bundle. The proxy presents its certificate once it
//! has one; if a session fails before its first snapshot while presenting it (a certificate the
//! control plane no longer trusts: expired, or from a retired root), the next one goes without,
//! so such a certificate cannot lock the proxy out (the join token authenticates, and `Issue`
//! replaces the certificate).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hopwise_model::Mesh;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::config::{ProxyConfig, Target};
use crate::server::State;
use crate::tls::{CertFiles, CertStore};

mod channel;

/// The wire types: `hopwise-api`'s, compiled once for the proxy and the control plane.
pub use hopwise_api::pb;

mod delta;

use pb::control_client::ControlClient;

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
    pub token: String,
    pub service: String,
    pub copy: usize,
    /// A name for this proxy in `hopwise status`.
    pub name: String,
    /// Where certificates and the last snapshot are kept.
    pub cache: PathBuf,
    /// The app's health check: a GET on this path; a status below 500 is healthy.
    pub health_path: String,
    pub lease_ttl: Duration,
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
}

fn write_file(path: &Path, text: &str, secret: bool) -> Result<(), ControlError> {
    let err = |source| ControlError::Write {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(err)?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    std::fs::rename(&tmp, path).map_err(err)
}

/// A certificate just issued.
#[derive(Debug, Clone, Copy)]
struct Cert {
    not_after: SystemTime,
    /// The generation of the CA that signed it (0: a control plane that does not say).
    generation: u64,
}

/// Puts files just written in force now rather than at the next periodic reload. Returns
/// whether what is on disk is in use.
fn reload(certs: Option<&CertStore>) -> bool {
    match certs.map(CertStore::reload_if_changed) {
        None | Some(Ok(_)) => true,
        Some(Err(e)) => {
            tracing::warn!("keeping the old certificates: {e}");
            false
        }
    }
}

/// The mesh's trust domain, which the control plane's identity must be in.
fn trust_domain(cached: &Cached) -> Option<String> {
    Mesh::from_yaml(&cached.mesh_yaml)
        .ok()
        .map(|m| m.trust_domain)
}

impl ControlOptions {
    fn cert_files(&self) -> CertFiles {
        CertFiles::in_dir(&self.cache, &self.service)
    }

    fn snapshot_file(&self) -> PathBuf {
        self.cache.join("snapshot.json")
    }

    /// Makes a key here, sends only the request, and writes what comes back for the
    /// [`crate::tls::CertStore`] (which picks up renewals from disk).
    async fn issue(
        &self,
        client: &mut ControlClient<tonic::transport::Channel>,
    ) -> Result<Cert, ControlError> {
        let key = rcgen::KeyPair::generate().map_err(|e| ControlError::Csr(e.to_string()))?;
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, self.service.clone());
        let csr = params
            .serialize_request(&key)
            .and_then(|c| c.pem())
            .map_err(|e| ControlError::Csr(e.to_string()))?;
        let resp = client
            .issue(pb::IssueRequest {
                csr_pem: csr,
                token: self.token.clone(),
                proxy: self.name.clone(),
            })
            .await
            .map_err(|s| ControlError::Refused(s.message().to_owned()))?
            .into_inner();
        std::fs::create_dir_all(&self.cache).map_err(|source| ControlError::Write {
            path: self.cache.clone(),
            source,
        })?;
        let files = self.cert_files();
        // Key first: a certificate on disk without its key would be picked up half-made.
        write_file(&files.key, &key.serialize_pem(), true)?;
        // Snapshots keep the trust bundle current (an answer here may be older than the last
        // snapshot); this copy only fills a cache that has none, for the TLS store to start.
        if !files.ca.exists() {
            write_file(&files.ca, &resp.trust_bundle_pem, false)?;
        }
        write_file(&files.cert, &resp.cert_chain_pem, false)?;
        Ok(Cert {
            not_after: UNIX_EPOCH + Duration::from_secs(resp.not_after_unix.max(0) as u64),
            generation: resp.ca_generation,
        })
    }

    /// Opens this proxy's snapshot stream, saying where its admin endpoint is (if it has one
    /// yet: not while it bootstraps) so the control plane's dashboard can read its metrics.
    async fn subscribe(
        &self,
        client: &mut ControlClient<tonic::transport::Channel>,
        admin: Option<SocketAddr>,
    ) -> Result<tonic::Streaming<pb::Snapshot>, ControlError> {
        Ok(client
            .subscribe(pb::SubscribeRequest {
                service: self.service.clone(),
                token: self.token.clone(),
                proxy: self.name.clone(),
                admin_addr: admin.map(|a| a.to_string()).unwrap_or_default(),
                // After the first, whole, snapshot: only what changed (merged in `delta`).
                deltas: true,
            })
            .await
            .map_err(|s| ControlError::Refused(s.message().to_owned()))?
            .into_inner())
    }

    /// Writes a snapshot's trust bundle to `ca.pem` (atomically: a temporary file renamed over
    /// it) when it differs from the file, and puts it in force at once. Returns whether the
    /// bundle is in force.
    fn sync_bundle(&self, pem: &str, certs: Option<&CertStore>) -> bool {
        if pem.is_empty() {
            return false;
        }
        let path = self.cert_files().ca;
        if std::fs::read_to_string(&path).ok().as_deref() != Some(pem) {
            if let Err(e) = write_file(&path, pem, false) {
                tracing::warn!("keeping the old trust bundle: {e}");
                return false;
            }
            tracing::info!(
                "trust bundle updated: {} CA certificate(s)",
                pem.matches("-----BEGIN CERTIFICATE-----").count()
            );
        }
        reload(certs)
    }

    fn to_cached(&self, s: &pb::Snapshot) -> Cached {
        Cached {
            version: s.version,
            config_version: s.config_version,
            mesh_yaml: s.mesh_yaml.clone().unwrap_or_default(),
            upstreams: s
                .upstreams
                .iter()
                .map(|u| {
                    (
                        u.service.clone(),
                        u.endpoints.iter().filter_map(|e| e.parse().ok()).collect(),
                    )
                })
                .collect(),
            allowed_callers: s.allowed_callers.clone(),
        }
    }

    /// The proxy's configuration from a snapshot: the mesh file through the same code as
    /// `hopwise proxy --config`, with the copies the registry knows.
    pub fn config(&self, cached: &Cached) -> Result<ProxyConfig, ControlError> {
        let mesh = Mesh::from_yaml(&cached.mesh_yaml)
            .map_err(|d| ControlError::Config(d.render("the control plane's mesh file")))?;
        // A copy the file does not list (started by hand, or by `hopwise up`) takes its ports
        // from the command line: adding a copy touches no file.
        let listed = mesh
            .services
            .get(&self.service)
            .is_some_and(|s| s.copies.len() > self.copy);
        let mut config = ProxyConfig::from_mesh(
            &mesh,
            &self.service,
            if listed { self.copy } else { 0 },
            &self.cache,
            Some(&self.cache),
        )
        .map_err(|e| ControlError::Config(e.to_string()))?;
        if !listed {
            config.copy = self.copy;
            config.app = None;
            config.inbound = None;
            config.outbound = None;
            config.admin = None;
            config.upstream_ports.clear();
        }
        config.certs = Some(self.cert_files());
        apply_endpoints(&mut config, &cached.upstreams);
        // Who may call is read from the mesh file itself, by the same code as `--config`.
        Ok(config)
    }

    fn load_cache(&self) -> Result<Cached, ControlError> {
        let text = std::fs::read_to_string(self.snapshot_file())
            .map_err(|_| ControlError::NoCache(self.cache.clone()))?;
        serde_json::from_str(&text).map_err(|_| ControlError::NoCache(self.cache.clone()))
    }

    fn save_cache(&self, cached: &Cached) -> Result<(), ControlError> {
        let text = serde_json::to_string_pretty(cached)
            .map_err(|e| ControlError::Config(e.to_string()))?;
        write_file(&self.snapshot_file(), &text, false)
    }
}

fn apply_endpoints(config: &mut ProxyConfig, upstreams: &IndexMap<String, Vec<SocketAddr>>) {
    for (name, addrs) in upstreams {
        if let Some(cluster) = config.clusters.get_mut(name)
            && let Target::Mesh { endpoints, .. } = &mut cluster.target
        {
            *endpoints = addrs.clone();
        }
    }
}

/// What `bootstrap` hands over: the configuration to start with, and the session that keeps
/// it (and the certificate, and the lease) current once the proxy runs.
#[derive(Debug)]
pub struct Session {
    opts: ControlOptions,
    cached: Cached,
    /// What the mesh file in force gives this copy, before the command line's overrides: a new
    /// file is compared with it to tell what can change live.
    base: ProxyConfig,
    cert: Option<Cert>,
    online: bool,
    /// The replica that answered first (an index into `opts.servers`).
    server: usize,
}

/// Gets a certificate and the first snapshot from the control plane — or, when it cannot be
/// reached, the cached ones, so a restart during an outage still serves.
pub async fn bootstrap(opts: ControlOptions) -> Result<(ProxyConfig, Session), ControlError> {
    for s in &opts.servers {
        channel::authority(s)?;
    }
    let mut online = Err(ControlError::Unreachable {
        server: "(none)".into(),
        reason: "no control-plane address given".into(),
    });
    let mut server = 0;
    for (i, s) in opts.servers.iter().enumerate() {
        online = first_snapshot(&opts, s).await;
        match &online {
            Ok(_) => {
                server = i;
                break;
            }
            Err(e) => tracing::warn!("{e}"),
        }
    }
    let (cached, cert, online) = match online {
        Ok((cached, cert)) => {
            opts.save_cache(&cached)?;
            (cached, Some(cert), true)
        }
        Err(e @ (ControlError::Unreachable { .. } | ControlError::Refused(_))) => {
            tracing::warn!("{e}; starting from the cached snapshot");
            (opts.load_cache()?, None, false)
        }
        Err(e) => return Err(e),
    };
    let config = opts.config(&cached)?;
    Ok((
        config.clone(),
        Session {
            opts,
            cached,
            base: config,
            cert,
            online,
            server,
        },
    ))
}

/// A certificate and the first snapshot from one replica.
async fn first_snapshot(
    opts: &ControlOptions,
    server: &str,
) -> Result<(Cached, Cert), ControlError> {
    // No client certificate: one in the cache may be stale, and this session replaces it.
    let mut client = channel::connect(opts, server, None, false).await?;
    let cert = opts.issue(&mut client).await?;
    let mut stream = opts.subscribe(&mut client, None).await?;
    let message = stream
        .message()
        .await
        .map_err(|s| ControlError::Refused(s.message().to_owned()))?
        .ok_or_else(|| ControlError::Refused("the snapshot stream ended at once".into()))?;
    // A stream's first snapshot is whole; anything else is refused like a broken stream.
    let first = delta::Received::default()
        .merge(message)
        .map_err(|e| ControlError::Refused(e.to_string()))?
        .clone();
    // The TLS store is not open yet: it starts from this bundle.
    opts.sync_bundle(bundle(&first), None);
    Ok((opts.to_cached(&first), cert))
}

impl Session {
    /// Keeps everything current until `shutdown`: snapshots (new copies applied live),
    /// certificate renewal at ~70 % of its life, the lease and the app's health; deregisters
    /// on the way out. `bound` is where the proxy listens: its inbound port is registered as
    /// the copy's address, and its admin endpoint (if any) is told to the control plane so its
    /// dashboard can read `/metrics`.
    pub async fn run(
        self,
        state: Arc<State>,
        bound: &crate::server::Bound,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let (inbound, admin) = (bound.inbound, bound.admin);
        let Session {
            opts,
            mut cached,
            mut base,
            cert,
            online,
            server: mut current,
        } = self;
        let replicas = opts.servers.len().max(1);
        // Failed sessions in a row, across replicas.
        let mut failures = 0usize;
        state.version.store(cached.version, Ordering::Release);
        state
            .config_version
            .store(cached.config_version, Ordering::Release);
        if !online {
            tracing::info!("serving snapshot {} from the cache", cached.version);
        }
        let certs = state.certs.clone();
        let mut lease: Option<u64> = None;
        let mut healthy: Option<bool> = None;
        let mut backoff = Duration::from_millis(250);
        let mut renew_at = cert.map(|c| renewal_time(SystemTime::now(), c.not_after));
        // The CA generation of the certificate in use (0: unknown).
        let mut generation = cert.map_or(0, |c| c.generation);
        // The last acknowledgement, sent again when a renewal changes what it says.
        let mut last_ack: Option<pb::AckRequest> = None;
        let mut domain = trust_domain(&cached);
        let mut present_cert = true;
        loop {
            let server = opts.servers.get(current).cloned().unwrap_or_default();
            let mut got_snapshot = false;
            let session = async {
                let mut client =
                    channel::connect(&opts, &server, domain.clone(), present_cert).await?;
                if renew_at.is_none_or(|t| SystemTime::now() >= t) {
                    let c = opts.issue(&mut client).await?;
                    renew_at = Some(renewal_time(SystemTime::now(), c.not_after));
                    generation = c.generation;
                    reload(certs.as_deref());
                    tracing::info!("certificate issued, renewing at 70 % of its life");
                }
                let mut stream = opts.subscribe(&mut client, admin).await?;
                // What this stream sent so far, whole: deltas apply to it.
                let mut received = delta::Received::default();
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tokio::select! {
                        msg = stream.message() => {
                            let Some(message) = msg.map_err(|s| ControlError::Refused(s.message().to_owned()))? else {
                                return Err(ControlError::Refused("the snapshot stream ended".into()));
                            };
                            got_snapshot = true;
                            let snapshot = match received.merge(message) {
                                Ok(s) => s.clone(),
                                Err(e) => {
                                    // Not on what this stream holds: refuse it, say why, and
                                    // start again whole on a new stream (same replica).
                                    tracing::warn!("snapshot {} refused: {e}; reopening the stream", e.version());
                                    let _ = client.ack(pb::AckRequest {
                                        service: opts.service.clone(),
                                        version: e.version(),
                                        accepted: false,
                                        reason: e.to_string(),
                                        token: opts.token.clone(),
                                        proxy: opts.name.clone(),
                                        cert_ca_generation: generation,
                                        trust_bundle_applied: false,
                                    }).await;
                                    stream = opts.subscribe(&mut client, admin).await?;
                                    received = delta::Received::default();
                                    continue;
                                }
                            };
                            // The trust bundle first: a rotation adds the new root before any
                            // certificate from it is presented.
                            let bundle_applied = opts.sync_bundle(bundle(&snapshot), certs.as_deref());
                            if snapshot.ca_generation > generation {
                                // The CA was rotated: renew now, not at 70 % of the life.
                                match opts.issue(&mut client).await {
                                    Ok(c) => {
                                        renew_at = Some(renewal_time(SystemTime::now(), c.not_after));
                                        generation = c.generation;
                                        reload(certs.as_deref());
                                        tracing::info!("certificate reissued under CA generation {generation}");
                                    }
                                    Err(e) => {
                                        tracing::warn!("reissue failed, keeping the old certificate: {e}");
                                        renew_at = Some(SystemTime::now());
                                    }
                                }
                            }
                            let fresh = opts.to_cached(&snapshot);
                            let (accepted, reason) = match apply(&opts, &state, &mut base, &cached, &fresh) {
                                Ok(()) => (true, String::new()),
                                Err(reason) => {
                                    tracing::warn!("snapshot {} refused: {reason}", fresh.version);
                                    (false, reason)
                                }
                            };
                            if accepted {
                                if fresh.mesh_yaml != cached.mesh_yaml {
                                    domain = trust_domain(&fresh);
                                }
                                cached = fresh;
                                state.version.store(cached.version, Ordering::Release);
                                state.config_version.store(cached.config_version, Ordering::Release);
                                let _ = opts.save_cache(&cached);
                            }
                            let ack = pb::AckRequest {
                                service: opts.service.clone(),
                                version: snapshot.version,
                                accepted,
                                reason,
                                token: opts.token.clone(),
                                proxy: opts.name.clone(),
                                cert_ca_generation: generation,
                                trust_bundle_applied: bundle_applied,
                            };
                            let _ = client.ack(ack.clone()).await;
                            last_ack = Some(ack);
                        }
                        _ = tick.tick() => {
                            if renew_at.is_some_and(|t| SystemTime::now() >= t) {
                                match opts.issue(&mut client).await {
                                    Ok(c) => {
                                        renew_at = Some(renewal_time(SystemTime::now(), c.not_after));
                                        reload(certs.as_deref());
                                        tracing::info!("certificate renewed");
                                        if c.generation != generation {
                                            generation = c.generation;
                                            // Say which CA the certificate in use is from.
                                            if let Some(ack) = last_ack.as_mut() {
                                                ack.cert_ca_generation = generation;
                                                let _ = client.ack(ack.clone()).await;
                                            }
                                        }
                                    }
                                    // Keep serving with the old one; try again next tick.
                                    Err(e) => tracing::warn!("renewal failed, keeping the old certificate: {e}"),
                                }
                            }
                            if let Some(addr) = inbound {
                                keep_lease(&opts, &mut client, (addr, admin), &mut lease, &mut healthy, &state).await?;
                            }
                        }
                        _ = shutdown.changed() => return Ok(()),
                    }
                }
            };
            // The session returns on shutdown itself (connecting is bounded by 2 s).
            let result = session.await;
            if got_snapshot {
                failures = 0;
                backoff = Duration::from_millis(250);
            }
            // Failing before any snapshot with a certificate presented: try the next session
            // without it (see the module's doc); with it again once one worked.
            present_cert = got_snapshot || !present_cert;
            match result {
                Ok(()) => break,
                Err(e) => {
                    // The lease is kept: another replica renews it (a shared store), or
                    // answers `unknown-lease` and the copy registers again.
                    healthy = None;
                    failures += 1;
                    current = (current + 1) % replicas;
                    tracing::warn!(
                        "control plane {server}: {e}; serving snapshot {} meanwhile, next: {}",
                        cached.version,
                        opts.servers.get(current).map_or("-", String::as_str)
                    );
                }
            }
            if *shutdown.borrow() {
                break;
            }
            // The first moves go to the other replicas at once; once none answered, back off.
            let wait = if failures < replicas {
                Duration::from_millis(50)
            } else {
                let w = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                w
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => break,
            }
        }
        // A graceful goodbye: the copy leaves the endpoint sets at once, not at lease expiry.
        if let Some(id) = lease {
            for i in 0..replicas {
                let server = opts
                    .servers
                    .get((current + i) % replicas)
                    .cloned()
                    .unwrap_or_default();
                let Ok(mut client) = channel::connect(&opts, &server, domain.clone(), true).await
                else {
                    continue;
                };
                let gone = client
                    .deregister(pb::LeaseRequest {
                        lease_id: id,
                        token: opts.token.clone(),
                    })
                    .await;
                if gone.is_ok() {
                    break;
                }
            }
        }
    }
}

/// A whole snapshot's trust bundle ("" when the control plane sends none).
fn bundle(s: &pb::Snapshot) -> &str {
    s.trust_bundle_pem.as_deref().unwrap_or_default()
}

/// Around 70 % of the certificate's life, with ±5 % jitter so a fleet does not renew at once.
fn renewal_time(now: SystemTime, not_after: SystemTime) -> SystemTime {
    let life = not_after.duration_since(now).unwrap_or_default();
    let share = 0.65 + fastrand::f64() * 0.10;
    now + life.mul_f64(share)
}

/// Registers this copy (once) with its inbound and admin addresses, renews its lease, and
/// reports the app's health when it changes.
async fn keep_lease(
    opts: &ControlOptions,
    client: &mut ControlClient<tonic::transport::Channel>,
    (inbound, admin): (SocketAddr, Option<SocketAddr>),
    lease: &mut Option<u64>,
    healthy: &mut Option<bool>,
    state: &State,
) -> Result<(), ControlError> {
    let refused = |s: tonic::Status| ControlError::Refused(s.message().to_owned());
    if let Some(id) = *lease {
        match client
            .renew(pb::LeaseRequest {
                lease_id: id,
                token: opts.token.clone(),
            })
            .await
        {
            Ok(_) => {}
            // Expired meanwhile (a long pause, an embedded control plane that restarted):
            // register again, now.
            Err(s) if s.code() == tonic::Code::NotFound => {
                tracing::info!("lease {id:x}: {}; registering again", s.message());
                *lease = None;
                *healthy = None;
            }
            // The replica (or its store) did not answer: the lease may be alive; another
            // replica is tried.
            Err(s) => return Err(refused(s)),
        }
    }
    let id = match *lease {
        Some(id) => id,
        None => {
            let id = client
                .register(pb::RegisterRequest {
                    token: opts.token.clone(),
                    inbound_addr: inbound.to_string(),
                    ttl_ms: opts.lease_ttl.as_millis() as u64,
                    admin_addr: admin.map(|a| a.to_string()).unwrap_or_default(),
                })
                .await
                .map_err(refused)?
                .into_inner()
                .lease_id;
            *lease = Some(id);
            id
        }
    };
    let now_healthy = state.ready() && probe(state.config().app, &opts.health_path).await;
    if *healthy != Some(now_healthy) {
        client
            .set_health(pb::SetHealthRequest {
                lease_id: id,
                healthy: now_healthy,
                token: opts.token.clone(),
            })
            .await
            .map_err(refused)?;
        *healthy = Some(now_healthy);
    }
    Ok(())
}

/// A GET on the app's health path; healthy if it answers below 500 within a second.
async fn probe(app: Option<SocketAddr>, path: &str) -> bool {
    let Some(app) = app else { return true };
    let attempt = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(app).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nhost: {app}\r\nconnection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.ok()?;
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).await.ok()?;
        let code: u16 = std::str::from_utf8(&head[9..12]).ok()?.parse().ok()?;
        Some(code < 500)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), attempt).await,
        Ok(Some(true))
    )
}

/// Applies a new snapshot. New copies of the upstreams in force take effect at once (they are
/// the registry's, not policy: they follow it whatever becomes of the mesh file). A changed mesh
/// file is derived as at start and put in force whole for new requests — or, when something the
/// running process fixed at start would change (see [`crate::live::next_config`]), or it cannot
/// be used, refused whole with the reason, the configuration in force staying as it was.
fn apply(
    opts: &ControlOptions,
    state: &State,
    base: &mut ProxyConfig,
    old: &Cached,
    fresh: &Cached,
) -> Result<(), String> {
    let live = state.live();
    for (service, addrs) in &fresh.upstreams {
        if let Some(shared) = live.clusters.get(service) {
            shared.endpoints.update(addrs);
        }
    }
    if fresh.mesh_yaml == old.mesh_yaml {
        return Ok(());
    }
    let keeping = |why: String| {
        format!(
            "mesh version {} not applied, keeping version {}: {why}",
            fresh.config_version, old.config_version
        )
    };
    let new_base = opts.config(fresh).map_err(|e| keeping(e.to_string()))?;
    let next = crate::live::next_config(&live.config, base, new_base.clone())
        .map_err(|e| keeping(e.to_string()))?;
    state.replace(next).map_err(|e| keeping(e.to_string()))?;
    tracing::info!(
        "mesh version {} in force (snapshot {})",
        fresh.config_version,
        fresh.version
    );
    *base = new_base;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn options(cache: &Path) -> ControlOptions {
        ControlOptions {
            servers: vec!["https://127.0.0.1:1".into()],
            control_ca: cache.join("control-ca.pem"),
            token: String::new(),
            service: "b".into(),
            copy: 0,
            name: "b-0".into(),
            cache: cache.to_owned(),
            health_path: "/".into(),
            lease_ttl: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_snapshots_trust_bundle_replaces_the_file_only_when_it_differs() {
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path());
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "OLD").unwrap();
        // A control plane that sends no bundle leaves the file alone, and it is not in force.
        assert!(!opts.sync_bundle("", None));
        assert_eq!(std::fs::read_to_string(&ca).unwrap(), "OLD");
        assert!(opts.sync_bundle("OLD\nNEW\n", None));
        assert_eq!(std::fs::read_to_string(&ca).unwrap(), "OLD\nNEW\n");
        let written = std::fs::metadata(&ca).unwrap().modified().unwrap();
        // The same bundle again: the file is not touched (the TLS store does not reload).
        std::thread::sleep(Duration::from_millis(20));
        assert!(opts.sync_bundle("OLD\nNEW\n", None));
        assert_eq!(std::fs::metadata(&ca).unwrap().modified().unwrap(), written);
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ca.pem"]);
    }
}
