//! The pieces of text an access-log line holds and how they are written, by hand, into the
//! writer's one buffer: [`Name`] (a name the configuration owns, copied inline so taking it costs
//! the request path no allocation), [`Text`] (a request's or answer's own text, kept as the
//! refcounted bytes it arrived in), JSON string escaping and decimal numbers. Pure.

use std::fmt;

use http::HeaderValue;
use http::uri::Authority;

/// Bytes a [`Name`] holds inline; service and route names are DNS labels, almost always shorter.
const INLINE: usize = 30;

/// A service's or route's name: inline up to [`INLINE`] bytes, else on the heap (a name that
/// long is copied at an allocation, as before).
#[derive(Clone, PartialEq, Eq)]
pub struct Name(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl Name {
    pub fn new(s: &str) -> Name {
        if s.len() > INLINE {
            return Name(Repr::Heap(s.into()));
        }
        let mut bytes = [0; INLINE];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Name(Repr::Inline {
            len: s.len() as u8,
            bytes,
        })
    }

    /// The name's bytes, as the writer copies them (no UTF-8 check: it was a `str`).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(s) => s.as_bytes(),
        }
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Copied from a `str` whole: always UTF-8.
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Heap(s) => s,
        }
    }
}

impl Default for Name {
    fn default() -> Name {
        Name::new("")
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Text from the request or its answer (the authority, `x-hopwise-error`), shared with it: a
/// clone is a reference count, not a copy.
#[derive(Clone, PartialEq, Eq)]
pub enum Text {
    Authority(Authority),
    /// A header's value that is visible ASCII ([`Text::header`] checks).
    Header(HeaderValue),
}

impl Text {
    /// The header's value as text, if it is visible ASCII (what `to_str` accepts).
    pub fn header(v: &HeaderValue) -> Option<Text> {
        v.to_str().ok()?;
        Some(Text::Header(v.clone()))
    }

    /// The text's bytes, as the writer copies them (visible ASCII: checked when it was taken).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Authority(a) => a.as_str().as_bytes(),
            Text::Header(h) => h.as_bytes(),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Text::Authority(a) => a.as_str(),
            Text::Header(h) => h.to_str().unwrap_or_default(),
        }
    }

    /// The same text in a buffer of its own (not a slice of the request's head).
    pub fn detached(&self) -> Text {
        HeaderValue::from_bytes(self.as_bytes()).map_or_else(|_| self.clone(), Text::Header)
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `s` as a JSON string, quoted.
pub fn json_str(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    escape(out, s);
    out.push(b'"');
}

/// `s` escaped for inside a JSON string: `"` and `\` escaped, control characters as `\u00XX`.
/// Text that is not ASCII passes as it is (its bytes are all 0x80 and above).
pub fn escape(out: &mut Vec<u8>, bytes: &[u8]) {
    // Almost every string a line holds is plain: one test a word, then one copy.
    if !any_needs_escape(bytes) {
        out.extend_from_slice(bytes);
        return;
    }
    let mut plain = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&bytes[plain..i]);
        plain = i + 1;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
    }
    out.extend_from_slice(&bytes[plain..]);
}

/// Whether any byte of `bytes` needs escaping, eight at a time (the tail padded with a plain
/// byte).
fn any_needs_escape(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        if <[u8; 8]>::try_from(w).map_or(true, |w| needs_escape(u64::from_le_bytes(w))) {
            return true;
        }
    }
    let rest = words.remainder();
    let mut tail = [b'a'; 8];
    tail[..rest.len()].copy_from_slice(rest);
    needs_escape(u64::from_le_bytes(tail))
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any of the word's eight bytes is a control character, `"` or `\` (the bit tricks of
/// "Bit Twiddling Hacks": a byte below `n` borrows into its high bit, which `!w` keeps only
/// where the byte itself was below 0x80; exact as a yes or no).
fn needs_escape(w: u64) -> bool {
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGHS != 0;
    below(w, 0x20) || below(w ^ (ONES * u64::from(b'"')), 1) || below(w ^ (ONES * 0x5c), 1)
}

/// `s` for the common form, where a value ends at a space and the request sits in quotes:
/// every byte that could end or fake a field (space, `"`, `\\`), every control byte (C0, DEL)
/// and every byte of non-ASCII text (C1 controls come as such) written `\\xHH`, as nginx's
/// default escaping does. A peer's `Host: b direction=inbound` stays one value.
pub fn common_escape(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.iter().all(|&b| common_plain(b)) {
        out.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        if common_plain(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        }
    }
}

/// A byte the common form writes as it is: visible ASCII but `"` and `\\`.
fn common_plain(b: u8) -> bool {
    b.is_ascii_graphic() && b != b'"' && b != b'\\'
}

/// Whether `bytes` is an authority as RFC 3986 spells one (`host[:port]`, registered names,
/// IPv4 and bracketed IPv6 literals, percent-encoding): what a `Host` header must be to be
/// logged. No allocation: the header's own bytes are kept.
pub fn is_authority(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(&b))
}

/// A JSON string or `null`.
pub fn json_opt(out: &mut Vec<u8>, s: Option<&[u8]>) {
    match s {
        Some(s) => json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// Each number below 100 as two decimal digits.
const DIGIT_PAIRS: [[u8; 2]; 100] = {
    let mut t = [[0; 2]; 100];
    let mut n = 0;
    while n < 100 {
        t[n] = [b'0' + (n / 10) as u8, b'0' + (n % 10) as u8];
        n += 1;
    }
    t
};

/// `n` in decimal: two digits a step (a line has a dozen numbers).
pub fn uint(out: &mut Vec<u8>, mut n: u64) {
    if n < 10 {
        out.push(b'0' + n as u8);
        return;
    }
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    while n >= 100 {
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[(n % 100) as usize]);
        n /= 100;
    }
    if n >= 10 {
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[n as usize]);
    } else {
        at -= 1;
        buf[at] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[at..]);
}

/// `n` in decimal, or `none` (`null` in JSON, `-` in the common form).
pub fn uint_or(out: &mut Vec<u8>, n: Option<u64>, none: &[u8]) {
    match n {
        Some(n) => uint(out, n),
        None => out.extend_from_slice(none),
    }
}

/// Lowercase hex of `bytes` (a trace id: 16, a span id: 8), written through a buffer in one
/// copy.
pub fn hex<const N: usize>(out: &mut Vec<u8>, bytes: &[u8; N]) {
    let mut buf = [0u8; 32];
    let buf = &mut buf[..2 * N.min(16)];
    for (pair, b) in buf.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
    }
    out.extend_from_slice(buf);
}

/// `addr` as `Display` writes it: IPv4 by hand, IPv6 (rare on a mesh's copies) by `fmt`.
pub fn addr(out: &mut Vec<u8>, addr: std::net::SocketAddr) {
    match addr {
        std::net::SocketAddr::V4(a) => {
            for (i, o) in a.ip().octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                uint(out, u64::from(o));
            }
            out.push(b':');
            uint(out, u64::from(a.port()));
        }
        std::net::SocketAddr::V6(a) => {
            use std::io::Write;
            let _ = write!(out, "{a}");
        }
    }
}

/// `n` in decimal, zero-padded to `width` digits.
pub fn padded(out: &mut Vec<u8>, n: u64, width: usize) {
    let digits = n.checked_ilog10().map_or(1, |l| l as usize + 1);
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(digits)));
    uint(out, n);
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
