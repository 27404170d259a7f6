//! One access-log line, as JSON or in the common log format with hopwise's fields after it,
//! written by hand into the writer's one buffer. A [`Line`] holds what the request path
//! already had — names copied inline ([`Name`]), the request's own method, authority and path
//! (refcounted clones), the copy's address and the trace id as they are — so taking it
//! allocates nothing; everything textual happens here, on the writer thread. Pure: the time
//! comes in as Unix nanoseconds, and nothing here reads a clock; [`Clock`] only remembers the
//! calendar of the last second written.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use hopwise_api::trace_context::{SpanId, TraceId};
use hopwise_model::raw::LogFormat;
use http::Method;
use http::uri::PathAndQuery;

use super::text::{self, Name, Text, common_escape, escape, json_opt, padded, uint, uint_or};

/// What one line says about one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Line {
    /// Unix nanoseconds when the request arrived.
    pub time: u64,
    pub direction: &'static str,
    /// The proxy's service, and outbound the upstream called.
    pub service: Name,
    pub upstream: Option<Name>,
    pub route: Option<Name>,
    /// Outbound: the callee's own route (an HTTPRoute's name) and rule that took the request.
    pub http_route: Option<Name>,
    pub rule: Option<Name>,
    /// Inbound: the caller's verified identity.
    pub caller: Option<Arc<str>>,
    pub method: Method,
    pub authority: Option<Text>,
    /// The path and query as received (`None`: `/`).
    pub path: Option<PathAndQuery>,
    /// The query is logged as it came (`access_log.query`); otherwise it is written `?…`.
    pub query: bool,
    pub status: u16,
    pub grpc_status: Option<u32>,
    pub tries: u32,
    /// The retry condition that started each retry, in order.
    pub retries: Vec<&'static str>,
    /// Why a retry a condition allowed was not made (`budget`, `deadline`, …).
    pub retry_skipped: Option<&'static str>,
    /// The copy the last try went to.
    pub copy: Option<SocketAddr>,
    /// A reply the proxy made itself: its reason (`error::LocalReply`, never a header an app
    /// or a peer could send).
    pub local_reply: Option<&'static str>,
    /// How a request with no answer ended (`caller-gone`, `caller-deadline`); `None`: answered.
    pub ended: Option<&'static str>,
    /// Body bytes as their `content-length` says (`None`: streamed, not counted).
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    pub duration_us: u64,
    /// The proxy's own time: the whole, less the time spent waiting for upstream or the app.
    pub proxy_us: u64,
    pub trace_id: Option<TraceId>,
    /// This proxy's span of the request (the one its own spans and the next hop name).
    pub span_id: Option<SpanId>,
}

/// The calendar of the last second a line was written in: a busy log works out the date once a
/// second, not once a line.
#[derive(Debug, Default)]
pub struct Clock {
    second: Option<u64>,
    /// `2026-12-01T16:07:06`
    rfc3339: Vec<u8>,
    /// `01/Dec/2026:16:07:06 +0000`
    clf: Vec<u8>,
}

impl Clock {
    fn at(&mut self, nanos: u64) -> &Self {
        let second = nanos / 1_000_000_000;
        if self.second != Some(second) {
            self.second = Some(second);
            self.set(second);
        }
        self
    }

    fn set(&mut self, second: u64) {
        const MONTHS: [&[u8]; 12] = [
            b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
            b"Dec",
        ];
        let (y, mo, d, h, mi, s) = civil(second);
        let (y, mo, d) = (y.max(0) as u64, u64::from(mo), u64::from(d));
        let r = &mut self.rfc3339;
        r.clear();
        for (n, w, sep) in [
            (y, 4, b'-'),
            (mo, 2, b'-'),
            (d, 2, b'T'),
            (h, 2, b':'),
            (mi, 2, b':'),
        ] {
            padded(r, n, w);
            r.push(sep);
        }
        padded(r, s, 2);
        let c = &mut self.clf;
        c.clear();
        padded(c, d, 2);
        c.push(b'/');
        c.extend_from_slice(MONTHS[(mo as usize).clamp(1, 12) - 1]);
        c.push(b'/');
        padded(c, y, 4);
        for n in [h, mi, s] {
            c.push(b':');
            padded(c, n, 2);
        }
        c.extend_from_slice(b" +0000");
    }
}

