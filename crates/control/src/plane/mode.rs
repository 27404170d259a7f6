//! What differs between the embedded store and a shared one, in one place, so every operation
//! of the plane reads once: how versions grow, who expires leases, and whether what this
//! replica knows of its proxies is written for other replicas. The plane holds one [`Mode`],
//! chosen by its store at the start; the shared store's own operations (its watch) are in
//! `replicas.rs`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::registry::{Copy, LeaseId, Registry};
use crate::store::Store;
use crate::store::etcd::Effect;

use super::proxies::Remote;

/// With a shared store, etcd expires the leases; the registry's own clock never does.
pub(super) const SHARED_LEASE_HORIZON: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The embedded store, or replicas sharing etcd.
#[derive(Debug)]
pub(super) enum Mode {
    /// One control plane on its state directory: versions are (starts << 32) | changes since
    /// this start, and leases expire here.
    Embedded,
    /// Replicas sharing etcd: versions are etcd revisions, etcd expires the leases, and each
    /// replica writes the records of its proxies for the others.
    Shared(Records),
}

/// Shared store: the records of proxies this replica has yet to write or delete.
#[derive(Debug, Default)]
pub(super) struct Records {
    /// Proxies whose record is to be written.
    pub(super) dirty: BTreeSet<(String, String)>,
    /// Proxies pruned, whose record is to be deleted.
    pub(super) pruned: BTreeSet<(String, String)>,
}

/// Where a start begins: the mode, the first version's two halves, and the registry (with the
/// copies a shared store already holds; their facts are learnt into `remote` too).
pub(super) struct Begin {
    pub(super) mode: Mode,
    pub(super) epoch: u64,
    pub(super) changes: u64,
    pub(super) registry: Registry,
}

impl Mode {
    /// The mode of `store`, just written at `written` (the etcd revision, if any).
    pub(super) fn begin(store: &mut Store, written: Option<u64>, remote: &mut Remote) -> Begin {
        let Some(e) = store.etcd_mut() else {
            let epoch = store.state().starts;
            return Begin {
                mode: Mode::Embedded,
                epoch,
                changes: 0,
                registry: Registry::starting_after(epoch << 32),
            };
        };
        // The etcd revision: the same for every replica and growing across etcd's restarts.
        let changes = written.unwrap_or(0).max(revision(e.view().revision()));
        let mut registry = Registry::starting_after(0);
        let (copies, read_at) = e.take_initial_copies();
        let far = read_at + SHARED_LEASE_HORIZON;
        for effect in copies {
            remote.learn(None, &effect);
            put_copy(&mut registry, effect, far);
        }
        Begin {
            mode: Mode::Shared(Records::default()),
            epoch: 0,
            changes,
            registry,
        }
    }

    pub(super) fn is_shared(&self) -> bool {
        matches!(self, Mode::Shared(_))
    }

    /// A change proxies may see: `changes` grows by one (embedded), or becomes the etcd
    /// revision it was written at (shared; versions never go back).
    pub(super) fn bump(&self, changes: &mut u64, written: Option<u64>) {
        match (self, written) {
            (Mode::Embedded, _) => *changes += 1,
            (Mode::Shared(_), Some(rev)) => *changes = (*changes).max(rev),
            (Mode::Shared(_), None) => {}
        }
    }

    /// What changed about a proxy is to be written (shared only).
    pub(super) fn share(&mut self, key: (String, String)) {
        if let Mode::Shared(r) = self {
            r.dirty.insert(key);
        }
    }

    /// Every record is to be written again (shared only).
    pub(super) fn reshare(&mut self, keys: impl Iterator<Item = (String, String)>) {
        if let Mode::Shared(r) = self {
            r.dirty = keys.collect();
        }
    }

    /// A proxy's record was dropped: not written any more, and deleted (shared only).
    pub(super) fn pruned(&mut self, key: &(String, String)) {
        if let Mode::Shared(r) = self {
            r.dirty.remove(key);
            r.pruned.insert(key.clone());
        }
    }

    /// How long `Status` says a copy has left: its TTL on a shared store (etcd keeps the
    /// lease), the time until it expires here on the embedded one.
    pub(super) fn expires_in(&self, c: &Copy, now: Instant) -> Duration {
        match self {
            Mode::Shared(_) => c.ttl,
            Mode::Embedded => c.expires.saturating_duration_since(now),
        }
    }
}

/// An etcd revision as a version.
pub(super) fn revision(r: i64) -> u64 {
    u64::try_from(r).unwrap_or(0)
}

/// A copy seen in the shared store, into the registry (its lease expires in etcd, not here).
pub(super) fn put_copy(registry: &mut Registry, effect: Effect, far: Instant) {
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
        let _ = registry.set_labels(LeaseId(lease), value.labels);
    }
}
