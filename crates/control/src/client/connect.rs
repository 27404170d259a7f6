//! The TLS under the command line's (and the lab's and the bench's) gRPC channel: TCP with
//! TCP_NODELAY, then TLS 1.3 that accepts a server only if its certificate chains to the given
//! CA bundle and carries a control plane's SPIFFE id (`spiffe://<trust-domain>/control`,
//! [`hopwise_model::control_port::check_control_identity`]). Host names play no part: the bundle is the
//! mesh's own CA, which signs nothing but SPIFFE identities.
//!
//! The proxy has its own client (`crates/proxy/src/control.rs`): the proxy and the control plane
//! do not depend on each other; both call the same identity check in `hopwise-model`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// TLS 1.3 toward a control plane trusting the CA certificates in `bundle_pem`.
pub fn client_config(bundle_pem: &str) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(bundle_pem.as_bytes()) {
        let cert = cert.map_err(|e| e.to_string())?;
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    if roots.is_empty() {
        return Err("it holds no CA certificate".to_owned());
    }
    let verifier = ControlVerifier {
        roots: Arc::new(roots),
        algs: provider.signature_verification_algorithms,
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Connects to the authority of each URI tonic asks for, then shakes hands.
#[derive(Clone)]
pub struct Connector {
    pub config: Arc<ClientConfig>,
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
            // The name is only sent (SNI) and never checked: the verifier checks the identity.
            let name = ServerName::try_from(host).unwrap_or(ServerName::DnsName(
                rustls_pki_types::DnsName::try_from("hopwise-control")
                    .map_err(|e| bad(&e.to_string()))?,
            ));
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(TokioIo::new(tls))
        })
    }
}

/// The chain against the bundle, then the control plane's SPIFFE id.
#[derive(Debug)]
struct ControlVerifier {
    roots: Arc<RootCertStore>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ControlVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let parsed = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &self.roots,
            intermediates,
            now,
            self.algs.all,
        )?;
        let id = spiffe_id(end_entity).ok_or_else(|| {
            rustls::Error::General("the server's certificate carries no SPIFFE id".to_owned())
        })?;
        hopwise_model::control_port::check_control_identity(&id, None)
            .map_err(rustls::Error::General)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The first `spiffe://` URI SAN of a certificate.
fn spiffe_id(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let san = parsed.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|name| match name {
        x509_parser::extensions::GeneralName::URI(uri) if uri.starts_with("spiffe://") => {
            Some((*uri).to_owned())
        }
        _ => None,
    })
}
