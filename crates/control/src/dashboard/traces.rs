//! The recent traces the dashboard was sent, in a bounded store: at most [`MAX_TRACES`]
//! traces of at most [`MAX_SPANS`] spans each, every text cut to [`MAX_TEXT`] bytes; a new
//! trace past the cap evicts the oldest ordinary one ([`super::keep`]: failed traces and the
//! slowest outlive the rest). A trace failed when its request did: its root span (a try that
//! failed before a retry succeeded is no failure of the request). A trace's spans may arrive in
//! any order and in several exports (each proxy exports its own, when its request ends); a span
//! sent twice is kept once, and a trace is listed as still receiving until [`SETTLE_MS`] have
//! passed without a span of it. Pure: the caller says what time it is (ms on its own clock).
//!
//! Memory: a stored span is about 200 bytes plus its texts; with every text at its cap the
//! whole store stays under 200 × 256 × (200 + 9 × 96) bytes ≈ 52 MiB, and the shop's spans
//! (texts of 10–40 bytes) take about 350 bytes each, ≈ 18 MiB when full.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use super::keep::{self, Held};
use crate::otlp_receiver::ReceivedSpan;

pub const MAX_TRACES: usize = 200;
pub const MAX_SPANS: usize = 256;
/// The longest text kept (a path, a route name), in bytes; longer ones are cut.
pub const MAX_TEXT: usize = 96;
/// How long after its last span arrived a trace is still listed as receiving: every proxy
/// exports a span within 100 ms of its end (the exporter's linger) and the export itself.
pub const SETTLE_MS: u64 = 2_000;

/// OTLP's `SPAN_KIND_SERVER`.
const KIND_SERVER: i32 = 2;

/// What a proxy's span stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The inbound proxy serving a caller (the app's answer is inside it).
    Inbound,
    /// The outbound proxy's request, for the app that called.
    Outbound,
    /// One try of an outbound request, toward one copy.
    Try,
}

/// One span as the store keeps it (and as `/api/traces/<id>` shows it: ids in hex).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span {
    #[serde(serialize_with = "hex16")]
    pub span_id: u64,
    #[serde(serialize_with = "hex16_opt")]
    pub parent: Option<u64>,
    pub service: String,
    /// The copy whose proxy sent it (`pricing[1]`, the resource's `service.instance.id`).
    pub instance: Option<String>,
    pub direction: Direction,
    /// The route's name (`hopwise.route`); tries take their request's.
    pub route: Option<String>,
    /// Outbound: the service called.
    pub upstream: Option<String>,
    pub method: Option<String>,
    pub path: Option<String>,
    pub status: Option<u16>,
    pub grpc_status: Option<u32>,
    pub error: bool,
    /// A try's number (1 for the first), its copy, outcome and the retry condition behind it.
    pub try_number: Option<u32>,
    /// A try's copy: its address as the try's span gave it, until the dashboard names it
    /// ([`super::trace_api`]); then the address moves to `copy_address`.
    pub copy: Option<String>,
    pub copy_address: Option<String>,
    pub outcome: Option<String>,
    pub retry_condition: Option<String>,
    /// Inbound: how long the app took to answer (`hopwise.app_time_ns`), which tells the
    /// inbound proxy's own time from the app's.
    pub app_time_ns: Option<u64>,
    /// Unix nanoseconds, as the span's proxy read its clock.
    #[serde(rename = "start_unix_nano")]
    pub start: u64,
    #[serde(rename = "end_unix_nano")]
    pub end: u64,
}

fn hex16<S: serde::Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{id:016x}"))
}

fn hex16_opt<S: serde::Serializer>(id: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => hex16(id, s),
        None => s.serialize_none(),
    }
}

fn text(s: &str) -> Option<String> {
    if s.is_empty() {
        return None;
    }
    let mut cut = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(s[..cut].to_owned())
}

/// A try's copy, `ip:port`, from the conventions' `network.peer.*` (an IPv6 address in
/// brackets), or `None`.
fn copy_of(s: &ReceivedSpan) -> Option<String> {
    let (ip, port) = (s.attr("network.peer.address"), s.attr("network.peer.port"));
    if ip.is_empty() || port.is_empty() {
        return None;
    }
    let copy = if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    };
    text(&copy)
}

fn id64(hex: &str) -> Option<u64> {
    u64::from_str_radix(hex, 16).ok().filter(|v| *v != 0)
}

impl Span {
    /// The span as stored with its trace id, or `None` when its ids are not OTLP's.
    pub fn from_received(s: &ReceivedSpan) -> Option<(u128, Span)> {
        let trace = u128::from_str_radix(&s.trace_id, 16)
            .ok()
            .filter(|t| *t != 0 && s.trace_id.len() == 32)?;
        let span_id = id64(&s.span_id).filter(|_| s.span_id.len() == 16)?;
        let try_number = s.attr("hopwise.try").parse().ok();
        let direction = match (s.kind, try_number) {
            (KIND_SERVER, _) => Direction::Inbound,
            (_, Some(_)) => Direction::Try,
            _ => Direction::Outbound,
        };
        let span = Span {
            span_id,
            parent: id64(&s.parent),
            service: text(&s.service).unwrap_or_default(),
            instance: text(&s.instance),
            direction,
            route: text(s.attr("hopwise.route")),
            upstream: text(s.attr("hopwise.upstream")),
            method: text(s.attr("http.request.method")),
            path: text(s.attr("url.path")),
            status: s.attr("http.response.status_code").parse().ok(),
            grpc_status: s.attr("rpc.grpc.status_code").parse().ok(),
            error: s.error,
            try_number,
            // A try's peer is the copy it reached; a server span's is its caller.
            copy: try_number.and_then(|_: u32| copy_of(s)),
            copy_address: None,
            outcome: text(s.attr("hopwise.outcome")),
            retry_condition: text(s.attr("hopwise.retry_condition")),
            app_time_ns: s.attr("hopwise.app_time_ns").parse().ok(),
            start: s.start,
            end: s.end.max(s.start),
        };
        Some((trace, span))
    }
}

