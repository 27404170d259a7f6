//! From proxies' metrics to the graph's numbers. Pure: the scraper ([`super::scrape`]) hands in
//! each copy's parsed `/metrics` with the time it was read, and this module sums copies, takes
//! differences between scrapes, and computes rates, success rates and percentiles.
//!
//! An edge is caller → callee: the caller is the service whose proxy reports the series (the
//! registry says which service each copy belongs to), the callee is the outbound series'
//! `service` label. What the caller's app sees is measured at the caller's proxy: requests,
//! responses by class, latency (upstream, retries and back-off included), retries by the
//! condition that allowed them, retries not made and why, caps tripped, local replies. The
//! time the proxies themselves added on a hop is the caller's outbound overhead plus the
//! callee's inbound overhead (`hopwise_proxy_overhead_seconds`, upstream excluded).

use std::collections::BTreeMap;

use hopwise_api::names::metric;
use serde::Serialize;

use super::carried::Seen;

use super::promtext::Sample;

/// A histogram: cumulative counts per upper bound (`le`), the last one `+Inf`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hist {
    pub buckets: BTreeMap<Bound, f64>,
}

/// A bucket's upper bound, ordered (`+Inf` last).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound(pub f64);

impl Eq for Bound {}

impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Hist {
    fn observe(&mut self, le: f64, count: f64) {
        *self.buckets.entry(Bound(le)).or_default() += count;
    }

    /// How many observations.
    pub fn count(&self) -> f64 {
        self.buckets.values().copied().fold(0.0, f64::max)
    }

    fn add(&mut self, other: &Hist) {
        for (b, c) in &other.buckets {
            *self.buckets.entry(*b).or_default() += c;
        }
    }

    fn minus(&self, earlier: &Hist) -> Hist {
        Hist {
            buckets: self
                .buckets
                .iter()
                .map(|(b, c)| (*b, delta(*c, earlier.buckets.get(b).copied())))
                .collect(),
        }
    }

    /// The `q` quantile (0..1) in the histogram's unit, interpolated linearly inside its bucket
    /// as Prometheus' `histogram_quantile` does; in the `+Inf` bucket, the largest finite bound.
    /// `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total <= 0.0 || !q.is_finite() {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total;
        let (mut lower, mut below) = (0.0, 0.0);
        for (Bound(upper), &cum) in &self.buckets {
            if cum >= rank && cum > below {
                if upper.is_infinite() {
                    return Some(lower);
                }
                return Some(lower + (upper - lower) * (rank - below) / (cum - below));
            }
            lower = *upper;
            below = cum;
        }
        Some(lower)
    }
}

/// A counter's growth since `earlier`; a counter that went down was reset (the proxy
/// restarted), so all of its value is new.
fn delta(now: f64, earlier: Option<f64>) -> f64 {
    match earlier {
        Some(e) if now >= e => now - e,
        _ => now,
    }
}

fn add_map(into: &mut BTreeMap<String, f64>, from: &BTreeMap<String, f64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn minus_map(
    now: &BTreeMap<String, f64>,
    earlier: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    now.iter()
        .map(|(k, v)| (k.clone(), delta(*v, earlier.get(k).copied())))
        .collect()
}

/// What one proxy counted for calls to one service (or, inbound, for calls to its own app).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallCounts {
    pub requests: f64,
    /// Responses that are not failures: 1xx–4xx.
    pub ok: f64,
    /// 5xx, and gRPC errors carried in a 200.
    pub failed: f64,
    pub latency: Hist,
    /// Retries made, by the condition that allowed them.
    pub retries: BTreeMap<String, f64>,
    /// Retries a condition allowed but the proxy did not make, by reason (budget, limit, …).
    pub skipped: BTreeMap<String, f64>,
    /// Requests or retries refused by a cap, by cap.
    pub limits: BTreeMap<String, f64>,
    /// Answers the proxy made itself, by reason (per-try-timeout, overflow, no-endpoint, …).
    pub local_replies: BTreeMap<String, f64>,
    /// Copies taken out of the rotation by outlier detection.
    pub ejections: f64,
}

impl CallCounts {
    pub(super) fn add(&mut self, o: &CallCounts) {
        self.requests += o.requests;
        self.ok += o.ok;
        self.failed += o.failed;
        self.latency.add(&o.latency);
        add_map(&mut self.retries, &o.retries);
        add_map(&mut self.skipped, &o.skipped);
        add_map(&mut self.limits, &o.limits);
        add_map(&mut self.local_replies, &o.local_replies);
        self.ejections += o.ejections;
    }

