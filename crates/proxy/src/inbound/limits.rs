//! Caps on requests from the mesh to the local app (`services.<name>.inbound`): in flight per
//! proxy, and per calling identity, so one caller cannot take every connection the app has. A
//! request over a cap fails at once with 503 and `x-hopwise-limit` naming the cap, as the
//! outbound caps do ([`crate::limits`]). Shared by all workers of a proxy.
//!
//! The per-caller table holds only callers with a request in flight (an entry goes at zero),
//! and a caller is counted there only once the proxy-wide cap admitted it, so it never holds
//! more than `max_requests` entries, whatever identities callers present.
//!
//! A caller is counted by its [`CallerKey`]: the identity hashed once per connection, at the
//! handshake, with a key drawn at start — so a request costs a lock and a lookup of a number,
//! not two hashings of a SPIFFE ID (measured: ~1,000 instructions per inbound request).
//! Two identities whose 64-bit hashes meet would share one count: stricter, never looser.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use hopwise_model::InboundLimits;

/// The name of each cap, in `x-hopwise-limit` and the `limits_tripped` metric.
pub const MAX_REQUESTS: &str = "inbound.max_requests";
pub const MAX_REQUESTS_PER_CALLER: &str = "inbound.max_requests_per_caller";

/// A calling identity as the per-caller table counts it: its hash under the process's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallerKey(u64);

impl CallerKey {
    /// Once per connection: the identity's hash, keyed by a secret drawn at the first call.
    pub fn of(identity: &str) -> CallerKey {
        static KEY: OnceLock<RandomState> = OnceLock::new();
        CallerKey(KEY.get_or_init(RandomState::new).hash_one(identity))
    }
}

/// The table's keys are hashes already: used as they are.
#[derive(Debug, Default)]
pub(super) struct AsIs(u64);

impl Hasher for AsIs {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (CallerKey's derived Hash); fold anything else in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Callers = HashMap<CallerKey, u32, BuildHasherDefault<AsIs>>;

#[derive(Debug)]
pub struct InboundGauges {
    limits: InboundLimits,
    active: AtomicU32,
    callers: Mutex<Callers>,
}

/// Held while a request to the app is in flight; gives its places back on drop.
#[derive(Debug)]
pub struct Admitted<'a> {
    gauges: &'a InboundGauges,
    caller: Option<CallerKey>,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let Some(caller) = self.caller.take() {
            let mut callers = self.gauges.callers();
            if let Some(n) = callers.get_mut(&caller) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    callers.remove(&caller);
                }
            }
        }
        self.gauges.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// [`Admitted`] with its gauges owned ([`InboundGauges::admit_held`]).
#[derive(Debug)]
pub struct Held {
    gauges: Arc<InboundGauges>,
    caller: Option<CallerKey>,
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(Admitted {
            gauges: &self.gauges,
            caller: self.caller.take(),
        });
    }
}

impl InboundGauges {
    pub fn new(limits: InboundLimits) -> Arc<Self> {
        Arc::new(InboundGauges {
            limits,
            active: AtomicU32::new(0),
            callers: Mutex::new(Callers::default()),
        })
    }

    /// The gauges under a new configuration: `previous`'s (with what is in flight) if the
    /// caps are the same.
    pub fn next(limits: InboundLimits, previous: Option<&Arc<InboundGauges>>) -> Arc<Self> {
        match previous {
            Some(p) if p.limits == limits => p.clone(),
            _ => InboundGauges::new(limits),
        }
    }

    pub fn limits(&self) -> &InboundLimits {
        &self.limits
    }

