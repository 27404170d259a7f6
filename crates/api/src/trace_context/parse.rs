//! Strict reading of the trace headers, byte by byte and without allocating: what
//! [`super::TraceContext::extract`] tries in order of precedence.

use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::{
    B3, B3_FLAGS, B3_PARENT_SPAN_ID, B3_SAMPLED, B3_SPAN_ID, B3_TRACE_ID, Formats, SpanId,
    TRACEPARENT, TraceId,
};

/// What one format said.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parsed {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
    pub sampled: Option<bool>,
    pub debug: bool,
    pub short_trace_id: bool,
}

/// Which trace headers a request has at all, valid or not.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Present {
    /// The formats whose ids are there: each is rewritten on inject.
    pub formats: Formats,
    /// A header that can carry a sampling decision without ids (`b3`, `X-B3-Sampled`,
    /// `X-B3-Flags`): without one, [`sampling_only`] has nothing to read.
    pub hint: bool,
}

/// One pass over the request's few header names rather than a hashed lookup per trace header:
/// this runs for every request, and most carry no trace context at all.
pub(super) fn present(headers: &HeaderMap) -> Present {
    let mut p = Present::default();
    for name in headers.keys() {
        let name = name.as_str();
        if name == TRACEPARENT.as_str() {
            p.formats = p.formats.with(Formats::W3C);
        } else if name == B3.as_str() {
            p.formats = p.formats.with(Formats::B3_SINGLE);
            p.hint = true;
        } else if name == B3_TRACE_ID.as_str() || name == B3_SPAN_ID.as_str() {
            p.formats = p.formats.with(Formats::B3_MULTI);
        } else if name == B3_SAMPLED.as_str() || name == B3_FLAGS.as_str() {
            p.hint = true;
        }
    }
    p
}

/// `version-traceid-parentid-flags`. Version `00` is exactly 55 bytes; a later version may
/// append fields after a `-` (W3C: read what you know); `ff` is never valid.
pub(super) fn w3c(headers: &HeaderMap) -> Option<Parsed> {
    let value = single(headers, &TRACEPARENT)?;
    if value.len() < 55 || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let version = hex_byte(&value[0..2])?;
    if version == 0xff || (version == 0 && value.len() != 55) {
        return None;
    }
    if value.len() > 55 && value[55] != b'-' {
        return None;
    }
    let flags = hex_byte(&value[53..55])?;
    Some(Parsed {
        trace_id: TraceId::from_bytes(hex16(&value[3..35])?)?,
        span_id: span(&value[36..52])?,
        parent_span_id: None,
        sampled: Some(flags & 1 == 1),
        debug: false,
        short_trace_id: false,
    })
}

/// `b3: {trace id}-{span id}[-{sampling state}[-{parent span id}]]`.
pub(super) fn b3_single(headers: &HeaderMap) -> Option<Parsed> {
    let value = single(headers, &B3)?;
    let mut fields = value.split(|&b| b == b'-');
    let (trace_id, short_trace_id) = b3_trace_id(fields.next()?)?;
    let span_id = span(fields.next()?)?;
    let (sampled, debug) = match fields.next() {
        None => (None, false),
        Some(state) => sampling_state(state)?,
    };
    let parent_span_id = match fields.next() {
        None => None,
        Some(parent) => Some(span(parent)?),
    };
    if fields.next().is_some() {
        return None;
    }
    Some(Parsed {
        trace_id,
        span_id,
        parent_span_id,
        sampled,
        debug,
        short_trace_id,
    })
}

/// `X-B3-TraceId`, `X-B3-SpanId` (both needed), `X-B3-ParentSpanId`, `X-B3-Sampled`, `X-B3-Flags`.
pub(super) fn b3_multi(headers: &HeaderMap) -> Option<Parsed> {
    let (trace_id, short_trace_id) = b3_trace_id(single(headers, &B3_TRACE_ID)?)?;
    let span_id = span(single(headers, &B3_SPAN_ID)?)?;
    let parent_span_id = optional(headers, &B3_PARENT_SPAN_ID, span)?;
    let sampled = optional(headers, &B3_SAMPLED, multi_sampled)?;
    let debug = optional(headers, &B3_FLAGS, |v| (v == b"1").then_some(true))?.unwrap_or(false);
    Some(Parsed {
        trace_id,
        span_id,
        parent_span_id,
        sampled,
        debug,
        short_trace_id,
    })
}

