//! One session with one control-plane replica: connect, get a certificate when one is due,
//! open the snapshot stream, and until it breaks or the proxy stops — merge each message onto
//! what the stream sent (a delta that does not fit is refused in its acknowledgement and the
//! stream reopened, whole first), put the trust bundle in force before anything else, reissue
//! at once when the CA was rotated, accept or refuse the snapshot and say so; every second,
//! renew the certificate when due and keep the lease. [`Run`] is what outlives one session.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::cache::reload;
use super::identity::{Cert, renewal_time};
use super::snapshot::{apply, bundle, trust_domain};
use super::{Cached, Client, ControlError, ControlOptions, channel, delta, lease, pb};
use crate::config::ProxyConfig;
use crate::server::State;
use crate::tls::CertStore;

/// What a proxy's run keeps across sessions and replicas.
pub(super) struct Run {
    pub(super) opts: ControlOptions,
    state: Arc<State>,
    certs: Option<Arc<CertStore>>,
    inbound: Option<SocketAddr>,
    admin: Option<SocketAddr>,
    /// The snapshot in force.
    pub(super) cached: Cached,
    /// What the mesh file in force gives this copy, before the command line's overrides.
    base: ProxyConfig,
    pub(super) lease: Option<u64>,
    pub(super) healthy: Option<bool>,
    renew_at: Option<SystemTime>,
    /// The CA generation of the certificate in use (0: unknown).
    generation: u64,
    /// The last acknowledgement, sent again when a renewal changes what it says.
    last_ack: Option<pb::AckRequest>,
    /// The mesh's trust domain, which the control plane's identity must be in.
    pub(super) domain: Option<String>,
    /// Whether the current session has had a snapshot.
    pub(super) got_snapshot: bool,
}

impl Run {
    pub(super) fn new(
        opts: ControlOptions,
        state: Arc<State>,
        (inbound, admin): (Option<SocketAddr>, Option<SocketAddr>),
        cached: Cached,
        base: ProxyConfig,
        cert: Option<Cert>,
    ) -> Run {
        Run {
            opts,
            certs: state.certs.clone(),
            state,
            inbound,
            admin,
            domain: trust_domain(&cached),
            cached,
            base,
            lease: None,
            healthy: None,
            renew_at: cert.map(|c| renewal_time(SystemTime::now(), c.not_after)),
            generation: cert.map_or(0, |c| c.generation),
            last_ack: None,
            got_snapshot: false,
        }
    }