impl Line {
    /// Copies what the line shares with the request's head (its path and authority are slices
    /// of hyper's read buffer): a line waiting in the queue then holds a few bytes, not the
    /// whole buffer the head was read into (8 KiB or more, up to 4,096 lines when the writer
    /// is slow).
    pub fn detach(&mut self) {
        if let Some(p) = &self.path
            && let Ok(own) =
                PathAndQuery::from_maybe_shared(Bytes::copy_from_slice(p.as_str().as_bytes()))
        {
            self.path = Some(own);
        }
        self.authority = self.authority.as_ref().map(Text::detached);
    }

    /// Appends the line, ending in `\n`, to `out`.
    pub fn render(&self, format: LogFormat, clock: &mut Clock, out: &mut Vec<u8>) {
        match format {
            LogFormat::Json => self.json(clock, out),
            LogFormat::Common => self.common(clock, out),
        }
    }

    /// The line as JSON, in a buffer of its own (the tap's).
    pub fn json_line(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        self.json(&mut Clock::default(), &mut out);
        out
    }

    /// The path as logged, in two pieces: the path (and query, if logged) and `?…` when the
    /// query is redacted.
    pub fn logged_path(&self) -> (&str, &'static str) {
        let Some(p) = &self.path else {
            return ("/", "");
        };
        let full = p.as_str();
        // `query()` is what follows the first `?`, found when the path was parsed.
        match p.query() {
            Some(q) if !self.query => (&full[..full.len() - q.len() - 1], "?…"),
            _ => (full, ""),
        }
    }

    fn json(&self, clock: &mut Clock, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"time\":\"");
        out.extend_from_slice(&clock.at(self.time).rfc3339);
        out.push(b'.');
        padded(out, self.time % 1_000_000_000 / 1000, 6);
        out.extend_from_slice(b"Z\"");
        self.fields(Form::Json, out);
        out.extend_from_slice(b"}\n");
    }

    /// `host ident user [time] "request" status bytes`, then `key=value` pairs; `-` for none.
    fn common(&self, clock: &mut Clock, out: &mut Vec<u8>) {
        out.extend_from_slice(b"- - ");
        Form::Common.str(out, self.caller.as_deref().map(str::as_bytes));
        out.extend_from_slice(b" [");
        out.extend_from_slice(&clock.at(self.time).clf);
        out.extend_from_slice(b"] \"");
        common_escape(out, self.method.as_str().as_bytes());
        out.push(b' ');
        let (path, redacted) = self.logged_path();
        common_escape(out, path.as_bytes());
        out.extend_from_slice(redacted.as_bytes());
        out.extend_from_slice(b"\" ");
        uint(out, u64::from(self.status));
        out.push(b' ');
        uint_or(out, self.bytes_out, b"-");
        self.fields(Form::Common, out);
        out.push(b'\n');
    }

    /// Every field after the time in JSON; after the common log format's own in the common form.
    /// Inlined into each form's writer, so the form and every key's length are constants there.
    #[inline(always)]
    fn fields(&self, form: Form, out: &mut Vec<u8>) {
        let json = form == Form::Json;
        form.key(out, "direction");
        form.plain(out, self.direction);
        form.key(out, "service");
        form.str(out, Some(self.service.as_bytes()));
        form.key(out, "upstream");
        form.str(out, self.upstream.as_ref().map(Name::as_bytes));
        form.key(out, "route");
        form.str(out, self.route.as_ref().map(Name::as_bytes));
        form.key(out, "http_route");
        form.str(out, self.http_route.as_ref().map(Name::as_bytes));
        form.key(out, "rule");
        form.str(out, self.rule.as_ref().map(Name::as_bytes));
        if json {
            form.key(out, "caller");
            form.str(out, self.caller.as_deref().map(str::as_bytes));
            form.key(out, "method");
            form.str(out, Some(self.method.as_str().as_bytes()));
        }
        form.key(out, "authority");
        form.str(out, self.authority.as_ref().map(Text::as_bytes));
        if json {
            out.extend_from_slice(b",\"path\":\"");
            let (path, redacted) = self.logged_path();
            escape(out, path.as_bytes());
            out.extend_from_slice(redacted.as_bytes());
            out.push(b'"');
            form.key(out, "status");
            uint(out, u64::from(self.status));
        }
        form.key(out, "grpc_status");
        form.num(out, self.grpc_status.map(u64::from));
        form.key(out, "tries");
        uint(out, u64::from(self.tries));
        form.key(out, "retries");
        self.retries(form, out);
        form.key(out, "retry_skipped");
        match self.retry_skipped {
            Some(r) => form.plain(out, r),
            None => out.extend_from_slice(form.none()),
        }
        form.key(out, "copy");
        form.with(out, self.copy, text::addr);
        form.key(out, "local_reply");
        match self.local_reply {
            Some(r) => form.plain(out, r),
            None => out.extend_from_slice(form.none()),
        }
        form.key(out, "ended");
        match self.ended {
            Some(e) => form.plain(out, e),
            None => out.extend_from_slice(form.none()),
        }
        form.key(out, "bytes_in");
        form.num(out, self.bytes_in);
        if json {
            form.key(out, "bytes_out");
            form.num(out, self.bytes_out);
        }
        form.key(out, "duration_us");
        uint(out, self.duration_us);
        form.key(out, "proxy_us");
        uint(out, self.proxy_us);
        form.key(out, "trace_id");
        form.with(out, self.trace_id, |out, id| text::hex(out, &id.to_bytes()));
        form.key(out, "span_id");
        form.with(out, self.span_id, |out, id| text::hex(out, &id.to_bytes()));
    }

    /// JSON: `["5xx","reset"]`; the common form: `5xx,reset`, or `-` for none.
    fn retries(&self, form: Form, out: &mut Vec<u8>) {
        let json = form == Form::Json;
        if json {
            out.push(b'[');
        } else if self.retries.is_empty() {
            out.push(b'-');
        }
        for (i, r) in self.retries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            form.plain(out, r);
        }
        if json {
            out.push(b']');
        }
    }
}

