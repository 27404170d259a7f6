//! This replica's word about its proxies, in the shared store (feature `etcd`): on an etcd lease
//! of its own, kept alive here, it writes each proxy's record
//! (`<prefix>/proxies/<service>/<proxy>/<lease>`: its stream here, its last acknowledgement)
//! when the plane says something changed. The records vanish with the lease when the replica
//! dies, and at once when it stops gracefully (the lease is revoked).
//!
//! Writes are coalesced: every 100 ms, the latest facts of each proxy that changed, in one
//! transaction (a proxy acknowledging several versions meanwhile is written once). The lease is
//! kept alive between a rewrite's transactions too, so many records on a slow etcd cannot let it
//! lapse. Each keep-alive (or its failure) is told to the fence ([`super::fence`]). Records of
//! proxies the plane pruned (gone for good, [`crate::plane::Plane::prune_proxies`]) are deleted
//! in the same transactions; a failed delete leaves the record until this replica's lease ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp};
use tokio::sync::watch;

use super::super::Shared;
use super::{SharedEtcd, lease_gone};
use crate::store::etcd::client::etcd_error;

/// How long this replica's records outlive it: its lease's TTL (seconds).
const REPLICA_TTL_SECS: i64 = 5;
/// The same, for the fence: a replica not kept alive this long is no longer seen by the others.
pub(super) const REPLICA_TTL: Duration = Duration::from_secs(REPLICA_TTL_SECS.unsigned_abs());
/// How often the lease is kept alive (well within its TTL).
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How often what changed is written.
const WRITE_EVERY: Duration = Duration::from_millis(100);
/// After a failure (etcd down), the next try.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long one etcd request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// etcd's default limit of operations in one transaction (`--max-txn-ops`).
const OPS_PER_TXN: usize = 128;

/// The replica's lease, and the keep-alive stream that renews it.
struct Lease {
    id: i64,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
    renewed: Instant,
}

/// Keeps the replica's lease alive and writes its proxies' records until shutdown.
pub(in crate::api) async fn share_proxies(
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(etcd) = &shared.etcd else { return };
    let mut client = etcd.client.clone();
    let mut lease: Option<Lease> = None;
    let mut failing = false;
    loop {
        let pause = match step(&shared, &mut client, &mut lease).await {
            Ok(()) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("writing the proxies' records to the shared store again");
                }
                WRITE_EVERY
            }
            Err(e) => {
                // Once per outage: the watch logs etcd's state too.
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(
                        "{e}; the other replicas do not see this one's proxies until it is back"
                    );
                }
                RETRY_AFTER
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.wait_for(|stopped| *stopped) => break,
        }
    }
    // Stopping gracefully: the records go at once, not when the lease would expire.
    if let Some(l) = lease {
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, client.lease_revoke(l.id)).await;
    }
}

/// One round: a lease (granted if there is none, renewed when due), then the writes.
async fn step(
    shared: &Shared,
    client: &mut etcd_client::Client,
    lease: &mut Option<Lease>,
) -> Result<(), String> {
    let Some(etcd) = &shared.etcd else {
        return Ok(());
    };
    let fail = |e: &etcd_client::Error| etcd_error(&etcd.spec, e).to_string();
    let timed_out = || {
        format!(
            "etcd at {}: no answer within {REQUEST_TIMEOUT:?}",
            etcd.spec.url()
        )
    };
    if lease.is_none() {
        {
            let granted = async {
                let grant = client.lease_grant(REPLICA_TTL_SECS, None).await?;
                let (keeper, stream) = client.lease_keep_alive(grant.id()).await?;
                Ok::<_, etcd_client::Error>((grant.id(), keeper, stream))
            };
            let (id, keeper, stream) = tokio::time::timeout(REQUEST_TIMEOUT, granted)
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| fail(&e))?;
            // Every record is written again, on this lease.
            shared.plane().set_replica_lease(u64::try_from(id).ok());
            etcd.contact().renewed(Instant::now());
            *lease = Some(Lease {
                id,
                keeper,
                stream,
                renewed: Instant::now(),
            });
        }
    }
    keep_alive(shared, etcd, lease).await?;
    let Some(writes) = shared.plane().take_proxy_writes() else {
        return Ok(());
    };
    let id = i64::try_from(writes.lease).unwrap_or(0);
    // Pruned proxies' records go first: puts never name them (the plane dropped them).
    let deletes = writes
        .deletes
        .iter()
        .map(|k| TxnOp::delete(k.clone(), None));
    let puts = writes
        .puts
        .iter()
        .map(|(k, v)| TxnOp::put(k.clone(), v.clone(), Some(PutOptions::new().with_lease(id))));
    let ops: Vec<TxnOp> = deletes.chain(puts).collect();
    for chunk in ops.chunks(OPS_PER_TXN) {
        // Between transactions too: a long rewrite must not let the lease lapse.
        if let Err(e) = keep_alive(shared, etcd, lease).await {
            shared.plane().reshare_proxies();
            return Err(e);
        }
        let txn = Txn::new().and_then(chunk.to_vec());
        let written = tokio::time::timeout(REQUEST_TIMEOUT, client.txn(txn))
            .await
            .map_err(|_| timed_out());
        let error = match written {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => {
                if lease_gone(&e) {
                    *lease = None;
                    shared.plane().set_replica_lease(None);
                    etcd.contact().lease_gone();
                }
                fail(&e)
            }
            Err(e) => e,
        };
        // Written again next time, whole (some of it may have been).
        shared.plane().reshare_proxies();
        return Err(error);
    }
    Ok(())
}

/// Keeps the lease alive when due. On failure the lease is dropped (a new one is granted next
/// time; the old one's records expire with it).
async fn keep_alive(
    shared: &Shared,
    etcd: &SharedEtcd,
    lease: &mut Option<Lease>,
) -> Result<(), String> {
    let Some(l) = lease.as_mut() else {
        return Ok(());
    };
    if l.renewed.elapsed() < RENEW_EVERY {
        return Ok(());
    }
    let renewed = async {
        l.keeper.keep_alive().await?;
        l.stream.message().await
    };
    let outcome = tokio::time::timeout(REQUEST_TIMEOUT, renewed).await;
    if let Ok(Ok(Some(r))) = &outcome
        && r.ttl() > 0
    {
        l.renewed = Instant::now();
        etcd.contact().renewed(l.renewed);
        return Ok(());
    }
    *lease = None;
    shared.plane().set_replica_lease(None);
    let url = etcd.spec.url();
    Err(match outcome {
        Ok(Err(e)) => {
            if reported_gone(&e) {
                etcd.contact().lease_gone();
            }
            etcd_error(&etcd.spec, &e).to_string()
        }
        Err(_) => format!("etcd at {url}: no answer within {REQUEST_TIMEOUT:?}"),
        Ok(Ok(None)) => format!("etcd at {url}: the lease's keep-alive stream ended"),
        Ok(Ok(Some(_))) => {
            // A TTL of 0: etcd says the lease expired.
            etcd.contact().lease_gone();
            format!("etcd at {url}: this replica's lease expired")
        }
    })
}

/// etcd's own word that the lease is gone. Not [`lease_gone`]: a keep-alive stream that broke
/// (etcd out of reach) also says `LeaseKeepAliveError`, and that fences only after the TTL.
fn reported_gone(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("lease not found"),
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::NotFound || s.message().contains("lease not found")
        }
        _ => false,
    }
}
