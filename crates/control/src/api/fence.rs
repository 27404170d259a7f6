//! Fencing (shared store only): whether this replica may still serve proxies, from when it last
//! heard from etcd. A replica whose lease lapsed has vanished from the other replicas' view of
//! the mesh: they no longer count its proxies before a CA rotation's `reissue` or `retire`. So it
//! must stop serving them, and they move to a replica whose word the others see. Pure: callers
//! pass the times.

use std::time::{Duration, Instant};

/// What this replica last heard from etcd.
#[derive(Debug, Clone)]
pub(super) struct Contact {
    /// When its lease was last granted or kept alive (at start: when it started).
    renewed: Instant,
    /// etcd said its lease is gone (expired or revoked); cleared by a new lease.
    lease_gone: bool,
    /// Since when its watch has been broken; `None` while it runs.
    watch_broken: Option<Instant>,
}

impl Contact {
    pub(super) fn new(now: Instant) -> Contact {
        Contact {
            renewed: now,
            lease_gone: false,
            watch_broken: None,
        }
    }

    /// A lease granted, or kept alive.
    pub(super) fn renewed(&mut self, now: Instant) {
        self.renewed = now;
        self.lease_gone = false;
    }

    /// etcd answered that the lease no longer exists.
    pub(super) fn lease_gone(&mut self) {
        self.lease_gone = true;
    }

    /// The watch broke (kept at the first break until it runs again).
    pub(super) fn watch_broken(&mut self, now: Instant) {
        self.watch_broken.get_or_insert(now);
    }

    /// The watch runs again, from a fresh read of the store.
    pub(super) fn watch_running(&mut self) {
        self.watch_broken = None;
    }
}

/// Why this replica is fenced, or `None` while it may serve. `ttl` is its lease's TTL: past it
/// without a keep-alive, etcd has (or may have) dropped its records; a watch broken as long
/// leaves its view of the others' just as stale.
pub(super) fn fenced(contact: &Contact, now: Instant, ttl: Duration) -> Option<String> {
    if contact.lease_gone {
        return Some(
            "etcd reports this replica's lease gone (its records of its proxies with it)".into(),
        );
    }
    let silent = now.saturating_duration_since(contact.renewed);
    if silent >= ttl {
        return Some(format!(
            "its lease was not kept alive for {:.1} s (TTL {} s): the other replicas no longer \
             see its proxies",
            silent.as_secs_f64(),
            ttl.as_secs()
        ));
    }
    let broken = contact
        .watch_broken
        .map(|since| now.saturating_duration_since(since))
        .filter(|broken| *broken >= ttl)?;
    Some(format!(
        "its watch has been broken for {:.1} s: its view of the mesh is stale",
        broken.as_secs_f64()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(5);

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn serving_while_the_lease_is_kept_alive_and_the_watch_runs() {
        let t0 = Instant::now();
        let mut c = Contact::new(t0);
        assert_eq!(fenced(&c, at(t0, 4_999), TTL), None);
        c.renewed(at(t0, 4_000));
        assert_eq!(fenced(&c, at(t0, 8_999), TTL), None);
    }

    #[test]
    fn fenced_once_no_keep_alive_for_the_ttl_and_unfenced_by_a_new_lease() {
        let t0 = Instant::now();
        let mut c = Contact::new(t0);
        c.renewed(at(t0, 1_000));
        let why = fenced(&c, at(t0, 6_000), TTL).unwrap_or_default();
        assert!(why.contains("not kept alive for 5.0 s"), "{why}");
        c.renewed(at(t0, 7_000));
        assert_eq!(fenced(&c, at(t0, 7_000), TTL), None);
    }

    #[test]
    fn fenced_at_once_when_etcd_says_the_lease_is_gone_until_a_new_one() {
        let t0 = Instant::now();
        let mut c = Contact::new(t0);
        c.lease_gone();
        let why = fenced(&c, at(t0, 1), TTL).unwrap_or_default();
        assert!(why.contains("lease gone"), "{why}");
        c.renewed(at(t0, 500));
        assert_eq!(fenced(&c, at(t0, 600), TTL), None);
    }

    #[test]
    fn a_watch_broken_for_the_ttl_fences_even_with_the_lease_alive() {
        let t0 = Instant::now();
        let mut c = Contact::new(t0);
        c.watch_broken(at(t0, 1_000));
        // A second break report does not restart the clock.
        c.watch_broken(at(t0, 3_000));
        c.renewed(at(t0, 5_500));
        assert_eq!(fenced(&c, at(t0, 5_999), TTL), None);
        let why = fenced(&c, at(t0, 6_000), TTL).unwrap_or_default();
        assert!(why.contains("watch has been broken for 5.0 s"), "{why}");
        c.watch_running();
        assert_eq!(fenced(&c, at(t0, 6_000), TTL), None);
    }
}
