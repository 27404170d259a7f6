//! Choosing a copy for each try, and taking copies that keep failing out of the rotation.
//!
//! Shared by all workers of a proxy (atomics and short locks), so load and ejections are seen
//! proxy-wide. Power of two choices picks the better of two random copies — by requests in
//! flight, or by peak-EWMA latency × requests in flight (Linkerd's) — and never a copy this
//! request already tried when another exists (Envoy's `previous_hosts`). Outlier ejection is
//! Envoy's consecutive-gateway-failure detector, enforced.

pub mod connect;
pub mod subsets;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use hopwise_model::labels::Labels;
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
    /// The labels the copy carries (a route's subset selects copies by them).
    pub labels: Labels,
    outstanding: AtomicUsize,
    failures: AtomicU32,
    ewma: Mutex<Ewma>,
    ejection: Mutex<Ejection>,
}

/// The copies of one upstream service. The set can be replaced while requests are in flight
/// (the control plane sends new copies); what is known of a copy that stays is kept.
#[derive(Debug)]
pub struct Endpoints {
    list: RwLock<Arc<Vec<Arc<Endpoint>>>>,
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

impl Endpoint {
    fn new(addr: SocketAddr, labels: Labels) -> Self {
        Endpoint {
            addr,
            labels,
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
        }
    }

    fn ejected(&self, now: Instant) -> bool {
        lock(&self.ejection).until.is_some_and(|until| until > now)
    }
}

impl Endpoints {
    pub fn new(addrs: &[SocketAddr], balancer: Balancer, outlier: Option<Outlier>) -> Self {
        Endpoints::of(
            addrs
                .iter()
                .map(|a| Arc::new(Endpoint::new(*a, Labels::new())))
                .collect(),
            balancer,
            outlier,
        )
    }

    /// A set of these copies (a subset's view shares its copies with the whole's).
    fn of(list: Vec<Arc<Endpoint>>, balancer: Balancer, outlier: Option<Outlier>) -> Self {
        Endpoints {
            list: RwLock::new(Arc::new(list)),
            balancer,
            outlier,
            next: AtomicUsize::new(0),
        }
    }

    fn set(&self, fresh: Vec<Arc<Endpoint>>) {
        match self.list.write() {
            Ok(mut l) => *l = Arc::new(fresh),
            Err(p) => *p.into_inner() = Arc::new(fresh),
        }
    }

    /// The current copies.
    pub fn snapshot(&self) -> Arc<Vec<Arc<Endpoint>>> {
        match self.list.read() {
            Ok(l) => l.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Replaces the set of copies, keeping load, latency and ejection state of those that stay.
    pub fn update(&self, addrs: &[SocketAddr]) {
        self.update_labelled(addrs, &BTreeMap::new());
    }

    /// [`Endpoints::update`] with each copy's labels (`labels`: those that carry any). A copy
    /// whose labels changed is a new copy, as the control plane's deltas have it.
    pub fn update_labelled(&self, addrs: &[SocketAddr], labels: &BTreeMap<SocketAddr, Labels>) {
        let none = Labels::new();
        let old = self.snapshot();
        let fresh: Vec<Arc<Endpoint>> = addrs
            .iter()
            .map(|a| {
                let l = labels.get(a).unwrap_or(&none);
                old.iter()
                    .find(|e| e.addr == *a && e.labels == *l)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Endpoint::new(*a, l.clone())))
            })
            .collect();
        self.set(fresh);
    }

    /// The copy for the next try, avoiding copies this request `tried` when another exists,
    /// and ejected copies unless every copy is ejected (Envoy's panic mode).
    pub fn pick(&self, tried: &[SocketAddr]) -> Option<Arc<Endpoint>> {
        let list = self.snapshot();
        match list.len() {
            0 => return None,
            // One copy: nothing to choose, whatever its state.
            1 => return list.first().cloned(),
            _ => {}
        }
        let now = Instant::now();
        let untried = |e: &&Arc<Endpoint>| !tried.contains(&e.addr);
        let mut candidates: Vec<&Arc<Endpoint>> = list
            .iter()
            .filter(untried)
            .filter(|e| !e.ejected(now))
            .collect();
        if candidates.is_empty() {
            candidates = list.iter().filter(untried).collect();
        }
        if candidates.is_empty() {
            candidates = list.iter().collect();
        }
        if candidates.len() == 1 {
            return Some(candidates[0].clone());
        }
        let chosen = match self.balancer {
            Balancer::RoundRobin => {
                candidates[self.next.fetch_add(1, Ordering::Relaxed) % candidates.len()]
            }
            Balancer::LeastRequests | Balancer::PeakEwma => {
                let a = candidates[fastrand::usize(..candidates.len())];
                let mut b = candidates[fastrand::usize(..candidates.len() - 1)];
                if Arc::ptr_eq(a, b) {
                    b = candidates[candidates.len() - 1];
                }
                if self.load(b, now) < self.load(a, now) {
                    b
                } else {
                    a
                }
            }
        };
        Some(chosen.clone())
    }

