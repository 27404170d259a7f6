//! The API on a shared store (feature `etcd`): the registry's calls as etcd leases and keys,
//! the watch that feeds the plane every change made through any replica, and ([`share`]) this
//! replica's records of its proxies. Without the
//! feature, `no_etcd.rs` stands in for this module.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::Shared;
use super::fence::{self, Contact};
use crate::pb;
use crate::plane::{ApiError, Followed};
use crate::store::etcd::client::{etcd_error, read_all};
use crate::store::etcd::{Change, CopyValue, EtcdSpec, EtcdStore, Key};
use hopwise_model::labels::Labels;

mod share;

/// What the API needs of the shared store outside the plane's lock.
pub(super) struct SharedEtcd {
    client: etcd_client::Client,
    spec: EtcdSpec,
    /// The highest revision this replica's watch has put in force.
    applied: watch::Sender<i64>,
    /// When this replica last heard from etcd (its lease, its watch), which decides the fence.
    contact: Mutex<Contact>,
}

/// How often the fence is decided again (well within the lease's TTL).
const FENCE_EVERY: Duration = Duration::from_millis(100);
/// How long a graceful stop waits for the replica's lease to be revoked.
const REVOKE_ON_STOP: Duration = Duration::from_secs(2);

/// How long a call that wrote to etcd waits for this replica's watch to see the write.
const CATCH_UP: Duration = Duration::from_secs(2);

/// The registry's calls on a shared store: the plane checks the token, the address and the
/// lease (its view), etcd holds the lease and the key, the watch brings the change back.
impl SharedEtcd {
    pub(super) fn new(store: &EtcdStore) -> SharedEtcd {
        SharedEtcd {
            client: store.client().clone(),
            spec: store.spec().clone(),
            applied: watch::channel(store.view().revision()).0,
            contact: Mutex::new(Contact::new(Instant::now())),
        }
    }

    fn contact(&self) -> MutexGuard<'_, Contact> {
        match self.contact.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Waits (a bounded time) until the watch has put revision `rev` in force.
    async fn caught_up(&self, rev: i64) {
        let mut applied = self.applied.subscribe();
        let _ = tokio::time::timeout(CATCH_UP, applied.wait_for(|r| *r >= rev)).await;
    }

    pub(super) async fn register(
        &self,
        shared: &Shared,
        r: &pb::RegisterRequest,
        admin: Option<SocketAddr>,
        labels: Labels,
    ) -> Result<(u64, Duration), ApiError> {
        let (service, addr, ttl, stale) = {
            let plane = shared.plane();
            let (service, addr, ttl) = plane.lease_terms(&r.token, &r.inbound_addr, r.ttl_ms)?;
            let stale = plane.leases_at(&service, addr);
            (service, addr, ttl, stale)
        };
        let err = |e: etcd_client::Error| etcd_api_error(&self.spec, &e);
        let mut client = self.client.clone();
        // etcd counts leases in whole seconds.
        let secs = i64::try_from(ttl.as_millis().div_ceil(1000)).unwrap_or(i64::MAX);
        let grant = client.lease_grant(secs, None).await.map_err(err)?;
        let id = grant.id();
        let lease = u64::try_from(id).unwrap_or(0);
        let granted = Duration::from_secs(u64::try_from(grant.ttl()).unwrap_or(0).max(1));
        let value = CopyValue {
            addr,
            healthy: false,
            ttl_ms: u64::try_from(granted.as_millis()).unwrap_or(u64::MAX),
            admin,
            labels,
        };
        let mut rev = put_copy(&mut client, &self.spec, service, lease, &value)
            .await
            .map_err(err)?;
        // The same address registered again (a restarted copy): the old lease goes.
        for old in stale {
            match client.lease_revoke(i64::try_from(old).unwrap_or(0)).await {
                Ok(resp) => rev = rev.max(header_revision(resp.header())),
                Err(e) if lease_gone(&e) => {}
                Err(e) => tracing::warn!("the old lease {old:x} at {addr} stays: {e}"),
            }
        }
        self.caught_up(rev).await;
        Ok((lease, granted))
    }

