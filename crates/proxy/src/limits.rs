//! Caps on what may be in flight to one upstream service (Envoy's circuit-breaker thresholds):
//! requests in flight, requests waiting for a connection, retries in flight, and the
//! connections themselves. A request over a request cap fails at once with 503 and a header
//! naming the cap — backpressure, never a queue without limit; a request that finds every
//! connection taken waits for one ([`Connections`]), and counts as pending while it does.
//! Shared by all workers of a proxy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use hopwise_model::Limits;
use tokio::sync::Notify;

#[derive(Debug)]
pub struct Gauges {
    limits: Limits,
    active: AtomicU32,
    retries: AtomicU32,
}

/// Which cap refused a request or a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tripped {
    MaxRequests,
    MaxPending,
    MaxRetries,
}

impl Tripped {
    pub fn name(self) -> &'static str {
        match self {
            Tripped::MaxRequests => "max_requests",
            Tripped::MaxPending => "max_pending",
            Tripped::MaxRetries => "max_retries",
        }
    }
}

/// Held while a request is in flight; releases its place on drop.
#[derive(Debug)]
pub struct Admitted<'a> {
    gauge: &'a AtomicU32,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.gauge.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Gauges {
    pub fn new(limits: Limits) -> Self {
        Gauges {
            limits,
            active: AtomicU32::new(0),
            retries: AtomicU32::new(0),
        }
    }

    /// Admits a request, or names the cap it would exceed. Requests beyond
    /// `max_connections` wait for a connection: they are the pending ones.
    pub fn admit(&self) -> Result<Admitted<'_>, Tripped> {
        let before = self.active.fetch_add(1, Ordering::AcqRel);
        let guard = Admitted {
            gauge: &self.active,
        };
        if before >= self.limits.max_requests {
            return Err(Tripped::MaxRequests);
        }
        let waiting = (before + 1).saturating_sub(self.limits.max_connections);
        if waiting > self.limits.max_pending {
            return Err(Tripped::MaxPending);
        }
        Ok(guard)
    }

    /// Admits one retry in flight, or says `max_retries` is reached.
    pub fn admit_retry(&self) -> Result<Admitted<'_>, Tripped> {
        let before = self.retries.fetch_add(1, Ordering::AcqRel);
        let guard = Admitted {
            gauge: &self.retries,
        };
        if before >= self.limits.max_retries {
            return Err(Tripped::MaxRetries);
        }
        Ok(guard)
    }
}

/// The connections open to one upstream service, all workers together, under
/// `limits.max_connections` (which a new configuration may change in place). A connection holds
/// a [`Slot`] for its whole life.
#[derive(Debug)]
pub struct Connections {
    open: AtomicU32,
    max: AtomicU32,
    /// A slot came back.
    freed: Notify,
    /// A request waits for a slot: pools close their idle connections to make room.
    wanted: Notify,
}

/// One connection's place under [`Connections`]; given back when the connection ends.
#[derive(Debug)]
pub struct Slot(Arc<Connections>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify_one();
    }
}

impl Connections {
    pub fn new(max: u32) -> Arc<Connections> {
        Arc::new(Connections {
            open: AtomicU32::new(0),
            max: AtomicU32::new(max),
            freed: Notify::new(),
            wanted: Notify::new(),
        })
    }

    /// No cap (the local app's pools).
    pub fn unlimited() -> Arc<Connections> {
        Connections::new(u32::MAX)
    }

    /// A new configuration's cap; connections open beyond it stay until they end.
    pub fn set_max(&self, max: u32) {
        self.max.store(max, Ordering::Release);
    }

    /// A slot for one more connection, or `None` when the cap is reached.
    pub fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let max = self.max.load(Ordering::Acquire);
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then(|| n + 1)
            })
            .ok()
            .map(|_| Slot(self.clone()))
    }

    pub fn open(&self) -> u32 {
        self.open.load(Ordering::Acquire)
    }

    /// Resolves when a slot may have come back (register it before looking: `enable`).
    pub fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    /// Asks every pool of this upstream to close its idle connections.
    pub fn want(&self) {
        self.wanted.notify_waiters();
    }

    /// Resolves when a request waits for a slot.
    pub fn wanted(&self) -> tokio::sync::futures::Notified<'_> {
        self.wanted.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauges(max_connections: u32, max_pending: u32, max_requests: u32) -> Gauges {
        Gauges::new(Limits {
            max_connections,
            max_pending,
            max_requests,
            max_retries: 1,
        })
    }

    #[test]
    fn requests_beyond_the_caps_are_refused_and_places_come_back() {
        let g = gauges(2, 1, 10);
        let a = g.admit().unwrap();
        let b = g.admit().unwrap();
        let c = g.admit().unwrap(); // waits for a connection: pending 1
        assert_eq!(g.admit().unwrap_err(), Tripped::MaxPending);
        drop((a, b, c));
        assert!(g.admit().is_ok());
        let g = gauges(100, 100, 1);
        let _one = g.admit().unwrap();
        assert_eq!(g.admit().unwrap_err(), Tripped::MaxRequests);
    }

    #[test]
    fn connections_stop_at_the_cap_and_come_back_when_one_ends() {
        let c = Connections::new(2);
        let a = c.try_take().unwrap();
        let _b = c.try_take().unwrap();
        assert!(c.try_take().is_none());
        assert_eq!(c.open(), 2);
        drop(a);
        assert!(c.try_take().is_some());
        c.set_max(5);
        assert!(c.try_take().is_some());
    }

    #[test]
    fn concurrent_retries_are_capped() {
        let g = gauges(1, 1, 1);
        let r = g.admit_retry().unwrap();
        assert_eq!(g.admit_retry().unwrap_err(), Tripped::MaxRetries);
        drop(r);
        assert!(g.admit_retry().is_ok());
    }
}