    fn minus(&self, e: &CallCounts) -> CallCounts {
        CallCounts {
            requests: delta(self.requests, Some(e.requests)),
            ok: delta(self.ok, Some(e.ok)),
            failed: delta(self.failed, Some(e.failed)),
            latency: self.latency.minus(&e.latency),
            retries: minus_map(&self.retries, &e.retries),
            skipped: minus_map(&self.skipped, &e.skipped),
            limits: minus_map(&self.limits, &e.limits),
            local_replies: minus_map(&self.local_replies, &e.local_replies),
            ejections: delta(self.ejections, Some(e.ejections)),
        }
    }
}

/// Everything one proxy copy (or several, summed) counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Outbound, by callee service.
    pub outbound: BTreeMap<String, CallCounts>,
    /// Inbound: calls to this service's app.
    pub inbound: CallCounts,
    pub overhead_outbound: Hist,
    pub overhead_inbound: Hist,
    /// What its app carried, as the proxy saw it.
    pub app: Seen,
}

impl Counts {
    /// Reads one copy's samples; `own` is the service the copy belongs to.
    pub fn from_samples(own: &str, samples: &[Sample]) -> Counts {
        let mut c = Counts::default();
        for s in samples {
            let Some(service) = s.label("service") else {
                if s.name == "hopwise_proxy_overhead_seconds_bucket"
                    && let Some(le) = s.label("le").and_then(le)
                {
                    match s.label("direction") {
                        Some("inbound") => c.overhead_inbound.observe(le, s.value),
                        Some("outbound") => c.overhead_outbound.observe(le, s.value),
                        _ => {}
                    }
                }
                continue;
            };
            // Series without a direction (retries, caps) are the outbound side's; a series
            // naming the proxy's own service there is about its own app, not an edge.
            let calls = if s.label("direction") == Some("inbound") {
                &mut c.inbound
            } else if service == own && s.label("direction").is_none() {
                c.app.read(s);
                continue;
            } else {
                c.outbound.entry(service.to_owned()).or_default()
            };
            let v = s.value;
            match s.name.as_str() {
                metric::REQUESTS => calls.requests += v,
                metric::RESPONSES => match s.label("class") {
                    Some("5xx" | "grpc-error") => calls.failed += v,
                    Some(_) => calls.ok += v,
                    None => {}
                },
                metric::REQUEST_DURATION_BUCKET => {
                    if let Some(le) = s.label("le").and_then(le) {
                        calls.latency.observe(le, v);
                    }
                }
                metric::RETRIES => {
                    *calls
                        .retries
                        .entry(s.label("condition").unwrap_or("?").to_owned())
                        .or_default() += v;
                }
                metric::RETRIES_SKIPPED => {
                    *calls
                        .skipped
                        .entry(s.label("reason").unwrap_or("?").to_owned())
                        .or_default() += v;
                }
                metric::LIMITS_TRIPPED => {
                    *calls
                        .limits
                        .entry(s.label("limit").unwrap_or("?").to_owned())
                        .or_default() += v;
                }
                metric::EJECTIONS => calls.ejections += v,
                metric::LOCAL_REPLIES => {
                    *calls
                        .local_replies
                        .entry(s.label("reason").unwrap_or("?").to_owned())
                        .or_default() += v;
                }
                _ => {}
            }
        }
        c
    }

    /// Adds another copy's counts (copies of one service are shown together).
    pub fn add(&mut self, o: &Counts) {
        for (svc, calls) in &o.outbound {
            self.outbound.entry(svc.clone()).or_default().add(calls);
        }
        self.inbound.add(&o.inbound);
        self.overhead_outbound.add(&o.overhead_outbound);
        self.overhead_inbound.add(&o.overhead_inbound);
        self.app.add(&o.app);
    }

