//! Which HTTP a connection speaks, known before hyper reads it where it can be: the protocol
//! ALPN agreed after a handshake, or a peek at a plain connection's first bytes. A known
//! protocol is served by hyper's own HTTP/1.1 or HTTP/2 connection; only a connection whose
//! first bytes could still be either (fewer than the HTTP/2 preface's 24, all matching it) goes
//! through hyper-util's auto-detection. Why: auto-detection reads the first bytes itself and
//! hands them back through a rewind buffer, and hyper's read buffer, asked for 8 KiB with those
//! bytes in it, doubles to 16 KiB — on every connection, for its whole life (measured with
//! DHAT: 16 × 16 KiB of a proxy's peak heap at 16 connections). A peek consumes nothing.

use std::error::Error as StdError;
use std::pin::Pin;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::server::conn::{http1, http2};
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::conn::{Finish, Guard};

/// The HTTP/2 connection preface (RFC 9113 §3.4).
pub(crate) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection speaks, as far as is known before serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2,
    /// Not known yet: hyper-util's detection reads it.
    Unknown,
}

impl Proto {
    /// The protocol a TLS handshake agreed on; none (a client that offered no ALPN): unknown.
    pub fn of_alpn(alpn: Option<&[u8]>) -> Proto {
        match alpn {
            Some(b"h2") => Proto::H2,
            Some(b"http/1.1") => Proto::H1,
            _ => Proto::Unknown,
        }
    }

    /// The protocol a connection's first bytes show: the whole preface is HTTP/2, anything that
    /// departs from it is HTTP/1.x (hyper refuses what is neither), a part of it is unknown.
    pub fn of_prefix(first: &[u8]) -> Proto {
        let n = first.len().min(H2_PREFACE.len());
        if first[..n] != H2_PREFACE[..n] {
            Proto::H1
        } else if n == H2_PREFACE.len() {
            Proto::H2
        } else {
            Proto::Unknown
        }
    }

    /// Peeks at `tcp`'s first bytes, waiting for them until `until` (the header-read
    /// deadline): a peer that sends nothing is unknown, and the connection's own timer closes it.
    pub async fn sniff(tcp: &TcpStream, until: Instant) -> Proto {
        let mut first = [0u8; 24];
        match tokio::time::timeout_at(until, tcp.peek(&mut first)).await {
            Ok(Ok(n)) if n > 0 => Proto::of_prefix(&first[..n]),
            _ => Proto::Unknown,
        }
    }
}

/// hyper's server connections, configured once per worker, one builder per protocol.
#[derive(Debug)]
pub struct Servers {
    auto: auto::Builder<TokioExecutor>,
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
}

/// Settings every server connection shares.
#[derive(Debug)]
pub struct Settings {
    pub header_read: Duration,
    /// The largest request head (and HTTP/2 header list) accepted.
    pub max_head: usize,
    /// HTTP/2: a peer that stops answering pings for `ping_timeout` after `ping_interval` of
    /// silence is gone, whatever its streams.
    pub ping_interval: Duration,
    pub ping_timeout: Duration,
}

impl Servers {
    pub fn new(s: &Settings) -> Servers {
        let mut auto = auto::Builder::new(TokioExecutor::new());
        auto.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(s.header_read)
            .max_buf_size(s.max_head)
            .keep_alive(true);
        auto.http2()
            .timer(TokioTimer::new())
            .max_header_list_size(s.max_head as u32)
            .keep_alive_interval(s.ping_interval)
            .keep_alive_timeout(s.ping_timeout);
        let mut h1 = http1::Builder::new();
        h1.timer(TokioTimer::new())
            .header_read_timeout(s.header_read)
            .max_buf_size(s.max_head)
            // The head's own limit (431): the read buffer's alone let a 100 KiB head through
            // here (tests/failures.rs), where hyper-util's detection path refused it.
            .max_header_size(s.max_head)
            .keep_alive(true);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_header_list_size(s.max_head as u32)
            .keep_alive_interval(s.ping_interval)
            .keep_alive_timeout(s.ping_timeout);
        Servers { auto, h1, h2 }
    }

    /// Serves `io` as `proto` says (with HTTP/1.1 upgrades when `upgrades`) until the
    /// connection ends or `guard` closes it.
    pub async fn serve<I, S, B>(
        &self,
        io: I,
        proto: Proto,
        upgrades: bool,
        svc: S,
        guard: Guard,
        drain: watch::Receiver<bool>,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn StdError + Send + Sync>>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let io = TokioIo::new(io);
        match (proto, upgrades) {
            (Proto::H1, true) => {
                let conn = self.h1.serve_connection(io, svc).with_upgrades();
                guard.drive(Box::pin(conn), drain).await;
            }
            (Proto::H1, false) => {
                guard
                    .drive(Box::pin(self.h1.serve_connection(io, svc)), drain)
                    .await;
            }
            (Proto::H2, _) => {
                guard
                    .drive(Box::pin(self.h2.serve_connection(io, svc)), drain)
                    .await;
            }
            (Proto::Unknown, true) => {
                let conn = self.auto.serve_connection_with_upgrades(io, svc);
                guard.drive(Box::pin(conn.into_owned()), drain).await;
            }
            (Proto::Unknown, false) => {
                let conn = self.auto.serve_connection(io, svc);
                guard.drive(Box::pin(conn.into_owned()), drain).await;
            }
        }
    }
}

impl<I, S, B> Finish for http1::Connection<I, S>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, B> Finish for http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, B> Finish for http2::Connection<I, S, TokioExecutor>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
    TokioExecutor: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_http1_from_http2() {
        assert_eq!(Proto::of_prefix(b"GET / HTTP/1.1\r\n"), Proto::H1);
        assert_eq!(Proto::of_prefix(b"POST"), Proto::H1);
        // `PRI` is a method name an HTTP/1.1 request could carry: only the preface is HTTP/2.
        assert_eq!(Proto::of_prefix(b"PRI /x HTTP/1.1\r\n"), Proto::H1);
        assert_eq!(Proto::of_prefix(H2_PREFACE), Proto::H2);
        let mut more = H2_PREFACE.to_vec();
        more.extend_from_slice(&[0, 0, 18, 4]);
        assert_eq!(Proto::of_prefix(&more), Proto::H2);
        assert_eq!(Proto::of_prefix(b"PRI * HTTP/2"), Proto::Unknown);
        assert_eq!(Proto::of_prefix(b"P"), Proto::Unknown);
    }

    #[test]
    fn alpn_names_the_protocol_or_leaves_it_open() {
        assert_eq!(Proto::of_alpn(Some(b"h2")), Proto::H2);
        assert_eq!(Proto::of_alpn(Some(b"http/1.1")), Proto::H1);
        assert_eq!(Proto::of_alpn(None), Proto::Unknown);
        assert_eq!(Proto::of_alpn(Some(b"hopwise-tunnel")), Proto::Unknown);
    }
}
