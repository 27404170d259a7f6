//! The one connector to the control port: TCP with TCP_NODELAY, then TLS with a configuration
//! from [`super::client_config`], under a tonic channel ([`channel`]). The host is sent as SNI
//! and never checked (the verifier checks the SPIFFE identity); a host that is no valid server
//! name is an error, as it always was in the proxy.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Why no channel to a control plane was opened.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The authority does not make a URI.
    #[error("{0}")]
    Address(String),
    /// Connecting or the handshake failed (the message names the causes).
    #[error("{0}")]
    Connect(String),
}

/// A tonic channel to `authority` (`HOST:PORT`, see [`super::authority`]) over TLS made with
/// `config`, giving up on connecting after `timeout`. Tonic sees a plain URI, so its own
/// (feature-gated) TLS layer never takes `https` for itself: the connector does the TLS.
pub async fn channel(
    authority: &str,
    config: Arc<ClientConfig>,
    timeout: Duration,
) -> Result<tonic::transport::Channel, ChannelError> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|e| ChannelError::Address(e.to_string()))?
        .connect_timeout(timeout);
    endpoint
        .connect_with_connector(Connector { config })
        .await
        .map_err(|e| ChannelError::Connect(source_chain(&e)))
}

/// The error with its causes, `: `-joined (tonic's own says only "transport error").
pub fn source_chain(e: &dyn std::error::Error) -> String {
    let causes: Vec<String> = std::iter::successors(Some(e), |e| e.source())
        .map(ToString::to_string)
        .collect();
    causes.join(": ")
}

/// Connects to the authority of each URI tonic asks for, then shakes hands.
#[derive(Clone)]
pub struct Connector {
    pub config: Arc<ClientConfig>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").finish_non_exhaustive()
    }
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let config = self.config.clone();
        Box::pin(async move {
            let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
            let host = uri.host().ok_or_else(|| bad("no host"))?;
            let port = uri.port_u16().ok_or_else(|| bad("no port"))?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            // Only sent (SNI), never checked: the verifier checks the SPIFFE identity.
            let name = ServerName::try_from(host).map_err(|e| bad(&e.to_string()))?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(TokioIo::new(tls))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_chain_names_every_cause() {
        let inner = std::io::Error::other("refused");
        let outer = std::io::Error::other(OuterError(inner));
        assert_eq!(source_chain(&outer), "outer: refused");
    }

    #[derive(Debug)]
    struct OuterError(std::io::Error);
    impl std::fmt::Display for OuterError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("outer")
        }
    }
    impl std::error::Error for OuterError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