    /// One session with `server`, until its stream breaks (an error) or `shutdown` (`Ok`).
    pub(super) async fn session(
        &mut self,
        server: &str,
        present_cert: bool,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), ControlError> {
        let mut client =
            channel::connect(&self.opts, server, self.domain.clone(), present_cert).await?;
        if self.renew_at.is_none_or(|t| SystemTime::now() >= t) {
            let c = self.opts.issue(&mut client).await?;
            self.renew_at = Some(renewal_time(SystemTime::now(), c.not_after));
            self.generation = c.generation;
            reload(self.certs.as_deref());
            tracing::info!("certificate issued, renewing at 70 % of its life");
        }
        let mut stream = self.opts.subscribe(&mut client, self.admin).await?;
        // What this stream sent so far, whole: deltas apply to it.
        let mut received = delta::Received::default();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                msg = stream.message() => {
                    let Some(message) = msg.map_err(|s| ControlError::Refused(s.message().to_owned()))? else {
                        return Err(ControlError::Refused("the snapshot stream ended".into()));
                    };
                    self.got_snapshot = true;
                    match received.merge(message) {
                        Ok(snapshot) => {
                            let snapshot = snapshot.clone();
                            self.on_snapshot(&mut client, snapshot).await;
                        }
                        Err(e) => {
                            // Not on what this stream holds: refuse it, say why, and start
                            // again whole on a new stream (same replica).
                            tracing::warn!("snapshot {} refused: {e}; reopening the stream", e.version());
                            let ack = self.ack(e.version(), Err(e.to_string()), false);
                            let _ = client.ack(ack).await;
                            stream = self.opts.subscribe(&mut client, self.admin).await?;
                            received = delta::Received::default();
                        }
                    }
                }
                _ = tick.tick() => self.on_tick(&mut client).await?,
                _ = shutdown.changed() => return Ok(()),
            }
        }
    }

    /// A whole snapshot: its trust bundle first (a rotation adds the new root before any
    /// certificate from it is presented), a new certificate at once if the CA was rotated, then
    /// the snapshot accepted or refused, and acknowledged.
    async fn on_snapshot(&mut self, client: &mut Client, snapshot: pb::Snapshot) {
        let bundle_applied = self
            .opts
            .sync_bundle(bundle(&snapshot), self.certs.as_deref());
        if snapshot.ca_generation > self.generation {
            self.reissue(client).await;
        }
        let verdict = self.accept(self.opts.to_cached(&snapshot));
        let ack = self.ack(snapshot.version, verdict, bundle_applied);
        let _ = client.ack(ack.clone()).await;
        self.last_ack = Some(ack);
    }

    /// The CA was rotated: renew now, not at 70 % of the life.
    async fn reissue(&mut self, client: &mut Client) {
        match self.opts.issue(client).await {
            Ok(c) => {
                self.renew_at = Some(renewal_time(SystemTime::now(), c.not_after));
                self.generation = c.generation;
                reload(self.certs.as_deref());
                tracing::info!(
                    "certificate reissued under CA generation {}",
                    self.generation
                );
            }
            Err(e) => {
                tracing::warn!("reissue failed, keeping the old certificate: {e}");
                self.renew_at = Some(SystemTime::now());
            }
        }
    }

    /// Puts `fresh` in force (and in the cache), or says why not.
    fn accept(&mut self, fresh: Cached) -> Result<(), String> {
        if let Err(reason) = apply(
            &self.opts,
            &self.state,
            &mut self.base,
            &self.cached,
            &fresh,
        ) {
            tracing::warn!("snapshot {} refused: {reason}", fresh.version);
            return Err(reason);
        }
        if fresh.mesh_yaml != self.cached.mesh_yaml {
            self.domain = trust_domain(&fresh);
        }
        self.cached = fresh;
        self.state
            .version
            .store(self.cached.version, Ordering::Release);
        self.state
            .config_version
            .store(self.cached.config_version, Ordering::Release);
        let _ = self.opts.save_cache(&self.cached);
        Ok(())
    }

    /// The acknowledgement of `version`: accepted, or refused with the reason.
    fn ack(
        &self,
        version: u64,
        verdict: Result<(), String>,
        bundle_applied: bool,
    ) -> pb::AckRequest {
        pb::AckRequest {
            service: self.opts.service.clone(),
            version,
            accepted: verdict.is_ok(),
            reason: verdict.err().unwrap_or_default(),
            token: self.opts.token.current(),
            proxy: self.opts.name.clone(),
            cert_ca_generation: self.generation,
            trust_bundle_applied: bundle_applied,
        }
    }

    /// Every second: the certificate renewed when due, the lease kept and health reported.
    async fn on_tick(&mut self, client: &mut Client) -> Result<(), ControlError> {
        if self.renew_at.is_some_and(|t| SystemTime::now() >= t) {
            self.renew(client).await;
        }
        if let Some(addr) = self.inbound {
            lease::keep_lease(
                &self.opts,
                client,
                (addr, self.admin),
                &mut self.lease,
                &mut self.healthy,
                &self.state,
            )
            .await?;
        }
        Ok(())
    }

    /// Keeps serving with the old certificate when renewal fails; tried again next tick.
    async fn renew(&mut self, client: &mut Client) {
        match self.opts.issue(client).await {
            Ok(c) => {
                self.renew_at = Some(renewal_time(SystemTime::now(), c.not_after));
                reload(self.certs.as_deref());
                tracing::info!("certificate renewed");
                if c.generation != self.generation {
                    self.generation = c.generation;
                    // Say which CA the certificate in use is from.
                    if let Some(ack) = self.last_ack.as_mut() {
                        ack.cert_ca_generation = self.generation;
                        let _ = client.ack(ack.clone()).await;
                    }
                }
            }
            Err(e) => tracing::warn!("renewal failed, keeping the old certificate: {e}"),
        }
    }
}

impl ControlOptions {
    /// Opens this proxy's snapshot stream, saying where its admin endpoint is (if it has one
    /// yet: not while it bootstraps) so the control plane's dashboard can read its metrics.
    pub(super) async fn subscribe(
        &self,
        client: &mut Client,
        admin: Option<SocketAddr>,
    ) -> Result<tonic::Streaming<pb::Snapshot>, ControlError> {
        Ok(client
            .subscribe(pb::SubscribeRequest {
                service: self.service.clone(),
                token: self.token.current(),
                proxy: self.name.clone(),
                admin_addr: admin.map(|a| a.to_string()).unwrap_or_default(),
                // After the first, whole, snapshot: only what changed (merged in `delta`).
                deltas: true,
            })
            .await
            .map_err(|s| ControlError::Refused(s.message().to_owned()))?
            .into_inner())
    }
}