/// One trace's spans, in arrival order.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    pub spans: Vec<Span>,
    /// Spans dropped at this trace's cap.
    pub dropped: u64,
    /// When its latest span arrived (the store's caller's clock, ms).
    pub arrived_ms: u64,
}

/// A line of `/api/traces`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub id: String,
    /// The root span's (or, without one in the store, the earliest span's) service and route.
    pub service: String,
    pub route: Option<String>,
    pub direction: Direction,
    /// Unix nanoseconds of the earliest span's start.
    pub start: u64,
    pub duration_ns: u64,
    pub spans: usize,
    pub error: bool,
    /// Tries after a request's first, in the whole trace: a success after a retry says so.
    pub retries: usize,
    /// A span of it arrived less than [`SETTLE_MS`] ago: more may come.
    pub receiving: bool,
}

/// The store.
#[derive(Debug, Clone, Default)]
pub struct Store {
    traces: HashMap<u128, Trace>,
    /// Trace ids, oldest first.
    order: VecDeque<u128>,
    /// Spans dropped at a trace's cap, in all.
    pub dropped_spans: u64,
    /// Spans whose ids were not OTLP's.
    pub refused_spans: u64,
}

pub fn trace_hex(id: u128) -> String {
    format!("{id:032x}")
}

impl Store {
    /// Keeps `spans` (from one export, of any traces), arrived at `now_ms`.
    pub fn add<'a>(&mut self, spans: impl IntoIterator<Item = &'a ReceivedSpan>, now_ms: u64) {
        for s in spans {
            match Span::from_received(s) {
                Some((trace, span)) => self.add_span(trace, span, now_ms),
                None => self.refused_spans += 1,
            }
        }
    }

    fn add_span(&mut self, trace: u128, span: Span, now_ms: u64) {
        if !self.traces.contains_key(&trace) {
            while self.order.len() >= MAX_TRACES {
                self.evict();
            }
            self.order.push_back(trace);
        }
        let t = self.traces.entry(trace).or_default();
        t.arrived_ms = t.arrived_ms.max(now_ms);
        if t.spans.iter().any(|s| s.span_id == span.span_id) {
            return;
        }
        if t.spans.len() >= MAX_SPANS {
            t.dropped += 1;
            self.dropped_spans += 1;
            return;
        }
        t.spans.push(span);
    }

    /// Lets the oldest ordinary trace go ([`keep::victim`]).
    fn evict(&mut self) {
        let held: Vec<Held> = self
            .order
            .iter()
            .map(|id| {
                self.traces.get(id).map_or(
                    Held {
                        failed: false,
                        duration_ns: 0,
                    },
                    Trace::held,
                )
            })
            .collect();
        if let Some(old) = keep::victim(&held).and_then(|at| self.order.remove(at)) {
            self.traces.remove(&old);
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// A trace by its id in hex.
    pub fn get(&self, hex: &str) -> Option<&Trace> {
        let id = u128::from_str_radix(hex, 16)
            .ok()
            .filter(|_| hex.len() == 32)?;
        self.traces.get(&id)
    }

    /// Every trace, the newest first, as of `now_ms`.
    pub fn recent(&self, now_ms: u64) -> Vec<Summary> {
        self.order
            .iter()
            .rev()
            .filter_map(|id| Some(summary(*id, self.traces.get(id)?, now_ms)))
            .collect()
    }
}

impl Trace {
    /// The root span: the earliest of those whose parent is not here, a true root first.
    fn root(&self) -> Option<&Span> {
        let known = |p: u64| self.spans.iter().any(|s| s.span_id == p);
        self.spans
            .iter()
            .filter(|s| !s.parent.is_some_and(known))
            .min_by_key(|s| (s.parent.is_some(), s.start))
    }

    /// The request failed: its root span did. A failed try whose retry succeeded is not a
    /// failure of the request.
    pub fn failed(&self) -> bool {
        self.root().is_some_and(|r| r.error)
    }

    fn span_range(&self) -> (u64, u64) {
        let start = self.spans.iter().map(|s| s.start).min().unwrap_or(0);
        let end = self.spans.iter().map(|s| s.end).max().unwrap_or(start);
        (start, end.max(start))
    }

    fn held(&self) -> Held {
        let (start, end) = self.span_range();
        Held {
            failed: self.failed(),
            duration_ns: end - start,
        }
    }
}

fn summary(id: u128, t: &Trace, now_ms: u64) -> Summary {
    let (start, end) = t.span_range();
    let root = t.root();
    Summary {
        id: trace_hex(id),
        service: root.map(|r| r.service.clone()).unwrap_or_default(),
        route: root.and_then(|r| r.route.clone()),
        direction: root.map_or(Direction::Inbound, |r| r.direction),
        start,
        duration_ns: end - start,
        spans: t.spans.len(),
        error: t.failed(),
        retries: t
            .spans
            .iter()
            .filter(|s| s.try_number.is_some_and(|n| n > 1))
            .count(),
        receiving: now_ms.saturating_sub(t.arrived_ms) < SETTLE_MS,
    }
}

#[cfg(test)]
#[path = "traces_tests.rs"]
mod tests;