    pub(super) async fn renew(
        &self,
        shared: &Shared,
        token: &str,
        lease: u64,
    ) -> Result<(), ApiError> {
        shared.plane().leased_copy(token, lease)?;
        let mut client = self.client.clone();
        match client
            .lease_keep_alive(i64::try_from(lease).unwrap_or(0))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if lease_gone(&e) => Err(ApiError::UnknownLease(lease)),
            Err(e) => Err(etcd_api_error(&self.spec, &e)),
        }
    }

    pub(super) async fn set_health(
        &self,
        shared: &Shared,
        token: &str,
        lease: u64,
        healthy: bool,
    ) -> Result<(), ApiError> {
        let copy = shared.plane().leased_copy(token, lease)?;
        if copy.healthy == healthy {
            return Ok(());
        }
        let value = CopyValue {
            addr: copy.inbound,
            healthy,
            ttl_ms: u64::try_from(copy.ttl.as_millis()).unwrap_or(u64::MAX),
            admin: copy.admin,
            labels: copy.labels,
        };
        let mut client = self.client.clone();
        let rev = put_copy(&mut client, &self.spec, copy.service, lease, &value)
            .await
            .map_err(|e| {
                if lease_gone(&e) {
                    ApiError::UnknownLease(lease)
                } else {
                    etcd_api_error(&self.spec, &e)
                }
            })?;
        self.caught_up(rev).await;
        Ok(())
    }

    pub(super) async fn deregister(
        &self,
        shared: &Shared,
        token: &str,
        lease: u64,
    ) -> Result<(), ApiError> {
        shared.plane().leased_copy(token, lease)?;
        let mut client = self.client.clone();
        match client.lease_revoke(i64::try_from(lease).unwrap_or(0)).await {
            Ok(resp) => {
                self.caught_up(header_revision(resp.header())).await;
                Ok(())
            }
            Err(e) if lease_gone(&e) => Ok(()),
            Err(e) => Err(etcd_api_error(&self.spec, &e)),
        }
    }
}

/// Acts on what the watch brought: token files, the bundle file, the log, the streams.
fn react(shared: &Arc<Shared>, etcd: &SharedEtcd, followed: Followed, rev: i64) {
    {
        let plane = shared.plane();
        if followed.tokens
            && let Err(e) = plane.store().write_tokens()
        {
            tracing::warn!("new join tokens, but the token files were not written: {e}");
        }
        if followed.bundle
            && let Err(e) = plane.store().write_bundle(&plane.ca().trust_bundle_pem())
        {
            tracing::warn!("a new trust bundle, but the file was not written: {e}");
        }
    }
    for p in &followed.problems {
        tracing::warn!("{p}");
    }
    if followed.publish {
        shared.publish();
    }
    etcd.applied.send_if_modified(|r| {
        let newer = rev > *r;
        *r = (*r).max(rev);
        newer
    });
}

fn etcd_api_error(spec: &EtcdSpec, e: &etcd_client::Error) -> ApiError {
    ApiError::Store(etcd_error(spec, e).to_string())
}

/// etcd's answer for a lease it does not hold (expired, revoked, or never granted).
fn lease_gone(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::NotFound || s.message().contains("lease not found")
        }
        _ => false,
    }
}

/// Writes a copy's record, attached to its lease. Returns the revision written.
async fn put_copy(
    client: &mut etcd_client::Client,
    spec: &EtcdSpec,
    service: String,
    lease: u64,
    value: &CopyValue,
) -> Result<i64, etcd_client::Error> {
    let key = spec.layout().key(&Key::Copy { service, lease });
    let id = i64::try_from(lease).unwrap_or(0);
    let put = client
        .put(
            key,
            value.encode(),
            Some(etcd_client::PutOptions::new().with_lease(id)),
        )
        .await?;
    Ok(header_revision(put.header()))
}

fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> i64 {
    h.map_or(0, etcd_client::ResponseHeader::revision)
}

/// Follows the shared store (the watch below), writes this replica's records of its proxies
/// beside it ([`share`]), and fences the replica while it is cut off etcd ([`fence`]). Returns
/// after a graceful stop, once the replica's lease is revoked (or a short bound passed).
pub(super) async fn follow(shared: Arc<Shared>, shutdown: watch::Receiver<bool>) {
    let share = tokio::spawn(share::share_proxies(shared.clone(), shutdown.clone()));
    let fencing = tokio::spawn(keep_fence(shared.clone()));
    watch_store(&shared, shutdown).await;
    fencing.abort();
    // The records leave now rather than with the lease's TTL, as documented.
    let _ = tokio::time::timeout(REVOKE_ON_STOP, share).await;
}