/// `b3: 0|1|d` alone, or `X-B3-Sampled`/`X-B3-Flags` without ids.
pub(super) fn sampling_only(headers: &HeaderMap) -> Option<bool> {
    if let Some(value) = single(headers, &B3) {
        return match sampling_state(value)? {
            (_, true) => Some(true),
            (sampled, false) => sampled,
        };
    }
    if single(headers, &B3_FLAGS) == Some(b"1") {
        return Some(true);
    }
    multi_sampled(single(headers, &B3_SAMPLED)?)
}

/// A value we wrote: lowercase hex and dashes only.
pub(super) fn header_value(text: &str) -> HeaderValue {
    header_bytes(text.as_bytes())
}

/// The same from bytes (no UTF-8 check first: `HeaderValue` checks each byte anyway).
pub(super) fn header_bytes(text: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(text).expect("hex digits and dashes are a valid header value")
}

/// The header's one value; two values of a trace header are a conflict, read as none.
fn single<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h [u8]> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    values.next().is_none().then(|| value.as_bytes())
}

/// `Some(None)` when absent, `Some(Some(v))` when valid, `None` when present but invalid.
fn optional<T>(
    headers: &HeaderMap,
    name: &HeaderName,
    read: impl Fn(&[u8]) -> Option<T>,
) -> Option<Option<T>> {
    if !headers.contains_key(name) {
        return Some(None);
    }
    single(headers, name).and_then(read).map(Some)
}

fn sampling_state(state: &[u8]) -> Option<(Option<bool>, bool)> {
    match state {
        b"0" => Some((Some(false), false)),
        b"1" => Some((Some(true), false)),
        b"d" => Some((Some(true), true)),
        _ => None,
    }
}

fn multi_sampled(value: &[u8]) -> Option<bool> {
    match value {
        b"1" | b"true" => Some(true),
        b"0" | b"false" => Some(false),
        _ => None,
    }
}

/// 32 hex digits, or 16 (a 64-bit id, the high half zero).
fn b3_trace_id(text: &[u8]) -> Option<(TraceId, bool)> {
    let bytes = match text.len() {
        32 => hex16(text)?,
        16 => {
            let mut bytes = [0; 16];
            bytes[8..].copy_from_slice(&hex8(text)?);
            bytes
        }
        _ => return None,
    };
    Some((TraceId::from_bytes(bytes)?, text.len() == 16))
}

fn span(text: &[u8]) -> Option<SpanId> {
    (text.len() == 16).then_some(())?;
    SpanId::from_bytes(hex8(text)?)
}

fn hex16(text: &[u8]) -> Option<[u8; 16]> {
    let mut out = [0; 16];
    fill(&mut out, text)?;
    Some(out)
}

fn hex8(text: &[u8]) -> Option<[u8; 8]> {
    let mut out = [0; 8];
    fill(&mut out, text)?;
    Some(out)
}

fn fill(out: &mut [u8], text: &[u8]) -> Option<()> {
    (text.len() == out.len() * 2).then_some(())?;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = hex_byte(pair)?;
    }
    Some(())
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let (hi, lo) = (NIBBLES[usize::from(pair[0])], NIBBLES[usize::from(pair[1])]);
    // Both valid: neither has the high bit of `NOT_HEX`.
    ((hi | lo) & NOT_HEX == 0).then_some(hi << 4 | lo)
}

const NOT_HEX: u8 = 0x80;

/// Each byte's value as a lowercase hex digit, or [`NOT_HEX`]: a load per digit, not a match
/// (every traced request reads 48 digits).
const NIBBLES: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut c = 0;
    while c < 256 {
        if let Some(n) = nibble(c as u8) {
            t[c] = n;
        }
        c += 1;
    }
    t
};

/// Lowercase only: W3C tells a reader to ignore uppercase, and B3 is specified lowercase.
const fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}
