//! The link from an inbound request to the outbound calls its app makes while serving it,
//! through the trace context the app carries on (W3C `traceparent` or B3: each side's
//! [`ProxySpan`], which [`crate::trace`] gives each lifecycle). No hopwise header has to pass
//! through the app: the proxy ties both sides together itself and, for each linked outbound
//! call, caps its deadline by what is left of the inbound request's ([`Served::left`]), ends it when the inbound caller went away
//! ([`Served::gone`]), and takes its report "came back retried and failed"
//! ([`Served::report`]), which marks the app's failed answer "retries exhausted" so the proxies
//! above do not retry it again.
//!
//! Matching. The inbound side gives the request a span of its own before the app sees it
//! ([`crate::trace::inbound`]), so a call is matched first on (trace id, that span id): the
//! parent an outbound call names when its app passed the context on unchanged. An app
//! instrumented with OpenTelemetry makes its own child span per call, whose id the proxy never
//! saw; such a call is matched on the trace id alone when exactly one
//! inbound request of that trace is in flight here. With several, and no span matching, nothing
//! is linked: picking one would be a guess, and a wrong link could cancel or mark a stranger.
//!
//! Without trace context: by time. An app that carries nothing still makes its calls through
//! this proxy, so the proxy sees both sides of it. A call linked to no request that comes back
//! retried and failed leaves a token ([`Links::report_unlinked`]); a failed answer of the app's
//! to a request none of whose calls was linked by trace claims a token made during its life and
//! is marked "retries exhausted" by it ([`Answering::answered`]; the rules in `by_time.rs`).
//! When requests overlap, which failure a token marks is a guess; every failure that passes up
//! a failed call is marked, and a failure of the app's own only when it claims a token in the
//! moment between a neighbour's failed call and the app's answer to it.
//!
//! Bounds: the table holds at most `cap` requests (the proxy's inbound cap); past it a request
//! is served unlinked (and linked by time). An entry lives exactly as long as its inbound request
//! ([`Serving`]'s drop removes it). A request without trace context (no [`ProxySpan`]) costs a
//! few atomic operations on each side of the app (the count of requests in flight, the token
//! count, the calls counted), and no lock or allocation unless it fails after a token was made.

mod by_time;
mod table;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::attempts::EXHAUSTED_HEADER;
use crate::deadline;
use crate::error::GRPC_STATUS;
use crate::metrics::carried::LinkCounters;
use crate::trace::ProxySpan;

use by_time::ByTime;
use table::{Key, Table};

const EXHAUSTED: http::HeaderName = http::HeaderName::from_static(EXHAUSTED_HEADER);

/// The inbound requests in flight that carry trace context, shared by the workers (and kept
/// across a live configuration change, so a request outlives the configuration it began under).
#[derive(Debug)]
pub struct Links {
    table: std::sync::Mutex<Table>,
    cap: usize,
    /// Calls linked to no request that came back retried and failed, for the requests in
    /// flight to claim.
    by_time: ByTime,
    /// Requests the app is serving now (all of them, linked by trace or not).
    in_flight: AtomicUsize,
    counters: LinkCounters,
}

/// What an outbound call learns of the inbound request it was made for, and tells it.
#[derive(Debug, Default)]
pub struct Served {
    /// When the inbound request must be answered: the caller's propagated deadline or the
    /// app's `inbound.timeout`, whichever comes first.
    deadline: Option<Instant>,
    gone: AtomicBool,
    notify: Notify,
    /// Tries made by a linked call that came back retried and failed (0: none did).
    exhausted: AtomicU32,
    /// Calls linked to it by trace: then its marks come from them alone, not by time.
    calls: AtomicU32,
}

impl Links {
    pub fn new(cap: usize) -> Arc<Links> {
        Links::with_counters(cap, LinkCounters::default())
    }

    /// [`Links::new`], counting what the app carries and what was marked into `counters`.
    pub fn with_counters(cap: usize, counters: LinkCounters) -> Arc<Links> {
        Arc::new(Links {
            table: std::sync::Mutex::new(Table::default()),
            cap,
            by_time: ByTime::new(cap),
            in_flight: AtomicUsize::new(0),
            counters,
        })
    }

