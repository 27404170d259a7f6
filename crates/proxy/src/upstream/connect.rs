//! Making a connection to an upstream: TCP with a connect timeout (Nagle off), then TLS with
//! ALPN when the connector has a client configuration; the name of a service outside the mesh
//! resolved when a connection is made. Also the tower `Service` hyper-util's h2 pool calls.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::Dest;
use crate::metrics::{Direction, Metrics};

/// A transport to an upstream: plain TCP or TLS over TCP.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Plain(_) => Connected::new(),
            Stream::Tls(tls) => {
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    Connected::new().negotiated_h2()
                } else {
                    Connected::new()
                }
            }
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Why a connection could not be made; found again in the client's error chain.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connection refused by {0}")]
    Refused(String),
    #[error("connecting to {0} timed out")]
    Timeout(String),
    #[error("TLS handshake with {addr} failed: {reason}")]
    Tls { addr: String, reason: String },
    #[error("cannot connect to {addr}: {source}")]
    Io { addr: String, source: io::Error },
    #[error("`{0}` is not an address this proxy can connect to")]
    BadAddress(String),
}

/// Makes connections for a pooled client. With `tls`, every connection is TLS; `server_name`
/// `None` means "verify by identity, not by name" (the mesh verifier ignores the name).
#[derive(Clone)]
pub struct Connector {
    tls: Option<(Arc<ClientConfig>, Option<ServerName<'static>>)>,
    connect_timeout: Duration,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("tls", &self.tls.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl Connector {
    pub fn plain(connect_timeout: Duration) -> Self {
        Connector {
            tls: None,
            connect_timeout,
            metrics: None,
        }
    }

    pub fn tls(
        config: Arc<ClientConfig>,
        server_name: Option<ServerName<'static>>,
        connect_timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Connector {
            tls: Some((config, server_name)),
            connect_timeout,
            metrics: Some(metrics),
        }
    }

    pub(super) async fn connect(&self, dest: &Dest) -> Result<TokioIo<Stream>, ConnectError> {
        let addr = match dest {
            Dest::Addr(a) => *a,
            Dest::Name(name) => resolve(name).await?,
        };
        let authority = || dest.to_string();
        let tcp = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
            Err(_) => return Err(ConnectError::Timeout(authority())),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Err(ConnectError::Refused(authority()));
            }
            Ok(Err(source)) => {
                return Err(ConnectError::Io {
                    addr: authority(),
                    source,
                });
            }
            Ok(Ok(s)) => s,
        };
        // One write per message; Nagle would hold the second small write of a response.
        let _ = tcp.set_nodelay(true);
        let Some((config, name)) = &self.tls else {
            return Ok(TokioIo::new(Stream::Plain(tcp)));
        };
        let name = name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()));
        let handshake = TlsConnector::from(config.clone()).connect(name, tcp);
        let result = tokio::time::timeout(self.connect_timeout, handshake).await;
        let ok = matches!(result, Ok(Ok(_)));
        if let Some(m) = &self.metrics {
            m.handshake(Direction::Outbound, ok);
        }
        match result {
            Ok(Ok(tls)) => Ok(TokioIo::new(Stream::Tls(Box::new(tls)))),
            Ok(Err(e)) => Err(ConnectError::Tls {
                addr: authority(),
                reason: e.to_string(),
            }),
            Err(_) => Err(ConnectError::Timeout(authority())),
        }
    }
}

async fn resolve(authority: &str) -> Result<SocketAddr, ConnectError> {
    if let Ok(a) = authority.parse::<SocketAddr>() {
        return Ok(a);
    }
    let mut addrs =
        tokio::net::lookup_host(authority)
            .await
            .map_err(|source| ConnectError::Io {
                addr: authority.to_owned(),
                source,
            })?;
    addrs
        .next()
        .ok_or_else(|| ConnectError::BadAddress(authority.to_owned()))
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move {
            let dest = uri
                .authority()
                .map(|a| Dest::Name(Arc::from(a.as_str())))
                .ok_or_else(|| ConnectError::BadAddress(uri.to_string()))?;
            connector.connect(&dest).await
        })
    }
}
