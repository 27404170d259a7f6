//! The charts over time: per edge, one point per scrape round over the last 15 minutes —
//! requests/s, success rate, p50/p99 latency and retries/s. Pure: the scraper
//! ([`super::scrape`]) hands in, per proxy read this round, what it counted since its previous
//! reading (`Counts::minus`, so a restarted proxy is not negative) and how long that was; this
//! module sums copies by caller, takes the quantiles from the histograms' bucket deltas
//! ([`Hist::quantile`]) and keeps each edge's points in a bounded ring.
//!
//! Memory: a [`Point`] is 56 bytes; a ring holds at most [`KEEP`] (15 min at the 1 s scrape
//! interval, 900), about 50 KB per edge, and at most [`MAX_EDGES`] edges are kept (those kept
//! already stay; new ones are taken by caller and callee name): the points of the whole
//! timeline stay under 12.9 MB. Points older than [`WINDOW`] are dropped, and so is an edge
//! left with none.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::Serialize;

use super::edges::{CallCounts, Counts};

/// How far back the charts go.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Points per edge: [`WINDOW`] at the scrape interval, one round per second.
pub const KEEP: usize = 900;
/// Edges kept: in a mesh of more, those already kept stay and the rest are not charted.
pub const MAX_EDGES: usize = 256;

/// One scrape round on one edge: what the callers' proxies counted since their previous
/// reading. Counts fit in `u32` (four billion requests in one second), times in `f32`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// When the round read the proxies (Unix time, ms).
    pub t: u64,
    /// The interval's length, seconds (the mean over the callers' copies).
    pub secs: f32,
    pub requests: u32,
    /// Responses that are not failures (1xx–4xx), and failures (5xx, gRPC errors).
    pub ok: u32,
    pub failed: u32,
    pub retries: u32,
    /// Summed over copies, each copy's count over its own interval.
    pub rps: f32,
    pub retries_per_s: f32,
    /// From the latency histogram's bucket deltas; `None` without a request in the interval.
    pub p50_ms: Option<f32>,
    pub p99_ms: Option<f32>,
}

impl Point {
    /// Share of responses that are not failures, `None` without responses.
    pub fn success(&self) -> Option<f64> {
        let all = f64::from(self.ok) + f64::from(self.failed);
        (all > 0.0).then(|| f64::from(self.ok) / all)
    }
}

/// What one proxy counted since its previous reading: its service (the caller), the counts,
/// and the seconds between the two readings.
#[derive(Debug, Clone)]
pub struct Delta<'a> {
    pub service: &'a str,
    pub counts: &'a Counts,
    pub secs: f64,
}

fn count(v: f64) -> u32 {
    if v.is_finite() && v > 0.0 {
        // Saturating: a counter of more than u32::MAX in one second is not a real reading.
        v.round().min(f64::from(u32::MAX)) as u32
    } else {
        0
    }
}

fn ms(seconds: Option<f64>) -> Option<f32> {
    seconds.map(|s| (s * 1000.0) as f32)
}