    fn callers(&self) -> MutexGuard<'_, Callers> {
        // A panic elsewhere while counting leaves counts that are still counts.
        self.callers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a request from `caller` (none: plaintext mode, no identity to count by), or
    /// names the cap it would exceed.
    pub fn admit(&self, caller: Option<CallerKey>) -> Result<Admitted<'_>, &'static str> {
        let before = self.active.fetch_add(1, Ordering::AcqRel);
        let mut guard = Admitted {
            gauges: self,
            caller: None,
        };
        if before >= self.limits.max_requests {
            return Err(MAX_REQUESTS);
        }
        if let Some(caller) = caller {
            let mut callers = self.callers();
            let n = callers.entry(caller).or_insert(0);
            if *n >= self.limits.max_requests_per_caller {
                if *n == 0 {
                    callers.remove(&caller);
                }
                return Err(MAX_REQUESTS_PER_CALLER);
            }
            *n += 1;
            guard.caller = Some(caller);
        }
        Ok(guard)
    }

    /// As [`admit`](Self::admit), the place held by an owner of the gauges: an upgraded
    /// connection's own task keeps it for as long as the connection lives.
    pub fn admit_held(self: &Arc<Self>, caller: Option<CallerKey>) -> Result<Held, &'static str> {
        let admitted = self.admit(caller)?;
        let caller = admitted.caller;
        // Its place is handed to `Held`, whose drop gives it back the same way.
        std::mem::forget(admitted);
        Ok(Held {
            gauges: self.clone(),
            caller,
        })
    }

    /// Callers with a request in flight (for tests: the table stays bounded).
    pub fn callers_in_flight(&self) -> usize {
        self.callers().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopwise_model::Dur;

    fn gauges(max_requests: u32, max_requests_per_caller: u32) -> Arc<InboundGauges> {
        InboundGauges::new(InboundLimits {
            max_requests,
            max_requests_per_caller,
            timeout: Some(Dur::from_millis(1000)),
        })
    }

    #[test]
    fn a_held_place_counts_until_it_is_dropped() {
        let g = gauges(1, 1);
        let a = CallerKey::of("spiffe://m/service/a");
        let held = g.admit_held(Some(a)).unwrap();
        assert_eq!(g.admit(Some(a)).unwrap_err(), MAX_REQUESTS);
        assert_eq!(g.callers_in_flight(), 1);
        drop(held);
        assert_eq!(g.callers_in_flight(), 0);
        assert!(g.admit(Some(a)).is_ok());
    }

    #[test]
    fn each_caller_is_capped_and_others_still_get_through() {
        let g = gauges(3, 2);
        let a = CallerKey::of("spiffe://m/service/a");
        let b = CallerKey::of("spiffe://m/service/b");
        assert_ne!(a, b);
        let a1 = g.admit(Some(a)).unwrap();
        let _a2 = g.admit(Some(a)).unwrap();
        assert_eq!(g.admit(Some(a)).unwrap_err(), MAX_REQUESTS_PER_CALLER);
        let _b1 = g.admit(Some(b)).unwrap();
        assert_eq!(g.admit(Some(b)).unwrap_err(), MAX_REQUESTS);
        drop(a1);
        assert!(g.admit(Some(a)).is_ok());
    }

    #[test]
    fn the_caller_table_holds_only_callers_in_flight() {
        let g = gauges(4, 1);
        let held: Vec<_> = (0..100)
            .map(|i| g.admit(Some(CallerKey::of(&format!("spiffe://m/service/c{i}")))))
            .collect();
        assert_eq!(held.iter().filter(|r| r.is_ok()).count(), 4);
        assert_eq!(g.callers_in_flight(), 4);
        drop(held);
        assert_eq!(g.callers_in_flight(), 0);
        assert_eq!(g.active.load(Ordering::Acquire), 0);
    }

    #[test]
    fn plaintext_callers_count_only_against_the_proxy() {
        let g = gauges(2, 1);
        let _one = g.admit(None).unwrap();
        let _two = g.admit(None).unwrap();
        assert_eq!(g.admit(None).unwrap_err(), MAX_REQUESTS);
        assert_eq!(g.callers_in_flight(), 0);
    }
}
