//! Caps on what may be in flight to one upstream service (Envoy's circuit-breaker thresholds):
//! requests in flight, requests waiting for a connection, retries in flight. A request over a
//! cap fails at once with 503 and a header naming the cap — backpressure, never a queue without
//! limit. Shared by all workers of a proxy.

use std::sync::atomic::{AtomicU32, Ordering};

use hopwise_model::Limits;

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
    fn concurrent_retries_are_capped() {
        let g = gauges(1, 1, 1);
        let r = g.admit_retry().unwrap();
        assert_eq!(g.admit_retry().unwrap_err(), Tripped::MaxRetries);
        drop(r);
        assert!(g.admit_retry().is_ok());
    }
}
