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

use super::semconv::{self, Asked};
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
    scheme: &'static str,
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
        asked: Asked {
            method: req.method().to_string(),
            scheme,
            authority: crate::headers::host_of(req).map(str::to_owned),
            path: req.uri().path().to_owned(),
            grpc: crate::headers::is_grpc(req.headers()),
        },
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
    /// What the conventions read of the request (`semconv.rs`).
    asked: Asked,
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
    /// The route's path template (`http.route`; hopwise's routes are path prefixes).
    template: Option<String>,
    peer: Option<String>,
    /// The callee's own route (an HTTPRoute's name) and rule that took the request.
    http_route: Option<String>,
    rule: Option<String>,
    /// Inbound: the connection's other end.
    client: Option<SocketAddr>,
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

    /// The route matched (outbound: with the upstream service) and its path prefix, if it has
    /// one, and inbound the caller.
    pub fn route(
        &self,
        upstream: Option<&str>,
        route: &str,
        template: Option<&str>,
        peer: Option<&str>,
    ) {
        let mut n = self.notes();
        n.upstream = upstream.map(str::to_owned);
        n.route = Some(route.to_owned());
        n.template = template.map(str::to_owned);
        n.peer = peer.map(str::to_owned);
    }

    /// Outbound: the callee's own route and rule that took the request
    /// (`hopwise.http_route`, `hopwise.rule`).
    pub fn rule(&self, route: &str, rule: Option<&str>) {
        let mut n = self.notes();
        n.http_route = Some(route.to_owned());
        n.rule = rule.map(str::to_owned);
    }

    /// Inbound: the connection's other end (`client.address`, `network.peer.*`).
    pub fn client(&self, peer: SocketAddr) {
        self.notes().client = Some(peer);
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
        let mut attributes = self.asked.attributes(Kind::Client, None);
        if attempt > 1 {
            let resent = i64::from(attempt - 1);
            attributes.push(("http.request.resend_count", Value::Int(resent)));
        }
        if let Some(c) = copy {
            semconv::peer(&mut attributes, c);
        }
        attributes.push(("hopwise.try", Value::Int(i64::from(attempt))));
        let name = outcome_name(outcome);
        attributes.push(("hopwise.outcome", Value::Str(name.to_owned())));
        if let Some(c) = started_by {
            attributes.push(("hopwise.retry_condition", Value::Str(c.to_owned())));
        }
        let error = match outcome {
            Outcome::Response { status, grpc } => {
                let grpc = grpc.map(|g| u32::from(g.number()));
                semconv::answer(&mut attributes, Kind::Client, status, grpc, None)
            }
            _ => {
                attributes.push(("error.type", Value::Str(name.to_owned())));
                true
            }
        };
        let span = self.try_span(&n, id, at, attributes, error);
        n.tries.push(span);
    }

    /// The answer's head is out: the request's span and its tries go to the exporter.
    pub fn finish<B>(&self, resp: &Response<B>) {
        let grpc: Option<u32> = header_number(resp.headers(), &crate::error::GRPC_STATUS);
        let local = crate::error::LocalReply::of(resp);
        self.answered(resp.status().as_u16(), grpc, local);
    }

    /// The answer was `status`, with `grpc` status (from its head, or its trailers once they
    /// came: `crate::recorded` watches the body), or a local reply: the spans go to the exporter.
    pub fn answered(&self, status: u16, grpc: Option<u32>, local: Option<&'static str>) {
        if let Some(code) = grpc {
            self.last_try_got(code);
        }
        let mut answer = Vec::new();
        let error = semconv::answer(&mut answer, self.kind(), status, grpc, local);
        if let Some(r) = local {
            answer.push(("hopwise.local_reply", Value::Str(r.to_owned())));
        }
        self.close(answer, error, local.unwrap_or("abandoned"));
    }

    /// The answer passed up is the last try's: when its head named no gRPC status (it came in
    /// trailers), the try's span gets the one the trailers named.
    fn last_try_got(&self, code: u32) {
        let mut n = self.notes();
        let Some(last) = n.tries.last_mut() else {
            return;
        };
        if last
            .attributes
            .iter()
            .all(|(k, _)| *k != "rpc.grpc.status_code")
        {
            last.attributes
                .push(("rpc.grpc.status_code", Value::Int(i64::from(code))));
            last.error |= semconv::grpc_fails(Kind::Client, code);
        }
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
            let attempt = n.tries.len() as i64 + 1;
            let mut attributes = self.asked.attributes(Kind::Client, None);
            attributes.extend([
                ("hopwise.try", Value::Int(attempt)),
                ("hopwise.outcome", Value::Str("cut".to_owned())),
                ("error.type", Value::Str(cut.to_owned())),
            ]);
            let span = self.try_span(&n, id, at, attributes, true);
            n.tries.push(span);
        }
        let mut attributes = self.asked.attributes(self.kind(), n.template.as_deref());
        if let Some(c) = n.client {
            semconv::client(&mut attributes, c);
        }
        attributes.extend(answer);
        attributes.push(("hopwise.service", Value::Str(self.service.clone())));
        attributes.push(("hopwise.tries", Value::Int(n.tries.len() as i64)));
        if let Some(t) = n.app {
            let ns = i64::try_from(t.as_nanos()).unwrap_or(i64::MAX);
            attributes.push(("hopwise.app_time_ns", Value::Int(ns)));
        }
        for (key, value) in [
            ("hopwise.upstream", n.upstream.clone()),
            ("hopwise.route", n.route.clone()),
            ("hopwise.peer", n.peer.clone()),
            ("hopwise.http_route", n.http_route.clone()),
            ("hopwise.rule", n.rule.clone()),
        ] {
            if let Some(v) = value {
                attributes.push((key, Value::Str(v)));
            }
        }
        let request = SpanData {
            trace_id: self.span.trace_id(),
            span_id: self.span.span_id(),
            parent: self.span.parent_span_id(),
            name: self.asked.span_name(n.template.as_deref()),
            kind: self.kind(),
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

    /// A try's span, from its start `at` until now: a client span named as its request is
    /// (each resend is a span of its own under the conventions; `hopwise.try` tells them apart).
    fn try_span(
        &self,
        n: &Notes,
        id: SpanId,
        at: Instant,
        attributes: Vec<(&'static str, Value)>,
        error: bool,
    ) -> SpanData {
        SpanData {
            trace_id: self.span.trace_id(),
            span_id: id,
            parent: Some(self.span.span_id()),
            name: self.asked.span_name(n.template.as_deref()),
            kind: Kind::Client,
            start: self.at(at),
            end: self.at(Instant::now()),
            attributes,
            error,
        }
    }

    fn kind(&self) -> Kind {
        match self.direction {
            Direction::Inbound => Kind::Server,
            Direction::Outbound => Kind::Client,
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
