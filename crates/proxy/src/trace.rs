//! The proxy's part in a trace: on each request, read the context that arrived
//! ([`hopwise_api::trace_context`], W3C and B3), continue it with a span id of this proxy's own
//! (or start a trace where none arrived and `mesh.tracing` is set), decide sampling
//! (parent-based; a trace started here by `mesh.tracing.sampling`), and give the result to the
//! lifecycle as a [`ProxySpan`], which hands it by value to what reads it (the link, the access
//! log, the recording): not through the request's extensions, whose first entry allocates.
//!
//! Inbound, the request's headers toward the app are rewritten at once, in the formats they
//! came in: the app (and what it calls) sees this proxy's span as its parent. Outbound, the
//! headers toward the next proxy are rewritten only when this proxy records its spans (each try
//! then names its own span, [`ProxySpan::try_context`]); otherwise they pass on as the app sent
//! them. Between proxies a recorded context always travels in W3C too (beside the app's own
//! formats), so a B3 app and a W3C app are one trace.
//!
//! Cost: a request without context and without `mesh.tracing` costs a look at the headers and
//! nothing else (no allocation); with context, one header value per format written. No clock
//! is read here.

use hopwise_api::trace_context::{Formats, SpanId, TraceContext, TraceId};
use hopwise_model::observe::Tracing;
use http::HeaderMap;

/// This proxy's span of one request, made by the inbound and outbound lifecycles before
/// anything else reads the request, and passed by them to what needs it.
///
/// Its [`TraceContext`] is the trace id, this proxy's own span id, and as parent the span the
/// arriving headers named: inbound, the calling proxy's try (or an outside client's span);
/// outbound, the app's span — which is the inbound proxy's span when the app passed the context
/// on without a span of its own. A request that arrived without context and was not given a
/// trace here has no `ProxySpan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxySpan {
    pub context: TraceContext,
    /// This proxy records the span (sampled, and `mesh.tracing.collector` set).
    pub recorded: bool,
}

impl ProxySpan {
    pub fn trace_id(&self) -> TraceId {
        self.context.trace_id
    }

    /// This proxy's span id for the request.
    pub fn span_id(&self) -> SpanId {
        self.context.span_id
    }

    /// The span the arriving headers named (`None`: the trace was started here).
    pub fn parent_span_id(&self) -> Option<SpanId> {
        self.context.parent_span_id
    }

    pub fn sampled(&self) -> bool {
        self.context.is_sampled()
    }

    /// The context one try of an outbound request carries: a child of this span named by the
    /// try's own span id, in the app's formats and W3C.
    pub fn try_context(&self, try_span: SpanId) -> TraceContext {
        let mut c = self.context.child(try_span);
        c.formats = c.formats.with(Formats::W3C);
        c
    }
}

/// Where a request stands in a trace at this proxy's inbound listener: continued (a new span
/// id of ours, written toward the app in the formats it came in), started (no context came and
/// `mesh.tracing` is set: a new trace in W3C), or nothing.
pub fn inbound(tracing: Option<&Tracing>, headers: &mut HeaderMap) -> Option<ProxySpan> {
    let (span, continued) = arrive(tracing, headers)?;
    if !continued {
        // Whatever arrived was not a context (garbage B3, a lone sampling flag): none of it
        // reaches the app beside the trace started here, which is the one the app continues.
        hopwise_api::trace_context::remove_all(headers);
    }
    span.context.inject(headers);
    Some(span)
}

/// The same at the outbound listener, for what the app sends: the headers are left as the app
/// wrote them unless this proxy records its spans, when each try writes its own
/// ([`ProxySpan::try_context`]); a trace started here is written at once, so the next hop
/// continues it.
pub fn outbound(tracing: Option<&Tracing>, headers: &mut HeaderMap) -> Option<ProxySpan> {
    let (span, arrived) = arrive(tracing, headers)?;
    if !arrived || span.recorded {
        let mut c = span.context;
        c.formats = c.formats.with(Formats::W3C);
        c.inject(headers);
    }
    Some(span)
}

/// The context continued or started, with its sampling decided; `true`: continued.
fn arrive(tracing: Option<&Tracing>, headers: &HeaderMap) -> Option<(ProxySpan, bool)> {
    let arrived = TraceContext::arrived(headers);
    let continued = arrived.is_ok();
    let context = match arrived {
        Ok(parent) => {
            let child = parent.child(SpanId::random());
            // B3 may leave the decision to us; without `mesh.tracing` it stays left.
            match (parent.sampled, tracing) {
                (None, Some(t)) => child.with_sampled(sample(t.ratio, child.trace_id)),
                _ => child,
            }
        }
        Err(hint) => {
            let t = tracing?;
            let trace_id = TraceId::random();
            let sampled = hint.unwrap_or_else(|| sample(t.ratio, trace_id));
            TraceContext::root(trace_id, SpanId::random(), sampled, Formats::W3C)
        }
    };
    let recorded = context.is_sampled() && tracing.is_some_and(|t| t.collector.is_some());
    Some((ProxySpan { context, recorded }, continued))
}

/// A trace started here is recorded when the low 64 bits of its (random) id fall under
/// `ratio` of their range: OpenTelemetry's trace-id-ratio rule, so every proxy that decides
/// for the same trace decides the same.
pub fn sample(ratio: f64, trace_id: TraceId) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio.is_nan() || ratio <= 0.0 {
        return false;
    }
    let bytes = trace_id.to_bytes();
    let mut low = [0u8; 8];
    low.copy_from_slice(&bytes[8..]);
    // The float's 53 bits are plenty: the threshold is a share of a range, not an id.
    let threshold = (ratio * u64::MAX as f64) as u64;
    u64::from_be_bytes(low) < threshold
}

#[cfg(test)]
mod tests;