/// How a field is written: JSON's `,"key":value` (strings quoted and escaped, `null` for none)
/// or the common form's ` key=value` (as they are, `-` for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Json,
    Common,
}

// Inlined where `fields` uses them: with the form and the key constant, each key is a few
// stores, not three calls to `memcpy`.
impl Form {
    #[inline(always)]
    fn key(self, out: &mut Vec<u8>, key: &str) {
        match self {
            Form::Json => {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(key.as_bytes());
                out.extend_from_slice(b"\":");
            }
            Form::Common => {
                out.push(b' ');
                out.extend_from_slice(key.as_bytes());
                out.push(b'=');
            }
        }
    }

    #[inline(always)]
    fn none(self) -> &'static [u8] {
        match self {
            Form::Json => b"null",
            Form::Common => b"-",
        }
    }

    #[inline(always)]
    fn str(self, out: &mut Vec<u8>, v: Option<&[u8]>) {
        match (self, v) {
            (Form::Json, v) => json_opt(out, v),
            (Form::Common, Some(v)) => common_escape(out, v),
            (Form::Common, None) => out.push(b'-'),
        }
    }

    /// A word of the proxy's own (a direction, a retry condition, a reason a retry was not
    /// made): nothing in it needs escaping.
    #[inline(always)]
    fn plain(self, out: &mut Vec<u8>, v: &'static str) {
        debug_assert!(!v.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\'));
        match self {
            Form::Json => {
                out.push(b'"');
                out.extend_from_slice(v.as_bytes());
                out.push(b'"');
            }
            Form::Common => out.extend_from_slice(v.as_bytes()),
        }
    }

    #[inline(always)]
    fn num(self, out: &mut Vec<u8>, v: Option<u64>) {
        uint_or(out, v, self.none());
    }

    /// `v` written by `write` (plain text: quoted in JSON), or none.
    #[inline(always)]
    fn with<T>(self, out: &mut Vec<u8>, v: Option<T>, write: impl FnOnce(&mut Vec<u8>, T)) {
        let Some(v) = v else {
            out.extend_from_slice(self.none());
            return;
        };
        let quote: &[u8] = if self == Form::Json { b"\"" } else { b"" };
        out.extend_from_slice(quote);
        write(out, v);
        out.extend_from_slice(quote);
    }
}

/// A Unix second → (year, month, day, hours, minutes, seconds), UTC.
pub fn civil(secs: u64) -> (i64, u32, u32, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
#[path = "line_tests.rs"]
mod tests;
