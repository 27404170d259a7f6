//! A session with the control plane from start to shutdown: [`bootstrap`] (a certificate and
//! the first snapshot from the first replica that answers, or the cache when none does), then
//! [`Session::run`] over the replicas one at a time — moving to the next when a session fails
//! (at once for the first moves, then with back-off once all were tried), presenting the
//! certificate again only once a session worked without it — and a graceful goodbye.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use super::snapshot::bundle;
use super::stream::Run;
use super::{Cached, ControlError, ControlOptions, channel, delta, identity};
use crate::config::ProxyConfig;
use crate::server::State;

/// What `bootstrap` hands over: the configuration to start with, and the session that keeps
/// it (and the certificate, and the lease) current once the proxy runs.
#[derive(Debug)]
pub struct Session {
    opts: ControlOptions,
    cached: Cached,
    /// What the mesh file in force gives this copy, before the command line's overrides: a new
    /// file is compared with it to tell what can change live.
    base: ProxyConfig,
    cert: Option<identity::Cert>,
    online: bool,
    /// The replica that answered first (an index into `opts.servers`).
    server: usize,
}

impl Session {
    /// The addresses of the mesh file in force at start (`Destinations::of`): what a capture
    /// listener (`--capture`) maps connections by until a new file is put in force (then its
    /// addresses, `snapshot::with_destinations`; docs/capture.md).
    pub fn destinations(&self) -> Result<hopwise_model::capture::Destinations, ControlError> {
        hopwise_model::Mesh::from_yaml(&self.cached.mesh_yaml)
            .map(|m| hopwise_model::capture::Destinations::of(&m))
            .map_err(|d| ControlError::Config(d.render("the control plane's mesh file")))
    }
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
) -> Result<(Cached, identity::Cert), ControlError> {
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
        let Session {
            opts,
            cached,
            base,
            cert,
            online,
            server,
        } = self;
        state.version.store(cached.version, Ordering::Release);
        state
            .config_version
            .store(cached.config_version, Ordering::Release);
        if !online {
            tracing::info!("serving snapshot {} from the cache", cached.version);
        }
        let mut run = Run::new(
            opts,
            state,
            (bound.inbound, bound.admin),
            cached,
            base,
            cert,
        );
        let current = failover(&mut run, server, &mut shutdown).await;
        deregister(&run, current).await;
    }
}

/// Sessions, one replica at a time, until shutdown; returns the replica last used.
async fn failover(
    run: &mut Run,
    mut current: usize,
    shutdown: &mut watch::Receiver<bool>,
) -> usize {
    let replicas = run.opts.servers.len().max(1);
    // Failed sessions in a row, across replicas.
    let mut failures = 0usize;
    let mut backoff = Duration::from_millis(250);
    let mut present_cert = true;
    loop {
        let server = run.opts.servers.get(current).cloned().unwrap_or_default();
        run.got_snapshot = false;
        // The session returns on shutdown itself (connecting is bounded by 2 s).
        let result = run.session(&server, present_cert, shutdown).await;
        if run.got_snapshot {
            failures = 0;
            backoff = Duration::from_millis(250);
        }
        // Failing before any snapshot with a certificate presented: try the next session
        // without it (see the module's doc); with it again once one worked.
        present_cert = run.got_snapshot || !present_cert;
        match result {
            Ok(()) => break,
            Err(e) => {
                // The lease is kept: another replica renews it (a shared store), or
                // answers `unknown-lease` and the copy registers again.
                run.healthy = None;
                failures += 1;
                current = (current + 1) % replicas;
                tracing::warn!(
                    "control plane {server}: {e}; serving snapshot {} meanwhile, next: {}",
                    run.cached.version,
                    run.opts.servers.get(current).map_or("-", String::as_str)
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
    current
}

/// A graceful goodbye: the copy leaves the endpoint sets at once, not at lease expiry. Tried
/// on each replica in turn from `current`, until one answers.
async fn deregister(run: &Run, current: usize) {
    let Some(id) = run.lease else { return };
    let replicas = run.opts.servers.len().max(1);
    for i in 0..replicas {
        let server = run
            .opts
            .servers
            .get((current + i) % replicas)
            .cloned()
            .unwrap_or_default();
        let Ok(mut client) = channel::connect(&run.opts, &server, run.domain.clone(), true).await
        else {
            continue;
        };
        let gone = client
            .deregister(super::pb::LeaseRequest {
                lease_id: id,
                token: run.opts.token.current(),
            })
            .await;
        if gone.is_ok() {
            break;
        }
    }
}
