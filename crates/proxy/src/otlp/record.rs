//! One recorded request's spans: the request's own at this proxy (server inbound, client
//! outbound), named by service and route, and outbound a child per try with its copy, outcome
//! and the retry condition that started it. The lifecycles reach the [`Recording`] through the
//! request's extensions (an `Arc`, only for a recorded request) and finish it with the answer.
//!
//! [`begin`] is the trace hook both lifecycles call first: the request's [`ProxySpan`]
//! ([`crate::trace`]), returned to the lifecycle, and a `Recording` in the extensions when the
//! span is recorded and this proxy has a collector.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use hopwise_api::trace_context::SpanId;
use hopwise_model::Outcome;
use hopwise_model::observe::Tracing;
use http::{HeaderMap, Request, Response};
use tokio::time::Instant;

use super::{Kind, SpanData, SpanSink, Value, unix_nanos};
use crate::access_log::header_number;
use crate::trace::{self, ProxySpan};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Inbound,
    Outbound,
}

/// The trace hook: continues or starts the request's trace ([`trace::inbound`] or
/// [`trace::outbound`]) and returns its [`ProxySpan`], which the lifecycle hands on by value (an
/// extension would cost the request an allocated map); when the span is recorded and `sink` is
/// there, a [`Recording`] too, kept in the extensions for the tries and returned to be
/// [finished](Recording::finish).
pub fn begin<B>(
    tracing: Option<&Tracing>,
    sink: Option<&SpanSink>,
    direction: Direction,
    service: &str,
    req: &mut Request<B>,
) -> Begun {
    let span = match direction {
        Direction::Inbound => trace::inbound(tracing, req.headers_mut()),
        Direction::Outbound => trace::outbound(tracing, req.headers_mut()),
    };
    let Some((span, sink)) = span.zip(sink).filter(|(s, _)| s.recorded) else {
        return Begun {
            span,
            recording: None,
        };
    };
    let rec = Arc::new(Recording {
        span,
        direction,
        service: service.to_owned(),
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
        start: unix_nanos(),
        started: Instant::now(),
        notes: Mutex::new(Notes::default()),
        sink: sink.clone(),
    });
    req.extensions_mut().insert(rec.clone());
    Begun {
        span: Some(span),
        recording: Some(rec),
    }
}

/// What the trace hook made of a request: its span at this proxy (`None`: no trace), and its
/// recording when the span is recorded.
#[derive(Debug)]
pub struct Begun {
    pub span: Option<ProxySpan>,
    pub recording: Option<Arc<Recording>>,
}

/// A recorded request's spans while it runs.
#[derive(Debug)]
pub struct Recording {
    span: ProxySpan,
    direction: Direction,
    service: String,
    method: String,
    path: String,
    /// Unix nanoseconds at the start, and the clock's reading then: ends are measured on the
    /// proxy's one clock from there.
    start: u64,
    started: Instant,
    notes: Mutex<Notes>,
    sink: SpanSink,
}

#[derive(Debug, Default)]
struct Notes {
    upstream: Option<String>,
    route: Option<String>,
    peer: Option<String>,
    /// Inbound: the time spent waiting for the app's answer (its head).
    app: Option<std::time::Duration>,
    /// The try under way: its span id and when it started.
    current: Option<(SpanId, Instant)>,
    tries: Vec<SpanData>,
}

impl Recording {
    /// The recording a request carries, if it is recorded.
    pub fn of(extensions: &http::Extensions) -> Option<&Arc<Recording>> {
        extensions.get::<Arc<Recording>>()
    }

    fn notes(&self) -> std::sync::MutexGuard<'_, Notes> {
        // Only this request's tasks take it, one at a time; a panic elsewhere leaves data.
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The route matched (outbound: with the upstream service), and inbound the caller.
    pub fn route(&self, upstream: Option<&str>, route: &str, peer: Option<&str>) {
        let mut n = self.notes();
        n.upstream = upstream.map(str::to_owned);
        n.route = Some(route.to_owned());
        n.peer = peer.map(str::to_owned);
    }

    /// Inbound: how long the app took to answer, so the span tells this proxy's time from
    /// the app's (`hopwise.app_time_ns`; the dashboard's waterfall splits by it).
    pub fn app_time(&self, time: std::time::Duration) {
        self.notes().app = Some(time);
    }

    /// A try starts: it gets a span of its own, which [`Recording::inject_try`] writes.
    pub fn begin_try(&self) {
        self.notes().current = Some((SpanId::random(), Instant::now()));
    }

    /// Writes the try under way as the context the next hop continues.
    pub fn inject_try(&self, headers: &mut HeaderMap) {
        if let Some((id, _)) = self.notes().current {
            self.span.try_context(id).inject(headers);
        }
    }

    /// The try under way ended with `outcome` at `copy`; `started_by`: the retry condition
    /// that made it (none for the first).
    pub fn end_try(
        &self,
        attempt: u32,
        copy: Option<SocketAddr>,
        outcome: Outcome,
        started_by: Option<&'static str>,
    ) {
        let mut n = self.notes();
        let Some((id, at)) = n.current.take() else {
            return;
        };
        let mut attributes = vec![
            ("hopwise.try", Value::Int(i64::from(attempt))),
            (
                "hopwise.outcome",
                Value::Str(outcome_name(outcome).to_owned()),
            ),
        ];
        if let Some(c) = copy {
            attributes.push(("server.address", Value::Str(c.to_string())));
        }
        if let Some(c) = started_by {
            attributes.push(("hopwise.retry_condition", Value::Str(c.to_owned())));
        }
        let error = push_status(&mut attributes, outcome);
        let span = self.try_span(&n, attempt, id, at, attributes, error);
        n.tries.push(span);
    }

