//! Choosing a copy for each try, and taking copies that keep failing out of the rotation.
//!
//! Shared by all workers of a proxy (atomics and short locks), so load and ejections are seen
//! proxy-wide. Power of two choices picks the better of two random copies — by requests in
//! flight, or by peak-EWMA latency × requests in flight (Linkerd's) — and never a copy this
//! request already tried when another exists (Envoy's `previous_hosts`). Outlier ejection is
//! Envoy's consecutive-gateway-failure detector, enforced.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use hopwise_model::{Balancer, Outlier};
use tokio::time::Instant;

/// Decay of the latency average (Linkerd's default is 10 s).
const EWMA_DECAY: Duration = Duration::from_secs(10);
/// What an unmeasured copy is assumed to take (Linkerd's default RTT).
const EWMA_DEFAULT: Duration = Duration::from_millis(30);
/// Ejections never last longer than this (Envoy's `max_ejection_time` default).
const MAX_EJECTION: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct Ewma {
    value_ns: f64,
    at: Option<Instant>,
}

#[derive(Debug)]
struct Ejection {
    until: Option<Instant>,
    times: u32,
}

/// What we know about one copy.
#[derive(Debug)]
pub struct Endpoint {
    pub addr: SocketAddr,
    outstanding: AtomicUsize,
    failures: AtomicU32,
    ewma: Mutex<Ewma>,
    ejection: Mutex<Ejection>,
}

/// The copies of one upstream service.
#[derive(Debug)]
pub struct Endpoints {
    pub list: Vec<Endpoint>,
    balancer: Balancer,
    outlier: Option<Outlier>,
    next: AtomicUsize,
}

/// An ejection that just happened (for metrics and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ejected {
    pub addr: SocketAddr,
    pub for_: Duration,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Endpoints {
    pub fn new(addrs: &[SocketAddr], balancer: Balancer, outlier: Option<Outlier>) -> Self {
        Endpoints {
            list: addrs
                .iter()
                .map(|a| Endpoint {
                    addr: *a,
                    outstanding: AtomicUsize::new(0),
                    failures: AtomicU32::new(0),
                    ewma: Mutex::new(Ewma {
                        value_ns: EWMA_DEFAULT.as_nanos() as f64,
                        at: None,
                    }),
                    ejection: Mutex::new(Ejection {
                        until: None,
                        times: 0,
                    }),
                })
                .collect(),
            balancer,
            outlier,
            next: AtomicUsize::new(0),
        }
    }

    fn ejected(&self, i: usize, now: Instant) -> bool {
        lock(&self.list[i].ejection)
            .until
            .is_some_and(|until| until > now)
    }

    /// The index of the copy for the next try, avoiding `tried` when another copy exists and
    /// ejected copies unless every copy is ejected (Envoy's panic mode).
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.list.len();
        match n {
            0 => return None,
            // One copy: nothing to choose, whatever its state.
            1 => return Some(0),
            _ => {}
        }
        let now = Instant::now();
        let mut candidates: Vec<usize> = (0..n)
            .filter(|i| !tried.contains(i) && !self.ejected(*i, now))
            .collect();
        if candidates.is_empty() {
            candidates = (0..n).filter(|i| !tried.contains(i)).collect();
        }
        if candidates.is_empty() {
            candidates = (0..n).collect();
        }
        if candidates.len() == 1 {
            return Some(candidates[0]);
        }
        let chosen = match self.balancer {
            Balancer::RoundRobin => {
                candidates[self.next.fetch_add(1, Ordering::Relaxed) % candidates.len()]
            }
            Balancer::LeastRequests | Balancer::PeakEwma => {
                let a = candidates[fastrand::usize(..candidates.len())];
                let mut b = candidates[fastrand::usize(..candidates.len() - 1)];
                if b == a {
                    b = candidates[candidates.len() - 1];
                }
                if self.load(b, now) < self.load(a, now) {
                    b
                } else {
                    a
                }
            }
        };
        Some(chosen)
    }

    fn load(&self, i: usize, now: Instant) -> f64 {
        let e = &self.list[i];
        let outstanding = e.outstanding.load(Ordering::Relaxed) as f64;
        match self.balancer {
            Balancer::PeakEwma => {
                let ewma = lock(&e.ewma);
                let decayed = match ewma.at {
                    Some(at) => {
                        let age = now.saturating_duration_since(at).as_secs_f64();
                        ewma.value_ns * (-age / EWMA_DECAY.as_secs_f64()).exp()
                    }
                    None => ewma.value_ns,
                };
                decayed * (outstanding + 1.0)
            }
            _ => outstanding,
        }
    }

    /// Marks a try started on copy `i`; the guard marks it finished.
    pub fn start(&self, i: usize) -> InFlight<'_> {
        self.list[i].outstanding.fetch_add(1, Ordering::Relaxed);
        InFlight {
            endpoints: self,
            index: i,
            started: Instant::now(),
        }
    }

    /// Records a try's result on copy `i`: latency for the EWMA, and gateway failures for
    /// outlier ejection. Returns an ejection if this result caused one.
    pub fn record(&self, i: usize, latency: Duration, gateway_failure: bool) -> Option<Ejected> {
        let e = &self.list[i];
        {
            let mut ewma = lock(&e.ewma);
            let now = Instant::now();
            let sample = latency.as_nanos() as f64;
            // Peak-sensitive: a slower sample replaces the average at once; faster ones decay in.
            ewma.value_ns = match ewma.at {
                Some(at) if sample < ewma.value_ns => {
                    let age = now.saturating_duration_since(at).as_secs_f64();
                    let w = (-age / EWMA_DECAY.as_secs_f64()).exp();
                    ewma.value_ns * w + sample * (1.0 - w)
                }
                _ => sample,
            };
            ewma.at = Some(now);
        }
        if !gateway_failure {
            e.failures.store(0, Ordering::Relaxed);
            return None;
        }
        let outlier = self.outlier?;
        let failures = e.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < outlier.consecutive_gateway_failures {
            return None;
        }
        let now = Instant::now();
        let ejected_now = (0..self.list.len())
            .filter(|j| *j != i && self.ejected(*j, now))
            .count();
        // Envoy: eject only if the share ejected stays within the maximum.
        if (ejected_now + 1) * 100 > outlier.max_ejection_percent as usize * self.list.len() {
            return None;
        }
        let mut ej = lock(&e.ejection);
        if ej.until.is_some_and(|u| u > now) {
            return None;
        }
        ej.times = ej.times.saturating_add(1);
        let for_ = (outlier.base_ejection_time.get() * ej.times)
            .min(MAX_EJECTION.max(outlier.base_ejection_time.get()));
        ej.until = Some(now + for_);
        e.failures.store(0, Ordering::Relaxed);
        Some(Ejected { addr: e.addr, for_ })
    }

    pub fn ejected_count(&self) -> usize {
        let now = Instant::now();
        (0..self.list.len())
            .filter(|i| self.ejected(*i, now))
            .count()
    }
}