    /// Inbound requests linked now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic elsewhere while holding it leaves a table that is still whole.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An inbound request about to go to the app, at `span` in its trace (this proxy's span,
    /// which the app sees as its parent): an entry until it ends. It must be answered by
    /// `app_deadline` (`inbound.timeout`) or the caller's deadline in `headers` (`grpc`: as
    /// `grpc-timeout`), the sooner. `None`: no trace, or the table is full.
    pub fn serve(
        &self,
        span: Option<&ProxySpan>,
        headers: &HeaderMap,
        app_deadline: Option<Instant>,
        grpc: bool,
    ) -> Option<Serving<'_>> {
        let key = Key::new(span?.trace_id(), span?.span_id());
        let callers = deadline::incoming(headers, grpc).map(|left| Instant::now() + left);
        let deadline = match (callers, app_deadline) {
            (Some(c), Some(a)) => Some(c.min(a)),
            (c, a) => c.or(a),
        };
        let served = Arc::new(Served {
            deadline,
            ..Served::default()
        });
        if !self.lock().insert(key, served.clone(), self.cap) {
            return None;
        }
        Some(Serving {
            links: self,
            key,
            served,
            answered: false,
        })
    }

    /// An inbound request about to go to the app: linked by trace when it can be
    /// ([`Links::serve`]), and by time always (the module's "without trace context").
    pub fn begin(
        &self,
        span: Option<&ProxySpan>,
        headers: &HeaderMap,
        app_deadline: Option<Instant>,
        grpc: bool,
    ) -> Answering<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Answering {
            links: self,
            // Read before the app sees the request: a token made after is made during its life.
            since: self.by_time.now(),
            serving: self.serve(span, headers, app_deadline, grpc),
        }
    }

    /// A call from the app (`span`: the outbound side's): counted, while the app serves
    /// requests, by whether it carried trace context on; then [`Links::find`].
    pub fn call(&self, span: Option<&ProxySpan>) -> Option<Arc<Served>> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            match span.and_then(ProxySpan::parent_span_id) {
                Some(_) => self.counters.carried.inc(),
                None => self.counters.absent.inc(),
            };
        }
        self.find(span)
    }

    /// The inbound request an outbound call from the app was made for, if the call carried its
    /// trace context on (`span`: the outbound side's, whose parent is what the app sent; see
    /// the module's matching rules).
    pub fn find(&self, span: Option<&ProxySpan>) -> Option<Arc<Served>> {
        let span = span?;
        let served = self
            .lock()
            .find(Key::new(span.trace_id(), span.parent_span_id()?))?;
        served.calls.fetch_add(1, Ordering::Relaxed);
        Some(served)
    }

    /// The answer to a call (`grpc`: a gRPC call) linked to no request, as its proxy gives it
    /// to the app: when it is marked "retries exhausted", the requests in flight now may fail
    /// because of it.
    pub fn report_unlinked(&self, status: http::StatusCode, headers: &HeaderMap, grpc: bool) {
        // A mark is only ever on a failure's head (`attempts::give_up`, `Serving::answered`):
        // an HTTP success is not looked into.
        if status.as_u16() < 500 && !grpc {
            return;
        }
        if let Some(n) = tries_of(headers) {
            self.by_time.make(n);
        }
    }
}

/// The tries a "retries exhausted" mark names (1 if it names none readable).
fn tries_of(headers: &HeaderMap) -> Option<u32> {
    let v = headers.get(&EXHAUSTED)?;
    Some(
        v.to_str()
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(1)
            .max(1),
    )
}

impl Served {
    /// What is left of the inbound request's time (zero once it has passed).
    pub fn left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Resolves once the inbound request ended without the app's answer (its caller went away,
    /// or the app's time ran out): nobody waits for the calls made for it.
    pub async fn gone(&self) {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.gone.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    fn cancel(&self) {
        self.gone.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// A linked call's answer, as its proxy gives it to the app: marked "retries exhausted"
    /// (this proxy, or one below, retried and gave up).
    pub fn report(&self, answer: &HeaderMap) {
        if let Some(n) = tries_of(answer) {
            self.exhausted.fetch_max(n, Ordering::AcqRel);
        }
    }

    /// Tries of a linked call that came back retried and failed, if one did.
    pub fn exhausted(&self) -> Option<u32> {
        match self.exhausted.load(Ordering::Acquire) {
            0 => None,
            n => Some(n),
        }
    }
}

/// One inbound request while the app serves it: its trace link, if it has one, and the time
/// link's count as it began.
#[derive(Debug)]
pub struct Answering<'l> {
    links: &'l Links,
    since: u64,
    serving: Option<Serving<'l>>,
}

impl Answering<'_> {
    /// The app answered: a failure is marked "retries exhausted" when a call made for it came
    /// back retried and failed — by trace if any of its calls was linked so, else by time.
    pub fn answered(&mut self, status: http::StatusCode, headers: &mut HeaderMap) {
        let traced = match self.serving.as_mut() {
            Some(s) => {
                if s.answered(status, headers) {
                    self.links.counters.marked_by_trace.inc();
                }
                s.served.calls.load(Ordering::Relaxed) > 0
            }
            None => false,
        };
        // The token count first: one load, where `succeeded` looks a header up.
        if !traced
            && self.links.by_time.made_since(self.since)
            && !succeeded(status, headers)
            && let Some(n) = self.links.by_time.claim(self.since)
        {
            headers.insert(EXHAUSTED, HeaderValue::from(n));
            self.links.counters.marked_by_time.inc();
        }
    }
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.links.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One linked inbound request while it is served; dropping it ends the entry (and, if the app
/// never answered, every call still linked to it).
#[derive(Debug)]
pub struct Serving<'l> {
    links: &'l Links,
    key: Key,
    served: Arc<Served>,
    answered: bool,
}

impl Serving<'_> {
    /// The app answered: marks its answer "retries exhausted" when it is a failure and a call
    /// made for it came back retried and failed (so the proxies above do not retry it again).
    /// Whether it marked.
    fn answered(&mut self, status: http::StatusCode, headers: &mut HeaderMap) -> bool {
        self.answered = true;
        let n = self.served.exhausted();
        if let Some(n) = n
            && !succeeded(status, headers)
        {
            headers.insert(EXHAUSTED, HeaderValue::from(n));
            return true;
        }
        false
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.links.lock().remove(self.key);
        if !self.answered {
            self.served.cancel();
        }
    }
}

/// The app's answer is a success as far as its head says: below 500 (as a proxy's own mark is
/// given) and no failing `grpc-status`. A gRPC answer whose status is still to come in trailers
/// counts as a failure here: a success never reads the mark, a failure must carry it in the head.
fn succeeded(status: http::StatusCode, headers: &HeaderMap) -> bool {
    if status.as_u16() >= 500 {
        return false;
    }
    match headers.get(GRPC_STATUS) {
        Some(s) => s.as_bytes() == b"0",
        None => !crate::headers::is_grpc(headers),
    }
}