/// Decides the fence again and again: a replica that lost its etcd lease, or whose watch is
/// broken beyond the lease's TTL, ends its proxies' streams and refuses their calls, so they
/// move to a replica the others see; it serves again once etcd grants it a new lease.
async fn keep_fence(shared: Arc<Shared>) {
    let Some(etcd) = &shared.etcd else { return };
    let mut tick = tokio::time::interval(FENCE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let why = fence::fenced(&etcd.contact(), Instant::now(), share::REPLICA_TTL);
        // Only a change of state is sent (the streams wait for `Some`).
        shared.fence.send_if_modified(|now| {
            if now.is_some() == why.is_some() {
                return false;
            }
            match &why {
                Some(why) => tracing::warn!(
                    "fenced: this replica lost the shared store (etcd): {why}; ending its \
                     proxies' streams and refusing their calls until it holds a lease again"
                ),
                None => tracing::info!("no longer fenced: serving proxies again"),
            }
            (*now).clone_from(&why);
            true
        });
    }
}

/// One watch on the prefix from the revision the plane holds; when it breaks (etcd
/// restarting, a compaction), the whole prefix is read again and the watch resumes from there.
async fn watch_store(shared: &Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let Some(etcd) = &shared.etcd else { return };
    let mut client = etcd.client.clone();
    let root = etcd.spec.layout().root();
    let mut from = *etcd.applied.borrow();
    let mut broken = false;
    loop {
        if broken {
            match read_all(&etcd.spec, &mut client).await {
                Ok((changes, at)) => {
                    let followed =
                        shared
                            .plane()
                            .resync(changes, at, Instant::now(), SystemTime::now());
                    tracing::info!(revision = at, "read the shared store again");
                    react(shared, etcd, followed, at);
                    from = at;
                    broken = false;
                }
                Err(e) => {
                    tracing::warn!("{e}; serving what this replica knows meanwhile");
                }
            }
        }
        if !broken {
            let options = etcd_client::WatchOptions::new()
                .with_prefix()
                .with_start_revision(from + 1);
            match client.watch(root.clone(), Some(options)).await {
                Err(e) => {
                    tracing::warn!("{}", etcd_error(&etcd.spec, &e));
                    broken = true;
                }
                Ok(mut stream) => loop {
                    etcd.contact().watch_running();
                    let msg = tokio::select! {
                        msg = stream.message() => msg,
                        _ = shutdown.wait_for(|stopped| *stopped) => return,
                    };
                    let resp = match msg {
                        Ok(Some(resp)) => resp,
                        Ok(None) => {
                            tracing::warn!("the watch on {} ended", etcd.spec.url());
                            broken = true;
                            break;
                        }
                        Err(e) => {
                            tracing::warn!("{}", etcd_error(&etcd.spec, &e));
                            broken = true;
                            break;
                        }
                    };
                    if resp.canceled() {
                        tracing::warn!(
                            compacted = resp.compact_revision(),
                            "the watch on {} was cancelled: {}",
                            etcd.spec.url(),
                            resp.cancel_reason()
                        );
                        broken = true;
                        break;
                    }
                    let changes: Vec<Change> = resp
                        .events()
                        .iter()
                        .filter_map(|ev| {
                            let kv = ev.kv()?;
                            Some(Change {
                                key: String::from_utf8_lossy(kv.key()).into_owned(),
                                value: match ev.event_type() {
                                    etcd_client::EventType::Put => Some(kv.value().to_vec()),
                                    etcd_client::EventType::Delete => None,
                                },
                                revision: kv.mod_revision(),
                            })
                        })
                        .collect();
                    let Some(rev) = changes.iter().map(|c| c.revision).max() else {
                        continue;
                    };
                    let followed =
                        shared
                            .plane()
                            .follow(&changes, Instant::now(), SystemTime::now());
                    react(shared, etcd, followed, rev);
                    from = from.max(rev);
                },
            }
        }
        if broken {
            etcd.contact().watch_broken(Instant::now());
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = shutdown.wait_for(|stopped| *stopped) => return,
        }
    }
}
