//! One side of an upgraded connection taken back from hyper: the stream it ran on and the
//! bytes hyper had read ahead of the switch, so that a failure on the other side can be passed
//! on as a TCP reset (`SO_LINGER` 0, then close) rather than a clean close. hyper hands an
//! upgraded connection back as an opaque `Upgraded`; [`Side::of`] asks for each stream type
//! the proxy gives hyper (the app's TCP, captured or not, the inbound port's TLS, a
//! connection to a copy or the app). A type it does not know (a connection whose protocol
//! hyper-util detected, behind its rewind buffer) is carried as it is and closed, not reset.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::tcp::detect::read_ahead;
use crate::tcp::splice::reset;
use crate::upstream::Stream;

/// The streams hyper ran an upgraded connection on.
#[derive(Debug)]
enum Io {
    Tcp(TcpStream),
    InboundTls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    Upstream(Stream),
    /// Not one of ours: readable and writable, not resettable.
    Opaque(TokioIo<Upgraded>),
}

/// An upgraded connection's side, readable from the bytes read ahead on.
#[derive(Debug)]
pub struct Side {
    ahead: Bytes,
    io: Io,
}

impl Side {
    /// Takes `up` back from hyper as the stream it ran on.
    pub fn of(up: Upgraded) -> Side {
        macro_rules! take {
            ($up:expr, $t:ty, $wrap:expr) => {
                match $up.downcast::<TokioIo<$t>>() {
                    Ok(parts) => {
                        return Side {
                            ahead: parts.read_buf,
                            io: $wrap(parts.io.into_inner()),
                        };
                    }
                    Err(up) => up,
                }
            };
        }
        let up = take!(up, TcpStream, Io::Tcp);
        let up = take!(
            up,
            Box<tokio_rustls::server::TlsStream<TcpStream>>,
            Io::InboundTls
        );
        let up = take!(up, Stream, Io::Upstream);
        Side {
            ahead: Bytes::new(),
            io: Io::Opaque(TokioIo::new(up)),
        }
    }

    /// The TCP connection under this side, if it is known.
    fn tcp(&self) -> Option<&TcpStream> {
        match &self.io {
            Io::Tcp(t) => Some(t),
            Io::InboundTls(t) => Some(t.get_ref().0),
            Io::Upstream(Stream::Plain(t)) => Some(t),
            Io::Upstream(Stream::Tls(t)) => Some(t.get_ref().0),
            Io::Opaque(_) => None,
        }
    }

    /// Whether a failure can be passed on here as a reset.
    pub fn resettable(&self) -> bool {
        self.tcp().is_some()
    }
}

impl super::Reset for Side {
    fn reset(&self) {
        if let Some(tcp) = self.tcp() {
            reset(tcp);
        }
    }
}

impl AsyncRead for Side {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if read_ahead(&mut me.ahead, out) {
            return Poll::Ready(Ok(()));
        }
        match &mut me.io {
            Io::Tcp(t) => Pin::new(t).poll_read(cx, out),
            Io::InboundTls(t) => Pin::new(t.as_mut()).poll_read(cx, out),
            Io::Upstream(s) => Pin::new(s).poll_read(cx, out),
            Io::Opaque(u) => Pin::new(u).poll_read(cx, out),
        }
    }
}

impl AsyncWrite for Side {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Tcp(t) => Pin::new(t).poll_write(cx, buf),
            Io::InboundTls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
            Io::Upstream(s) => Pin::new(s).poll_write(cx, buf),
            Io::Opaque(u) => Pin::new(u).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(t) => Pin::new(t).poll_flush(cx),
            Io::InboundTls(t) => Pin::new(t.as_mut()).poll_flush(cx),
            Io::Upstream(s) => Pin::new(s).poll_flush(cx),
            Io::Opaque(u) => Pin::new(u).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(t) => Pin::new(t).poll_shutdown(cx),
            Io::InboundTls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
            Io::Upstream(s) => Pin::new(s).poll_shutdown(cx),
            Io::Opaque(u) => Pin::new(u).poll_shutdown(cx),
        }
    }
}
