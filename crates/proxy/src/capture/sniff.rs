//! Is a captured connection HTTP? Its first bytes, peeked (never read, so the HTTP server
//! sees them): an HTTP/1.x request line starts with a method token and a space, and the
//! HTTP/2 preface with `PRI `. The smallest test that keeps non-HTTP off the HTTP path until
//! protocol detection proper (helper `tunnel`'s, issue 15) replaces it.

use std::time::Duration;

use tokio::net::TcpStream;

/// The longest method token looked for before a space (`OPTIONS`, `PROPFIND`, …).
const MAX_METHOD: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    Http,
    /// Not HTTP, closed before a byte, or nothing sent within the time allowed.
    Other,
}

/// Peeks at the connection until its first bytes decide, for at most `within`.
pub async fn sniff(tcp: &TcpStream, within: Duration) -> Sniff {
    let look = async {
        let mut buf = [0u8; MAX_METHOD + 1];
        loop {
            let n = match tcp.peek(&mut buf).await {
                Ok(0) | Err(_) => return Sniff::Other,
                Ok(n) => n,
            };
            if let Some(s) = classify(&buf[..n]) {
                return s;
            }
            // Part of a method so far: the rest is on its way (peek would return at once).
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(within, look)
        .await
        .unwrap_or(Sniff::Other)
}

/// `None`: too few bytes to tell. Pure.
pub fn classify(bytes: &[u8]) -> Option<Sniff> {
    for (i, b) in bytes.iter().enumerate() {
        if *b == b' ' {
            return Some(if i > 0 { Sniff::Http } else { Sniff::Other });
        }
        if !is_tchar(*b) || i >= MAX_METHOD {
            return Some(Sniff::Other);
        }
    }
    None
}

/// RFC 9110's `tchar`: what a method token is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_and_the_h2_preface_are_http() {
        assert_eq!(classify(b"GET /penalty HTTP/1.1\r\n"), Some(Sniff::Http));
        assert_eq!(classify(b"PROPFIND / HTTP/1.1"), Some(Sniff::Http));
        assert_eq!(
            classify(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            Some(Sniff::Http)
        );
    }

    #[test]
    fn other_protocols_are_not() {
        assert_eq!(
            classify(b"*1\r\n$4\r\nPING\r\n"),
            Some(Sniff::Other),
            "redis"
        );
        assert_eq!(
            classify(&[0x16, 0x03, 0x01, 0x02, 0x00]),
            Some(Sniff::Other),
            "TLS"
        );
        assert_eq!(classify(b" GET"), Some(Sniff::Other));
        assert_eq!(
            classify(b"AAAAAAAAAAAAAAAAAAAA"),
            Some(Sniff::Other),
            "no space in time"
        );
    }

    #[test]
    fn a_method_cut_short_waits_for_more() {
        assert_eq!(classify(b""), None);
        assert_eq!(classify(b"GE"), None);
    }
}
