//! The server's background tasks on a clock: leases dropped the moment they expire (embedded
//! store), and once a second the control port's certificate renewed and the records of proxies
//! gone for good pruned.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::Shared;

/// Once a second: renews the control port's certificate before it expires (a CA change renews
/// it at once, in [`Shared::publish`]; here one pointer comparison under the plane's lock), and
/// drops the records of proxies gone for good ([`Plane::prune_proxies`]).
pub(super) async fn renew_certificate(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        shared.renew_certificate();
        let pruned = shared
            .plane()
            .prune_proxies(Instant::now(), SystemTime::now());
        if pruned > 0 {
            tracing::info!(pruned, "dropped the records of proxies gone for good");
        }
    }
}

/// Drops each lease the moment it expires and publishes the change.
pub(super) async fn expire_leases(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let next = shared.plane().next_expiry();
        let wait = async {
            match next {
                Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait => {}
            _ = shared.kick.notified() => {}
            _ = shutdown.changed() => return,
        }
        let published = {
            let mut plane = shared.plane();
            plane.expire(Instant::now()).then(|| plane.version())
        };
        if let Some(v) = published {
            tracing::info!(version = v, "a lease expired");
            shared.publish();
        }
    }
}
