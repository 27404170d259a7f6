//! Protocol detection on a connection whose protocol nobody declared (a captured one): the
//! first bytes decide. An HTTP/1.x request line's method or the HTTP/2 preface takes the HTTP
//! path; any other first byte (a TLS ClientHello, a Redis `*`, a binary protocol) is not HTTP at
//! once; a client silent for [`DETECT_TIMEOUT`] (a server-speaks-first protocol: MySQL, SMTP)
//! is not HTTP then. Ports declared opaque (`tcp.ports`) never come here, and what is not HTTP
//! on an undeclared port is refused (`not-opaque`): a tunnel never reaches a port the mesh file
//! did not open, such as the callee proxy's own admin port on its loopback. Capture calls [`crate::opaque::captured::serve`], which calls [`detect`] for
//! an undeclared port; [`classify`] is the pure decision.

use std::io;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::ReadBuf;
use tokio::net::TcpStream;

/// How long a silent client may take before its connection is taken as opaque.
pub const DETECT_TIMEOUT: Duration = Duration::from_millis(300);

use crate::http_conn::{H2_PREFACE, Proto};

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
    if first.len() >= H2_PREFACE.len() && first.starts_with(H2_PREFACE.as_slice()) {
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

/// A detected connection, nothing consumed: detection only peeks, so what the client sent is
/// still in the socket for whoever serves it next.
#[derive(Debug)]
pub enum Detected {
    /// HTTP/1.x or the HTTP/2 preface: `Proto::H1` or `Proto::H2`.
    Http(TcpStream, Proto),
    Opaque(TcpStream),
}

/// The longest a peer dribbling a prefix waits between two looks; the first is sooner.
const REPEEK_MAX: Duration = Duration::from_millis(20);

/// Peeks until [`classify`] decides, or [`DETECT_TIMEOUT`] passes (opaque), or the client
/// closes with nothing sent (opaque). Never looks at more than the longest prefix.
///
/// Why a peek and not a read: HTTP is then served over the plain `TcpStream`, the very code
/// (and the same monomorphized hyper connection) as the explicit outbound port, where a read
/// ahead would need a wrapper type under hyper — a second copy of its HTTP/1 server outside the
/// proxy's hot text, and a branch on every read (docs/performance.md, "A captured hop").
/// A peek that shows a prefix of something HTTP leaves the socket readable, so the next look
/// waits a little (1 ms, doubling to 20 ms) rather than spinning: only a client that splits
/// its first line pays it.
pub async fn detect(tcp: TcpStream) -> io::Result<Detected> {
    let mut buf = [0u8; H2_PREFACE.len()];
    let deadline = tokio::time::Instant::now() + DETECT_TIMEOUT;
    let mut pause = Duration::from_millis(1);
    let sniff = loop {
        let n = match tokio::time::timeout_at(deadline, tcp.peek(&mut buf)).await {
            Err(_) | Ok(Ok(0)) => break Sniff::Opaque,
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(e),
        };
        match classify(&buf[..n]) {
            Sniff::NeedMore if n < buf.len() => {}
            Sniff::NeedMore => break Sniff::Opaque,
            decided => break decided,
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break Sniff::Opaque;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(REPEEK_MAX);
    };
    Ok(match sniff {
        Sniff::Http1 => Detected::Http(tcp, Proto::H1),
        Sniff::Http2 => Detected::Http(tcp, Proto::H2),
        _ => Detected::Opaque(tcp),
    })
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
        let Detected::Opaque(_) = detect(accepted).await.unwrap() else {
            panic!("a silent client was taken for HTTP");
        };
        assert!(
            started.elapsed() >= DETECT_TIMEOUT,
            "decided before the timeout"
        );
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        (client, listener.accept().await.unwrap().0)
    }

    async fn read_all(mut tcp: TcpStream) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        tcp.read_to_end(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_request_line_split_in_two_is_http_and_nothing_is_consumed() {
        use tokio::io::AsyncWriteExt;
        let (mut client, accepted) = pair().await;
        let writer = tokio::spawn(async move {
            client.write_all(b"GE").await.unwrap();
            tokio::time::sleep(Duration::from_millis(15)).await;
            client.write_all(b"T / HTTP/1.1\r\n\r\n").await.unwrap();
        });
        let Detected::Http(tcp, Proto::H1) = detect(accepted).await.unwrap() else {
            panic!("a split request line was not taken for HTTP/1");
        };
        writer.await.unwrap();
        assert_eq!(read_all(tcp).await, b"GET / HTTP/1.1\r\n\r\n");
    }

    #[tokio::test]
    async fn the_preface_is_http2_and_opaque_bytes_stay_in_the_socket() {
        use tokio::io::AsyncWriteExt;
        let (mut client, accepted) = pair().await;
        client.write_all(H2_PREFACE).await.unwrap();
        drop(client);
        let Detected::Http(tcp, Proto::H2) = detect(accepted).await.unwrap() else {
            panic!("the preface was not taken for HTTP/2");
        };
        assert_eq!(read_all(tcp).await, H2_PREFACE);

        let (mut client, accepted) = pair().await;
        client.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
        drop(client);
        let Detected::Opaque(tcp) = detect(accepted).await.unwrap() else {
            panic!("RESP was taken for HTTP");
        };
        assert_eq!(read_all(tcp).await, b"*1\r\n$4\r\nPING\r\n");
    }
}
