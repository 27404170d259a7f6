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

    pub fn as_str(&self) -> &str {
        match self {
            Text::Authority(a) => a.as_str(),
            Text::Header(h) => h.to_str().unwrap_or_default(),
        }
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `s` as a JSON string, quoted.
pub fn json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    escape(out, s);
    out.push(b'"');
}

/// `s` escaped for inside a JSON string: `"` and `\` escaped, control characters as `\u00XX`.
pub fn escape(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
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

/// A JSON string or `null`.
pub fn json_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// `n` in decimal.
pub fn uint(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
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

/// Lowercase hex of `bytes`.
pub fn hex(out: &mut Vec<u8>, bytes: &[u8]) {
    for b in bytes {
        out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
    }
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
    let start = out.len();
    uint(out, n);
    let len = out.len() - start;
    if len < width {
        out.splice(start..start, std::iter::repeat_n(b'0', width - len));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &str) -> String {
        let mut out = Vec::new();
        json_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_json_requires() {
        assert_eq!(json("plain"), "\"plain\"");
        assert_eq!(json("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(json("\n\u{1}\u{1f}"), r#""\u000a\u0001\u001f""#);
        assert_eq!(json("…é"), "\"…é\"");
        assert_eq!(json(""), "\"\"");
    }

    #[test]
    fn addresses_are_written_as_display_does() {
        for a in [
            "127.0.0.1:7001",
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "[::1]:80",
        ] {
            let a: std::net::SocketAddr = a.parse().unwrap();
            let mut out = Vec::new();
            addr(&mut out, a);
            assert_eq!(String::from_utf8(out).unwrap(), a.to_string());
        }
    }

    #[test]
    fn numbers_are_decimal_and_padded() {
        let mut out = Vec::new();
        uint(&mut out, 0);
        out.push(b' ');
        uint(&mut out, u64::MAX);
        out.push(b' ');
        padded(&mut out, 7, 6);
        out.push(b' ');
        padded(&mut out, 2026, 2);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0 18446744073709551615 000007 2026"
        );
    }

    #[test]
    fn names_hold_short_and_long_text() {
        let long = "a".repeat(INLINE + 1);
        assert_eq!(Name::new("quote").as_str(), "quote");
        assert_eq!(Name::new(&long).as_str(), long);
        assert_eq!(Name::new("é…").as_str(), "é…");
        assert_eq!(Name::default().as_str(), "");
    }
}