/// One round's point of every edge whose caller had a proxy read twice: the edges in `calls`
/// (zeros without traffic) and every other edge seen in the counts.
pub fn points(
    t: u64,
    deltas: &[Delta<'_>],
    calls: &[(String, String)],
) -> BTreeMap<(String, String), Point> {
    // Per caller: the copies' counts summed, the rates (each copy over its own interval)
    // summed, and the intervals' mean.
    struct Caller {
        calls: BTreeMap<String, (CallCounts, f64, f64)>,
        secs: f64,
        copies: f64,
    }
    let mut callers: BTreeMap<&str, Caller> = BTreeMap::new();
    for d in deltas.iter().filter(|d| d.secs > 0.0) {
        let c = callers.entry(d.service).or_insert_with(|| Caller {
            calls: BTreeMap::new(),
            secs: 0.0,
            copies: 0.0,
        });
        c.secs += d.secs;
        c.copies += 1.0;
        for (to, calls) in &d.counts.outbound {
            let e = c.calls.entry(to.clone()).or_default();
            e.0.add(calls);
            e.1 += calls.requests / d.secs;
            e.2 += calls.retries.values().sum::<f64>() / d.secs;
        }
    }
    let mut out = BTreeMap::new();
    let empty = (CallCounts::default(), 0.0, 0.0);
    let seen = callers
        .iter()
        .flat_map(|(from, c)| c.calls.keys().map(|to| ((*from).to_owned(), to.clone())));
    let pairs: Vec<(String, String)> = calls.iter().cloned().chain(seen).collect();
    for (from, to) in pairs {
        let Some(caller) = callers.get(from.as_str()) else {
            continue;
        };
        let (c, rps, retries_per_s) = caller.calls.get(&to).unwrap_or(&empty);
        let point = Point {
            t,
            secs: (caller.secs / caller.copies) as f32,
            requests: count(c.requests),
            ok: count(c.ok),
            failed: count(c.failed),
            retries: count(c.retries.values().sum()),
            rps: *rps as f32,
            retries_per_s: *retries_per_s as f32,
            p50_ms: ms(c.latency.quantile(0.5)),
            p99_ms: ms(c.latency.quantile(0.99)),
        };
        out.entry((from, to)).or_insert(point);
    }
    out
}

/// Every edge's ring of points.
#[derive(Debug, Default)]
pub struct Timeline {
    rings: BTreeMap<(String, String), VecDeque<Point>>,
}

impl Timeline {
    /// Adds one round's points (made at `t`, Unix ms), drops points older than [`WINDOW`] and
    /// edges left empty; an edge beyond [`MAX_EDGES`] is not kept.
    pub fn record(&mut self, t: u64, round: BTreeMap<(String, String), Point>) {
        for (edge, point) in round {
            if !self.rings.contains_key(&edge) && self.rings.len() >= MAX_EDGES {
                continue;
            }
            let ring = self.rings.entry(edge).or_default();
            ring.push_back(point);
            while ring.len() > KEEP {
                ring.pop_front();
            }
        }
        let oldest = t.saturating_sub(WINDOW.as_millis() as u64);
        for ring in self.rings.values_mut() {
            while ring.front().is_some_and(|p| p.t < oldest) {
                ring.pop_front();
            }
        }
        self.rings.retain(|_, ring| !ring.is_empty());
    }

    /// Each edge's points made after `since` (Unix ms; 0: all), oldest first.
    pub fn since(&self, since: u64) -> Vec<EdgeSeries<'_>> {
        self.rings
            .iter()
            .map(|((from, to), ring)| EdgeSeries {
                from,
                to,
                points: ring.iter().filter(|p| p.t > since).map(PointView).collect(),
            })
            .collect()
    }
}

/// One edge's points as `/api/timeline` serves them.
#[derive(Debug, Serialize)]
pub struct EdgeSeries<'a> {
    pub from: &'a str,
    pub to: &'a str,
    pub points: Vec<PointView<'a>>,
}

/// A point with its success rate, for the page.
#[derive(Debug)]
pub struct PointView<'a>(pub &'a Point);

impl Serialize for PointView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let p = self.0;
        let mut st = s.serialize_struct("Point", 11)?;
        st.serialize_field("t", &p.t)?;
        st.serialize_field("secs", &p.secs)?;
        st.serialize_field("requests", &p.requests)?;
        st.serialize_field("ok", &p.ok)?;
        st.serialize_field("failed", &p.failed)?;
        st.serialize_field("retries", &p.retries)?;
        st.serialize_field("rps", &p.rps)?;
        st.serialize_field("retries_per_s", &p.retries_per_s)?;
        st.serialize_field("success", &p.success())?;
        st.serialize_field("p50_ms", &p.p50_ms)?;
        st.serialize_field("p99_ms", &p.p99_ms)?;
        st.end()
    }
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
