//! The TLS channel to one control-plane replica: TCP (TCP_NODELAY), then TLS 1.3 with the
//! control plane's identity checked ([`crate::tls::control_client_config`]) under every CA in
//! `--control-ca` and in the last snapshot's trust bundle (the cache's `ca.pem`), so a CA rotation
//! — or a restart after its `retire` — does not cut the proxy off from the control plane.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::pb::control_client::ControlClient;
use super::{ControlError, ControlOptions};
use crate::tls::{self, TlsError};

/// `host:port` of `https://host:port` (or a bare `host:port`); `http://` is refused, naming the
/// flag: the control plane speaks TLS only.
pub fn authority(url: &str) -> Result<&str, ControlError> {
    hopwise_model::control_port::authority(url).map_err(|why| ControlError::Address {
        url: url.to_owned(),
        why,
    })
}

/// A client of `server`. `trust_domain`: the mesh's, once a snapshot said it. `present_cert`:
/// offer this proxy's certificate (when it has one on disk).
pub async fn connect(
    opts: &ControlOptions,
    server: &str,
    trust_domain: Option<String>,
    present_cert: bool,
) -> Result<ControlClient<tonic::transport::Channel>, ControlError> {
    let authority = authority(server)?;
    let config = client_config(opts, trust_domain, present_cert)?;
    let unreachable = |e: &dyn std::fmt::Display| ControlError::Unreachable {
        server: server.to_owned(),
        reason: e.to_string(),
    };
    // The connector does the TLS; tonic sees a plain URI, so its own (feature-gated) TLS layer
    // never takes `https` for itself.
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|e| unreachable(&e))?
        .connect_timeout(std::time::Duration::from_secs(2));
    let channel = endpoint
        .connect_with_connector(Connector { config })
        .await
        .map_err(|e| unreachable(&source_chain(&e)))?;
    Ok(ControlClient::new(channel))
}

fn client_config(
    opts: &ControlOptions,
    trust_domain: Option<String>,
    present_cert: bool,
) -> Result<Arc<ClientConfig>, ControlError> {
    let flag = |e: TlsError| ControlError::ControlCa {
        path: opts.control_ca.clone(),
        reason: e.to_string(),
    };
    let mut roots = tls::read_certs(&opts.control_ca).map_err(flag)?;
    let files = opts.cert_files();
    // The last snapshot's bundle, if there was one: not there before the first.
    if let Ok(more) = tls::read_certs(&files.ca) {
        roots.extend(more);
    }
    let client = (present_cert && files.cert.exists() && files.key.exists()).then_some(&files);
    match tls::control_client_config(roots.clone(), trust_domain.clone(), client) {
        Ok(c) => Ok(c),
        // A certificate that cannot be used is not worth failing for: the token authenticates.
        Err(e) if client.is_some() => {
            tracing::warn!("connecting without a client certificate: {e}");
            tls::control_client_config(roots, trust_domain, None).map_err(flag)
        }
        Err(e) => Err(flag(e)),
    }
}

/// The error with its causes (tonic's own says only "transport error").
fn source_chain(e: &dyn std::error::Error) -> String {
    let causes: Vec<String> = std::iter::successors(Some(e), |e| e.source())
        .map(ToString::to_string)
        .collect();
    causes.join(": ")
}

/// Connects to the authority of each URI tonic asks for, then shakes hands.
#[derive(Clone)]
struct Connector {
    config: Arc<ClientConfig>,
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
    use super::*;

    #[test]
    fn a_plaintext_control_url_is_refused_naming_the_flag() {
        assert_eq!(
            authority("https://127.0.0.1:7900").unwrap(),
            "127.0.0.1:7900"
        );
        let e = authority("http://127.0.0.1:7900").unwrap_err().to_string();
        assert!(
            e.contains("--control http://127.0.0.1:7900") && e.contains("TLS"),
            "{e}"
        );
    }
}