    fn load(&self, e: &Endpoint, now: Instant) -> f64 {
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

    /// Marks a try started on copy `e`; the guard marks it finished.
    pub fn start(e: &Arc<Endpoint>) -> InFlight {
        e.outstanding.fetch_add(1, Ordering::Relaxed);
        InFlight {
            endpoint: e.clone(),
        }
    }

    /// Records a try's result on copy `e`: latency for the EWMA, and gateway failures for
    /// outlier ejection. Returns an ejection if this result caused one.
    pub fn record(
        &self,
        e: &Endpoint,
        latency: Duration,
        gateway_failure: bool,
    ) -> Option<Ejected> {
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
        let list = self.snapshot();
        let ejected_now = list
            .iter()
            .filter(|o| o.addr != e.addr && o.ejected(now))
            .count();
        // Envoy: eject only if the share ejected stays within the maximum.
        if (ejected_now + 1) * 100 > outlier.max_ejection_percent as usize * list.len() {
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
        self.snapshot().iter().filter(|e| e.ejected(now)).count()
    }
}

/// A try in flight on one copy.
#[derive(Debug)]
pub struct InFlight {
    endpoint: Arc<Endpoint>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.endpoint.outstanding.fetch_sub(1, Ordering::Relaxed);
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
            let first = e.pick(&[]).unwrap().addr;
            let second = e.pick(&[first]).unwrap().addr;
            assert_ne!(first, second);
        }
        // With one copy, the retry goes back to it.
        let one = Endpoints::new(&addrs(1), Balancer::LeastRequests, None);
        let only = addrs(1)[0];
        assert_eq!(one.pick(&[only]).unwrap().addr, only);
    }

    #[test]
    fn least_requests_prefers_the_idle_copy() {
        let e = Endpoints::new(&addrs(2), Balancer::LeastRequests, None);
        let list = e.snapshot();
        let _busy = Endpoints::start(&list[0]);
        let _busier = Endpoints::start(&list[0]);
        for _ in 0..50 {
            assert_eq!(e.pick(&[]).unwrap().addr, list[1].addr);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn five_gateway_failures_eject_for_a_growing_interval() {
        let e = Endpoints::new(&addrs(2), Balancer::RoundRobin, outlier(50));
        let list = e.snapshot();
        for _ in 0..4 {
            assert_eq!(e.record(&list[0], Duration::from_millis(1), true), None);
        }
        let ej = e.record(&list[0], Duration::from_millis(1), true).unwrap();
        assert_eq!(ej.for_, Duration::from_secs(30));
        for _ in 0..20 {
            assert_eq!(
                e.pick(&[]).unwrap().addr,
                list[1].addr,
                "an ejected copy gets no traffic"
            );
        }
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(e.ejected_count(), 0);
        for _ in 0..5 {
            e.record(&list[0], Duration::from_millis(1), true);
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
        let list = e.snapshot();
        for _ in 0..10 {
            // Envoy's 10 % cannot eject one of two copies.
            assert_eq!(e.record(&list[0], Duration::from_millis(1), true), None);
        }
        let e = Endpoints::new(&addrs(2), Balancer::RoundRobin, outlier(50));
        let list = e.snapshot();
        for _ in 0..4 {
            e.record(&list[0], Duration::from_millis(1), true);
        }
        e.record(&list[0], Duration::from_millis(1), false);
        for _ in 0..4 {
            assert_eq!(e.record(&list[0], Duration::from_millis(1), true), None);
        }
    }

    #[test]
    fn a_new_set_of_copies_keeps_what_is_known_of_those_that_stay() {
        let e = Endpoints::new(&addrs(2), Balancer::LeastRequests, None);
        let kept = e.snapshot()[1].clone();
        let _busy = Endpoints::start(&kept);
        let mut fresh = addrs(3)[1..].to_vec();
        fresh.push(SocketAddr::from(([127, 0, 0, 1], 2000)));
        e.update(&fresh);
        let now = e.snapshot();
        assert_eq!(now.len(), 3);
        assert!(Arc::ptr_eq(&now[0], &kept), "the same copy, with its load");
        assert!(
            !now.iter().any(|x| x.addr == addrs(1)[0]),
            "the dropped copy is gone"
        );
    }
}