/// A try in flight on one copy.
#[derive(Debug)]
pub struct InFlight<'a> {
    endpoints: &'a Endpoints,
    index: usize,
    started: Instant,
}

impl InFlight<'_> {
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.endpoints.list[self.index]
            .outstanding
            .fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopwise_model::Dur;

    fn addrs(n: u16) -> Vec<SocketAddr> {
        (0..n)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 1000 + i)))
            .collect()
    }

    fn outlier(pct: u32) -> Option<Outlier> {
        Some(Outlier {
            consecutive_gateway_failures: 5,
            base_ejection_time: Dur::from_millis(30_000),
            max_ejection_percent: pct,
        })
    }

    #[test]
    fn a_retry_avoids_the_copy_already_tried() {
        let e = Endpoints::new(&addrs(3), Balancer::LeastRequests, None);
        for _ in 0..100 {
            let first = e.pick(&[]).unwrap();
            let second = e.pick(&[first]).unwrap();
            assert_ne!(first, second);
        }
        // With one copy, the retry goes back to it.
        let one = Endpoints::new(&addrs(1), Balancer::LeastRequests, None);
        assert_eq!(one.pick(&[0]), Some(0));
    }

    #[test]
    fn least_requests_prefers_the_idle_copy() {
        let e = Endpoints::new(&addrs(2), Balancer::LeastRequests, None);
        let _busy = e.start(0);
        let _busier = e.start(0);
        for _ in 0..50 {
            assert_eq!(e.pick(&[]), Some(1));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn five_gateway_failures_eject_for_a_growing_interval() {
        let e = Endpoints::new(&addrs(2), Balancer::RoundRobin, outlier(50));
        for _ in 0..4 {
            assert_eq!(e.record(0, Duration::from_millis(1), true), None);
        }
        let ej = e.record(0, Duration::from_millis(1), true).unwrap();
        assert_eq!(ej.for_, Duration::from_secs(30));
        for _ in 0..20 {
            assert_eq!(e.pick(&[]), Some(1), "an ejected copy gets no traffic");
        }
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(e.ejected_count(), 0);
        for _ in 0..5 {
            e.record(0, Duration::from_millis(1), true);
        }
        assert_eq!(e.ejected_count(), 1);
        // The second ejection lasts twice as long.
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(e.ejected_count(), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(e.ejected_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count_and_the_share_is_capped() {
        let e = Endpoints::new(&addrs(2), Balancer::RoundRobin, outlier(10));
        for _ in 0..10 {
            // Envoy's 10 % cannot eject one of two copies.
            assert_eq!(e.record(0, Duration::from_millis(1), true), None);
        }
        let e = Endpoints::new(&addrs(2), Balancer::RoundRobin, outlier(50));
        for _ in 0..4 {
            e.record(0, Duration::from_millis(1), true);
        }
        e.record(0, Duration::from_millis(1), false);
        for _ in 0..4 {
            assert_eq!(e.record(0, Duration::from_millis(1), true), None);
        }
    }
}
