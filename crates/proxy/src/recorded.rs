//! One request's records — its span ([`crate::otlp`]) and its access-log and tap line
//! ([`crate::access_log`]) — held while the request runs and finished exactly once: with the
//! answer ([`Recorded::finish`]), or, when the caller goes first and hyper drops the request's
//! future, with how it ended ([`Ended`]), as Envoy's access log does with its response flags.
//! Without it a request its caller cancelled left no line, no span and no tap entry at the
//! callee, so the work done for nobody could not be seen. Owns nothing else; the lifecycles
//! (`inbound.rs`, `outbound.rs`) make one per request and lend its log to the steps.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use http::{HeaderMap, Response};

use crate::access_log::{LogEntry, header_number};
use crate::body::{Body, Watch};
use crate::error::GRPC_STATUS;
use crate::otlp::Recording;

/// How a request with no answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The caller closed the connection or reset the stream before the answer.
    CallerGone,
    /// The same, after the deadline the caller sent (`x-hopwise-timeout-ms`, `grpc-timeout`)
    /// ran out: a timeout above gave up.
    CallerDeadline,
}

impl Ended {
    /// The word in the access log's `ended` field and the span's `error.type`.
    pub fn name(self) -> &'static str {
        match self {
            Ended::CallerGone => "caller-gone",
            Ended::CallerDeadline => "caller-deadline",
        }
    }

    /// How a request that arrived at `arrived` with `caller_left` (the deadline it carried),
    /// dropped unanswered at `now`, ended. Pure: the clock's readings come in.
    pub fn at(now: Instant, arrived: Instant, caller_left: Option<Duration>) -> Ended {
        let waited = now.saturating_duration_since(arrived);
        match caller_left {
            Some(left) if waited + DEADLINE_GRACE >= left => Ended::CallerDeadline,
            _ => Ended::CallerGone,
        }
    }
}

/// A drop this close to the caller's deadline is the deadline's: the time left is sent in whole
/// milliseconds, rounded down, and reaches this proxy a moment after the caller's clock read it.
const DEADLINE_GRACE: Duration = Duration::from_millis(5);

/// A request's records until it is answered or dropped.
#[derive(Debug)]
pub struct Recorded<'c> {
    recording: Option<Arc<Recording>>,
    log: Option<Box<LogEntry<'c>>>,
    /// When the request arrived and the time the caller said it had left: read only when
    /// something records (a request nobody records costs no clock read here).
    arrived: Option<(Instant, Option<Duration>)>,
}

impl<'c> Recorded<'c> {
    /// The records of a request with these headers (read only when something records).
    pub fn new(
        recording: Option<Arc<Recording>>,
        log: Option<Box<LogEntry<'c>>>,
        headers: &HeaderMap,
    ) -> Self {
        let recorded = recording.is_some() || log.is_some();
        let arrived = || {
            let grpc = crate::headers::is_grpc(headers);
            (Instant::now(), crate::deadline::incoming(headers, grpc))
        };
        Recorded {
            arrived: recorded.then(arrived),
            recording,
            log,
        }
    }

    /// The access-log entry, for the steps that fill it.
    pub fn log(&self) -> Option<&LogEntry<'c>> {
        self.log.as_deref()
    }

    /// The answer's head is out: every record finished with it — but a span whose gRPC status
    /// is still to come in trailers, which closes when they pass (the body is watched).
    pub fn finish(mut self, resp: Response<Body>) -> Response<Body> {
        // Answered: nothing is left for the drop to record.
        self.arrived = None;
        if let Some(l) = self.log.take() {
            l.finish(&resp);
        }
        match self.recording.take() {
            Some(r) if awaits_trailers(&resp) => {
                let status = resp.status().as_u16();
                let on_end = move |trailers: Option<&HeaderMap>| {
                    let grpc = trailers.and_then(|t| header_number(t, &GRPC_STATUS));
                    r.answered(status, grpc, None);
                };
                resp.map(|b| Body::Watched(Box::new(Watch::new(b, on_end))))
            }
            Some(r) => {
                r.finish(&resp);
                resp
            }
            None => resp,
        }
    }
}

/// A gRPC answer with no `grpc-status` in its head and a body still to come: its status is in
/// the trailers.
fn awaits_trailers(resp: &Response<Body>) -> bool {
    use http_body::Body as _;
    crate::headers::is_grpc(resp.headers())
        && !resp.headers().contains_key(&GRPC_STATUS)
        && !resp.body().is_end_stream()
}

impl Drop for Recorded<'_> {
    fn drop(&mut self) {
        // `None`: nothing records this request, or it was answered.
        let Some((arrived, caller_left)) = self.arrived else {
            return;
        };
        let how = Ended::at(Instant::now(), arrived, caller_left).name();
        if let Some(r) = self.recording.take() {
            r.ended(how);
        }
        if let Some(l) = self.log.take() {
            l.ended(how);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_past_the_callers_deadline_is_the_timeout_above() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let at = |after, left| Ended::at(t0 + ms(after), t0, left);
        assert_eq!(at(50, None), Ended::CallerGone);
        assert_eq!(at(50, Some(ms(100))), Ended::CallerGone);
        assert_eq!(at(94, Some(ms(100))), Ended::CallerGone);
        // Within the grace: the time left arrives rounded down and a moment late.
        assert_eq!(at(96, Some(ms(100))), Ended::CallerDeadline);
        assert_eq!(at(100, Some(ms(100))), Ended::CallerDeadline);
        assert_eq!(at(250, Some(ms(100))), Ended::CallerDeadline);
        // A clock read before the arrival (never, but not a panic either).
        assert_eq!(Ended::at(t0, t0 + ms(5), Some(ms(10))), Ended::CallerGone);
    }
}
