//! Trace context as it travels in HTTP headers: W3C Trace Context (`traceparent`, with
//! `tracestate` passed through untouched) and Zipkin's B3, single header (`b3`) and multi-header
//! (`X-B3-*`). The one reading and writing of those headers in hopwise: the proxy's tracing and
//! its link from inbound requests to the outbound calls made for them both use it.
//!
//! Pure: no I/O, no clock, no randomness but [`SpanId::random`] / [`TraceId::random`]. Input is
//! the caller's and may be forged or broken, so parsing is strict (the W3C rules: lowercase hex,
//! no all-zero ids, one header value) and anything invalid is ignored, never an error: a proxy
//! then starts a new trace rather than refusing a request.
//!
//! Precedence when several formats arrive: `traceparent`, then `b3`, then `X-B3-*`. Every format
//! that arrived is rewritten by [`TraceContext::inject`], so no stale span id of the caller's
//! passes on beside the new one.

mod parse;
#[cfg(test)]
mod tests;

use std::fmt;

use http::header::{HeaderMap, HeaderName, HeaderValue};

pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
pub const B3: HeaderName = HeaderName::from_static("b3");
pub const B3_TRACE_ID: HeaderName = HeaderName::from_static("x-b3-traceid");
pub const B3_SPAN_ID: HeaderName = HeaderName::from_static("x-b3-spanid");
pub const B3_PARENT_SPAN_ID: HeaderName = HeaderName::from_static("x-b3-parentspanid");
pub const B3_SAMPLED: HeaderName = HeaderName::from_static("x-b3-sampled");
pub const B3_FLAGS: HeaderName = HeaderName::from_static("x-b3-flags");

/// A trace's 128-bit id; never all zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId([u8; 16]);

/// A span's 64-bit id; never all zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId([u8; 8]);

impl TraceId {
    /// `None` for the all-zero id, which W3C and B3 both reserve for "invalid".
    pub fn from_bytes(bytes: [u8; 16]) -> Option<Self> {
        (bytes != [0; 16]).then_some(Self(bytes))
    }
    pub fn random() -> Self {
        loop {
            if let Some(id) = Self::from_bytes(fastrand::u128(..).to_be_bytes()) {
                return id;
            }
        }
    }
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }
}

impl SpanId {
    pub fn from_bytes(bytes: [u8; 8]) -> Option<Self> {
        (bytes != [0; 8]).then_some(Self(bytes))
    }
    pub fn random() -> Self {
        loop {
            if let Some(id) = Self::from_bytes(fastrand::u64(..).to_be_bytes()) {
                return id;
            }
        }
    }
    pub fn to_bytes(self) -> [u8; 8] {
        self.0
    }
}

/// The formats a context travels in; a small set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Formats(u8);

impl Formats {
    pub const NONE: Self = Self(0);
    pub const W3C: Self = Self(1);
    pub const B3_SINGLE: Self = Self(2);
    pub const B3_MULTI: Self = Self(4);

    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    #[must_use]
    pub fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

/// One request's place in a trace, as its headers say (or as a proxy rewrites them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: TraceId,
    /// The span the headers name: for a context read off a request, the caller's span.
    pub span_id: SpanId,
    /// B3's `ParentSpanId` (W3C has no such field): the parent of `span_id`, if known.
    pub parent_span_id: Option<SpanId>,
    /// `None` when the caller left the decision to us (B3 without a sampling state).
    pub sampled: Option<bool>,
    /// B3's debug flag (`d`, `X-B3-Flags: 1`): sample this one whatever the ratio.
    pub debug: bool,
    /// The formats to write it in: those it arrived in (valid or not), or those a new trace
    /// was started with.
    pub formats: Formats,
    /// Which format it was read from; `tracestate` passes on only beside a valid `traceparent`.
    from: Option<Formats>,
    /// B3 allows 64-bit trace ids; written back as short as they came, for 64-bit tracers.
    short_trace_id: bool,
}

impl TraceContext {
    /// The context a request's headers carry, if any format holds a valid one.
    pub fn extract(headers: &HeaderMap) -> Option<Self> {
        Self::extract_present(headers, parse::present(headers).formats)
    }

    /// The context the headers carry, or else the sampling decision sent without ids
    /// ([`Self::sampling_hint`]): [`Self::extract`] and then that, in one pass over the header
    /// names, looking up only the trace headers that are there.
    pub fn arrived(headers: &HeaderMap) -> Result<Self, Option<bool>> {
        let present = parse::present(headers);
        if let Some(c) = Self::extract_present(headers, present.formats) {
            return Ok(c);
        }
        Err(present
            .hint
            .then(|| parse::sampling_only(headers))
            .flatten())
    }

    fn extract_present(headers: &HeaderMap, present: Formats) -> Option<Self> {
        if present.is_empty() {
            return None;
        }
        let (from, parsed) = parse::w3c(headers)
            .map(|p| (Formats::W3C, p))
            .or_else(|| parse::b3_single(headers).map(|p| (Formats::B3_SINGLE, p)))
            .or_else(|| parse::b3_multi(headers).map(|p| (Formats::B3_MULTI, p)))?;
        Some(Self {
            trace_id: parsed.trace_id,
            span_id: parsed.span_id,
            parent_span_id: parsed.parent_span_id,
            sampled: parsed.sampled,
            debug: parsed.debug,
            formats: present,
            from: Some(from),
            short_trace_id: parsed.short_trace_id,
        })
    }