    /// What was counted since `earlier` (a scrape of the same copy).
    pub fn minus(&self, earlier: &Counts) -> Counts {
        let empty = CallCounts::default();
        Counts {
            outbound: self
                .outbound
                .iter()
                .map(|(svc, c)| {
                    (
                        svc.clone(),
                        c.minus(earlier.outbound.get(svc).unwrap_or(&empty)),
                    )
                })
                .collect(),
            inbound: self.inbound.minus(&earlier.inbound),
            overhead_outbound: self.overhead_outbound.minus(&earlier.overhead_outbound),
            overhead_inbound: self.overhead_inbound.minus(&earlier.overhead_inbound),
            // Only totals are shown: a verdict needs every call seen.
            app: self.app,
        }
    }
}

fn le(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        t => t.parse().ok(),
    }
}

/// One copy as the scraper last saw it.
#[derive(Debug, Clone)]
pub struct CopyCounts<'a> {
    pub service: &'a str,
    /// Since the proxy started.
    pub total: &'a Counts,
    /// Counted over the last few seconds, and how many seconds (`None`: one scrape so far).
    pub recent: Option<(Counts, f64)>,
}

/// What the graph shows on one edge.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EdgeStats {
    pub from: String,
    pub to: String,
    /// Requests since the callers' proxies started (the sum of their
    /// `hopwise_requests_total{direction="outbound",service=<to>}`).
    pub requests: u64,
    /// Requests per second over the recent window.
    pub rps: f64,
    /// Share of responses that are not 5xx or gRPC errors (0..1): over the recent window when
    /// it saw responses, else since start (`live` says which); `None` before any response.
    pub success: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The success rate and percentiles are over the recent window (else since start).
    pub live: bool,
    pub responses: u64,
    pub failures: u64,
    /// Since start, by condition / reason / cap.
    pub retries: BTreeMap<String, u64>,
    pub retries_skipped: BTreeMap<String, u64>,
    pub limits: BTreeMap<String, u64>,
    pub local_replies: BTreeMap<String, u64>,
    /// Copies of the callee the callers' proxies ejected (outlier detection), since start.
    pub ejections: u64,
    /// Retries per second over the recent window.
    pub retries_per_s: f64,
    /// Time the two proxies on this hop added (caller outbound + callee inbound), median and
    /// 99th percentile of each summed, in ms (recent window, else since start).
    pub proxy_p50_ms: Option<f64>,
    pub proxy_p99_ms: Option<f64>,
}

/// What the graph shows on one service.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ServiceStats {
    /// Requests its proxies received inbound, since start and per second recently.
    pub requests: u64,
    pub rps: f64,
    pub success: Option<f64>,
    /// Time its proxies added per request, inbound and outbound (ms, recent else since start).
    pub inbound_overhead_p50_ms: Option<f64>,
    pub inbound_overhead_p99_ms: Option<f64>,
    pub outbound_overhead_p50_ms: Option<f64>,
    pub outbound_overhead_p99_ms: Option<f64>,
    /// What its app carried, as its proxies saw it since they started.
    pub app: Seen,
}

/// The numbers of every edge and service.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    pub edges: Vec<EdgeStats>,
    pub services: BTreeMap<String, ServiceStats>,
}

fn round(v: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (v * f).round() / f
}

fn ms(seconds: Option<f64>) -> Option<f64> {
    seconds.map(|s| round(s * 1000.0, 3))
}

fn whole(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    }
}

