//! Protocol detection on a connection whose protocol nobody declared (a captured one): the
//! first bytes decide. An HTTP/1.x request line's method or the HTTP/2 preface takes the HTTP
//! path; any other first byte (a TLS ClientHello, a Redis `*`, a binary protocol) is not HTTP at
//! once; a client silent for [`DETECT_TIMEOUT`] (a server-speaks-first protocol: MySQL, SMTP)
//! is not HTTP then. Ports declared opaque (`tcp.ports`) never come here, and what is not HTTP
//! on an undeclared port is refused (`not-opaque`): a tunnel never reaches a port the mesh file
//! did not open, such as the callee proxy's own admin port on its loopback. Capture calls [`crate::opaque::captured::serve`], which calls [`detect`] for
//! an undeclared port; [`classify`] is the pure decision.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long a silent client may take before its connection is taken as opaque.
pub const DETECT_TIMEOUT: Duration = Duration::from_millis(300);

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// RFC 9110 §9 methods and PATCH, each with the space that ends it in a request line.
const METHODS: [&[u8]; 9] = [
    b"GET ",
    b"HEAD ",
    b"POST ",
    b"PUT ",
    b"DELETE ",
    b"CONNECT ",
    b"OPTIONS ",
    b"TRACE ",
    b"PATCH ",
];

/// What the first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    Http1,
    Http2,
    Opaque,
    /// Still a prefix of something HTTP: read more.
    NeedMore,
}

/// The decision on the bytes read so far. Pure.
pub fn classify(first: &[u8]) -> Sniff {
    if first.is_empty() {
        return Sniff::NeedMore;
    }
    if first.len() >= H2_PREFACE.len() && first.starts_with(H2_PREFACE) {
        return Sniff::Http2;
    }
    if first.starts_with(b"PRI ") || H2_PREFACE.starts_with(first) {
        // `PRI ` is no HTTP/1 method: the preface, or not HTTP.
        return if H2_PREFACE.starts_with(first) {
            Sniff::NeedMore
        } else {
            Sniff::Opaque
        };
    }
    if METHODS.iter().any(|m| first.starts_with(m)) {
        return Sniff::Http1;
    }
    if METHODS.iter().any(|m| m.starts_with(first)) {
        return Sniff::NeedMore;
    }
    Sniff::Opaque
}

/// A detected connection and the bytes read to decide.
#[derive(Debug)]
pub enum Detected {
    Http(Prefixed),
    /// The stream and the bytes already read from it (send them first).
    Opaque(TcpStream, Bytes),
}

/// Reads until [`classify`] decides, or [`DETECT_TIMEOUT`] passes (opaque), or the client
/// closes (opaque: the bytes it sent are carried). Never reads more than the longest prefix.
pub async fn detect(mut tcp: TcpStream) -> io::Result<Detected> {
    let mut buf = BytesMut::with_capacity(H2_PREFACE.len());
    let deadline = tokio::time::Instant::now() + DETECT_TIMEOUT;
    let sniff = loop {
        match classify(&buf) {
            Sniff::NeedMore if buf.len() < H2_PREFACE.len() => {}
            Sniff::NeedMore => break Sniff::Opaque,
            decided => break decided,
        }
        match tokio::time::timeout_at(deadline, tcp.read_buf(&mut buf)).await {
            Err(_) | Ok(Ok(0)) => break Sniff::Opaque,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
        }
    };
    Ok(match sniff {
        Sniff::Http1 | Sniff::Http2 => Detected::Http(Prefixed {
            first: buf.freeze(),
            tcp,
        }),
        _ => Detected::Opaque(tcp, buf.freeze()),
    })
}

/// A stream whose first bytes were already read: they are read again first.
#[derive(Debug)]
pub struct Prefixed {
    first: Bytes,
    pub tcp: TcpStream,
}

impl Prefixed {
    /// The bytes read ahead and not yet read again.
    pub fn first(&self) -> &[u8] {
        &self.first
    }
}

/// Gives `out` what is left of `ahead` (bytes read before the stream was wrapped), if any:
/// `false` when there is none and the stream itself is to be read.
pub(crate) fn read_ahead(ahead: &mut Bytes, out: &mut ReadBuf<'_>) -> bool {
    if ahead.is_empty() {
        return false;
    }
    let n = ahead.len().min(out.remaining());
    out.put_slice(&ahead[..n]);
    ahead.advance(n);
    true
}

impl AsyncRead for Prefixed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if read_ahead(&mut me.first, out) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.tcp).poll_read(cx, out)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_request_lines_and_the_preface_are_http() {
        assert_eq!(classify(b"GET /penalty/U-41 HTTP/1.1\r\n"), Sniff::Http1);
        assert_eq!(classify(b"DELETE /x"), Sniff::Http1);
        assert_eq!(classify(H2_PREFACE), Sniff::Http2);
    }

    #[test]
    fn prefixes_wait_for_more() {
        for partial in [&b"G"[..], b"GE", b"GET", b"OPTI", b"PRI * HTTP/2", b"P"] {
            assert_eq!(classify(partial), Sniff::NeedMore, "{partial:?}");
        }
    }

    #[test]
    fn anything_else_is_opaque_at_once() {
        // A TLS ClientHello, Redis's RESP, an inline Redis command, a lowercase method.
        for first in [
            &[0x16, 0x03, 0x01][..],
            b"*1\r\n$4\r\nPING\r\n",
            b"PING\r\n",
            b"get /",
        ] {
            assert_eq!(classify(first), Sniff::Opaque, "{first:?}");
        }
        assert_eq!(classify(b"PRI * HTTP/1.1"), Sniff::Opaque);
        assert_eq!(classify(b"GETX"), Sniff::Opaque);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_client_is_not_http_once_the_detection_timeout_passed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let started = tokio::time::Instant::now();
        let Detected::Opaque(_, first) = detect(accepted).await.unwrap() else {
            panic!("a silent client was taken for HTTP");
        };
        assert!(first.is_empty());
        assert!(
            started.elapsed() >= DETECT_TIMEOUT,
            "decided before the timeout"
        );
    }
}