    /// A sampling decision the caller sent without ids (`b3: 0`, or `X-B3-Sampled` alone), for
    /// parent-based sampling of a trace started here.
    pub fn sampling_hint(headers: &HeaderMap) -> Option<bool> {
        parse::sampling_only(headers)
    }

    /// A new trace, started here.
    pub fn root(trace_id: TraceId, span_id: SpanId, sampled: bool, formats: Formats) -> Self {
        Self {
            trace_id,
            span_id,
            parent_span_id: None,
            sampled: Some(sampled),
            debug: false,
            formats,
            from: None,
            short_trace_id: false,
        }
    }

    /// The same trace one span down: `span_id` is the new span, this one its parent.
    #[must_use]
    pub fn child(&self, span_id: SpanId) -> Self {
        Self {
            span_id,
            parent_span_id: Some(self.span_id),
            ..*self
        }
    }

    #[must_use]
    pub fn with_sampled(self, sampled: bool) -> Self {
        Self {
            sampled: Some(sampled),
            ..self
        }
    }

    /// Whether spans of this request are recorded: sampled, or B3's debug.
    pub fn is_sampled(&self) -> bool {
        self.debug || self.sampled == Some(true)
    }

    /// Writes this context into `headers` in every format of [`Self::formats`], replacing what
    /// those headers held. `tracestate` is kept only when the context came from a valid
    /// `traceparent` (W3C: a vendor that could not read `traceparent` must drop it).
    pub fn inject(&self, headers: &mut HeaderMap) {
        if self.formats.contains(Formats::W3C) {
            headers.insert(TRACEPARENT, self.traceparent());
            if self.from != Some(Formats::W3C) {
                headers.remove(TRACESTATE);
            }
        }
        if self.formats.contains(Formats::B3_SINGLE) {
            headers.insert(B3, parse::header_value(&self.b3_single()));
        }
        if self.formats.contains(Formats::B3_MULTI) {
            self.inject_b3_multi(headers);
        }
    }

    /// `00-<trace id>-<span id>-<flags>`, written into a fixed buffer: `format!`'s hex cost
    /// ~8,000 instructions per request for every traced request.
    pub fn traceparent(&self) -> HeaderValue {
        let mut v = [0u8; 55];
        v[..3].copy_from_slice(b"00-");
        hex_into(&mut v[3..35], &self.trace_id.0);
        v[35] = b'-';
        hex_into(&mut v[36..52], &self.span_id.0);
        v[52] = b'-';
        v[53..].copy_from_slice(if self.is_sampled() { b"01" } else { b"00" });
        parse::header_bytes(&v)
    }

    fn trace_id_b3(&self) -> String {
        let full = self.trace_id.to_string();
        if self.short_trace_id {
            full[16..].to_owned()
        } else {
            full
        }
    }

    fn b3_single(&self) -> String {
        let mut value = format!("{}-{}", self.trace_id_b3(), self.span_id);
        let state = if self.debug {
            Some("d")
        } else {
            self.sampled.map(|s| if s { "1" } else { "0" })
        };
        // The parent id is the fourth field: it can only be written after a sampling state.
        if let Some(state) = state {
            value.push('-');
            value.push_str(state);
            if let Some(parent) = self.parent_span_id {
                value.push('-');
                value.push_str(&parent.to_string());
            }
        }
        value
    }

    fn inject_b3_multi(&self, headers: &mut HeaderMap) {
        headers.insert(B3_TRACE_ID, parse::header_value(&self.trace_id_b3()));
        headers.insert(B3_SPAN_ID, parse::header_value(&self.span_id.to_string()));
        match self.parent_span_id {
            Some(parent) => {
                headers.insert(B3_PARENT_SPAN_ID, parse::header_value(&parent.to_string()))
            }
            None => headers.remove(B3_PARENT_SPAN_ID),
        };
        match self.sampled {
            Some(s) => headers.insert(
                B3_SAMPLED,
                HeaderValue::from_static(if s { "1" } else { "0" }),
            ),
            None => headers.remove(B3_SAMPLED),
        };
        if self.debug {
            headers.insert(B3_FLAGS, HeaderValue::from_static("1"));
        } else {
            headers.remove(B3_FLAGS);
        }
    }
}

/// Removes every trace header of every format (for a caller whose context must not travel).
pub fn remove_all(headers: &mut HeaderMap) {
    for name in [
        TRACEPARENT,
        TRACESTATE,
        B3,
        B3_TRACE_ID,
        B3_SPAN_ID,
        B3_PARENT_SPAN_ID,
        B3_SAMPLED,
        B3_FLAGS,
    ] {
        headers.remove(name);
    }
}

/// Lowercase hex of `bytes` into `out` (twice as long): a load of both digits per byte.
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(*b)]);
    }
}

/// Each byte's two lowercase hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0; 2]; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = [HEX[b >> 4], HEX[b & 0xf]];
        b += 1;
    }
    t
};

fn write_hex<const N: usize>(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    let mut buf = [0u8; N];
    hex_into(&mut buf, bytes);
    f.write_str(std::str::from_utf8(&buf).map_err(|_| fmt::Error)?)
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex::<32>(f, &self.0)
    }
}

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceId({self})")
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex::<16>(f, &self.0)
    }
}

impl fmt::Debug for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpanId({self})")
    }
}