fn whole_map(m: &BTreeMap<String, f64>) -> BTreeMap<String, u64> {
    m.iter()
        .map(|(k, v)| (k.clone(), whole(*v)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// The recent window when it holds observations, else all of them.
fn pick<'a>(recent: &'a Hist, total: &'a Hist) -> (&'a Hist, bool) {
    if recent.count() > 0.0 {
        (recent, true)
    } else {
        (total, false)
    }
}

/// The mesh file's calls as (caller, callee), each once: the edges shown with traffic or not.
pub fn mesh_calls(mesh: &hopwise_model::Mesh) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for pair in mesh.calls().map(|c| (c.from.clone(), c.to.clone())) {
        if !v.contains(&pair) {
            v.push(pair);
        }
    }
    v
}

/// Sums copies by service, and gives every edge in `calls` (caller, callee; the mesh file's
/// calls, so an edge without traffic is shown too) and every edge seen in the metrics.
pub fn summarize(copies: &[CopyCounts<'_>], calls: &[(String, String)]) -> Summary {
    let mut total: BTreeMap<&str, Counts> = BTreeMap::new();
    let mut recent: BTreeMap<&str, Counts> = BTreeMap::new();
    let mut rates: BTreeMap<(&str, &str), (f64, f64)> = BTreeMap::new();
    let mut inbound_rate: BTreeMap<&str, f64> = BTreeMap::new();
    for c in copies {
        total.entry(c.service).or_default().add(c.total);
        if let Some((counts, secs)) = &c.recent {
            recent.entry(c.service).or_default().add(counts);
            if *secs > 0.0 {
                for (to, calls) in &counts.outbound {
                    let r = rates.entry((c.service, to.as_str())).or_default();
                    r.0 += calls.requests / secs;
                    r.1 += calls.retries.values().sum::<f64>() / secs;
                }
                *inbound_rate.entry(c.service).or_default() += counts.inbound.requests / secs;
            }
        }
    }
    let mut pairs: Vec<(String, String)> = calls.to_vec();
    for (from, counts) in &total {
        for to in counts.outbound.keys() {
            let pair = ((*from).to_owned(), to.clone());
            if !pairs.contains(&pair) {
                pairs.push(pair);
            }
        }
    }
    let empty_counts = Counts::default();
    let empty_calls = CallCounts::default();
    let overhead = |service: &str, q: f64, inbound: bool| {
        let t = total.get(service).unwrap_or(&empty_counts);
        let r = recent.get(service).unwrap_or(&empty_counts);
        let (h, _) = if inbound {
            pick(&r.overhead_inbound, &t.overhead_inbound)
        } else {
            pick(&r.overhead_outbound, &t.overhead_outbound)
        };
        h.quantile(q)
    };
    let edges = pairs
        .into_iter()
        .map(|(from, to)| {
            let t = total
                .get(from.as_str())
                .and_then(|c| c.outbound.get(&to))
                .unwrap_or(&empty_calls);
            let r = recent
                .get(from.as_str())
                .and_then(|c| c.outbound.get(&to))
                .unwrap_or(&empty_calls);
            let (lat, live) = pick(&r.latency, &t.latency);
            let (ok, failed) = if r.ok + r.failed > 0.0 {
                (r.ok, r.failed)
            } else {
                (t.ok, t.failed)
            };
            let (rps, retries_per_s) = rates
                .get(&(from.as_str(), to.as_str()))
                .copied()
                .unwrap_or_default();
            let sum = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => Some(a + b),
                (a, None) => a,
                (None, b) => b,
            };
            EdgeStats {
                requests: whole(t.requests),
                rps: round(rps, 2),
                success: (ok + failed > 0.0).then(|| round(ok / (ok + failed), 4)),
                p50_ms: ms(lat.quantile(0.5)),
                p99_ms: ms(lat.quantile(0.99)),
                live,
                responses: whole(t.ok + t.failed),
                failures: whole(t.failed),
                retries: whole_map(&t.retries),
                retries_skipped: whole_map(&t.skipped),
                limits: whole_map(&t.limits),
                local_replies: whole_map(&t.local_replies),
                ejections: whole(t.ejections),
                retries_per_s: round(retries_per_s, 2),
                proxy_p50_ms: ms(sum(overhead(&from, 0.5, false), overhead(&to, 0.5, true))),
                proxy_p99_ms: ms(sum(overhead(&from, 0.99, false), overhead(&to, 0.99, true))),
                from,
                to,
            }
        })
        .collect();
    let services = total
        .iter()
        .map(|(name, t)| {
            let r = recent.get(name).unwrap_or(&empty_counts);
            let (ok, failed) = if r.inbound.ok + r.inbound.failed > 0.0 {
                (r.inbound.ok, r.inbound.failed)
            } else {
                (t.inbound.ok, t.inbound.failed)
            };
            (
                (*name).to_owned(),
                ServiceStats {
                    requests: whole(t.inbound.requests),
                    rps: round(inbound_rate.get(name).copied().unwrap_or(0.0), 2),
                    success: (ok + failed > 0.0).then(|| round(ok / (ok + failed), 4)),
                    inbound_overhead_p50_ms: ms(overhead(name, 0.5, true)),
                    inbound_overhead_p99_ms: ms(overhead(name, 0.99, true)),
                    outbound_overhead_p50_ms: ms(overhead(name, 0.5, false)),
                    outbound_overhead_p99_ms: ms(overhead(name, 0.99, false)),
                    app: t.app,
                },
            )
        })
        .collect();
    Summary { edges, services }
}

#[cfg(test)]
#[path = "edges_tests.rs"]
mod tests;