    /// The answer's head is out: the request's span and its tries go to the exporter.
    pub fn finish<B>(&self, resp: &Response<B>) {
        let status = resp.status().as_u16();
        let grpc: Option<u32> = header_number(resp.headers(), &crate::error::GRPC_STATUS);
        let mut answer = vec![("http.response.status_code", Value::Int(i64::from(status)))];
        if let Some(g) = grpc {
            answer.push(("rpc.grpc.status_code", Value::Int(i64::from(g))));
        }
        let local = crate::error::LocalReply::of(resp);
        if let Some(r) = local {
            answer.push(("hopwise.local_reply", Value::Str(r.to_owned())));
        }
        let error = status >= 500 || grpc.is_some_and(|g| g != 0);
        self.close(answer, error, local.unwrap_or("abandoned"));
    }

    /// The caller went first (`recorded.rs` says `how`): the span has no answer, says how it
    /// ended (`error.type`), and is an error: work was done that nobody received.
    pub fn ended(&self, how: &'static str) {
        self.close(vec![("error.type", Value::Str(how.to_owned()))], true, how);
    }

    /// The request's span, with `answer`'s attributes, and its tries go to the exporter; a
    /// try still under way (the request's deadline or its caller cut it) ends here, its
    /// `error.type` saying why (`cut`).
    fn close(&self, answer: Vec<(&'static str, Value)>, error: bool, cut: &'static str) {
        let end = self.at(Instant::now());
        let mut n = self.notes();
        if let Some((id, at)) = n.current.take() {
            let attempt = u32::try_from(n.tries.len() + 1).unwrap_or(u32::MAX);
            let attributes = vec![
                ("hopwise.try", Value::Int(i64::from(attempt))),
                ("hopwise.outcome", Value::Str("cut".to_owned())),
                ("error.type", Value::Str(cut.to_owned())),
            ];
            let span = self.try_span(&n, attempt, id, at, attributes, true);
            n.tries.push(span);
        }
        let mut attributes = vec![
            ("http.request.method", Value::Str(self.method.clone())),
            ("url.path", Value::Str(self.path.clone())),
            ("hopwise.service", Value::Str(self.service.clone())),
            ("hopwise.tries", Value::Int(n.tries.len() as i64)),
        ];
        attributes.extend(answer);
        if let Some(t) = n.app {
            let ns = i64::try_from(t.as_nanos()).unwrap_or(i64::MAX);
            attributes.push(("hopwise.app_time_ns", Value::Int(ns)));
        }
        for (key, value) in [
            ("hopwise.upstream", n.upstream.clone()),
            ("hopwise.route", n.route.clone()),
            ("hopwise.peer", n.peer.clone()),
        ] {
            if let Some(v) = value {
                attributes.push((key, Value::Str(v)));
            }
        }
        let request = SpanData {
            trace_id: self.span.trace_id(),
            span_id: self.span.span_id(),
            parent: self.span.parent_span_id(),
            name: self.name(&n),
            kind: match self.direction {
                Direction::Inbound => Kind::Server,
                Direction::Outbound => Kind::Client,
            },
            start: self.start,
            end,
            attributes,
            error,
        };
        self.sink.send(request);
        for t in n.tries.drain(..) {
            self.sink.send(t);
        }
    }

    /// Try `attempt`'s span, from its start `at` until now.
    fn try_span(
        &self,
        n: &Notes,
        attempt: u32,
        id: SpanId,
        at: Instant,
        attributes: Vec<(&'static str, Value)>,
        error: bool,
    ) -> SpanData {
        SpanData {
            trace_id: self.span.trace_id(),
            span_id: id,
            parent: Some(self.span.span_id()),
            name: format!("{} try {attempt}", self.name(n)),
            kind: Kind::Client,
            start: self.at(at),
            end: self.at(Instant::now()),
            attributes,
            error,
        }
    }

    /// `a → b/quote` outbound; `b/quote inbound` (the route callers name it by), or `b inbound`.
    fn name(&self, n: &Notes) -> String {
        let route = n.route.as_deref().unwrap_or("-");
        match (self.direction, &n.upstream) {
            (Direction::Outbound, Some(up)) => format!("{} → {up}/{route}", self.service),
            (Direction::Outbound, None) => format!("{} → ?", self.service),
            // `inbound` is the name of every request no caller's route names.
            (Direction::Inbound, _) if route == "inbound" => format!("{} inbound", self.service),
            (Direction::Inbound, _) => format!("{}/{route} inbound", self.service),
        }
    }

    /// The clock's `at` as Unix nanoseconds.
    fn at(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.started).as_nanos() as u64;
        self.start.saturating_add(since)
    }
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::ConnectFailure => "connect-failure",
        Outcome::RefusedStream => "refused-stream",
        Outcome::ResetBeforeRequest => "reset-before-request",
        Outcome::Reset => "reset",
        Outcome::Timeout => "timeout",
        Outcome::Response { .. } => "response",
    }
}

/// A try's status attributes; `true` when it failed.
fn push_status(attributes: &mut Vec<(&'static str, Value)>, o: Outcome) -> bool {
    let Outcome::Response { status, grpc } = o else {
        return true;
    };
    attributes.push(("http.response.status_code", Value::Int(i64::from(status))));
    if let Some(g) = grpc {
        attributes.push(("rpc.grpc.status_code", Value::Int(i64::from(g.number()))));
    }
    status >= 500 || grpc.is_some_and(|g| g.number() != 0)
}
