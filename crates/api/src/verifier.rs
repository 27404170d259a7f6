//! The one rustls server-certificate verifier of the mesh, [`SpiffeServerVerifier`]: the chain
//! to the roots, then the certificate's SPIFFE identity ([`crate::identity::server_identity`]:
//! exactly one URI SAN, a strict ID), then whether that identity is the one the client meant
//! to reach — an [`Expectation`]: the control plane's (`control_port::ControlPlane`), or,
//! between proxies, exactly an upstream's identity under the bundle in force (the proxy's).
//! Host names play no part: the roots are the mesh's own CA, which signs nothing but SPIFFE
//! identities.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

/// Whom a client means to reach, and under which roots.
pub trait Expectation: std::fmt::Debug + Send + Sync {
    /// The roots the server's certificate must chain to, as they are at this handshake.
    fn roots(&self) -> Arc<RootCertStore>;
    /// Whether `id` (the certificate's SPIFFE ID) is the one meant; the error says what was
    /// found.
    fn check(&self, id: &str) -> Result<(), String>;
}

/// The chain, then the SPIFFE identity, then the [`Expectation`].
#[derive(Debug)]
pub struct SpiffeServerVerifier<E> {
    expect: E,
    algs: WebPkiSupportedAlgorithms,
}

impl<E: Expectation> SpiffeServerVerifier<E> {
    pub fn new(expect: E, provider: &CryptoProvider) -> Self {
        SpiffeServerVerifier {
            expect,
            algs: provider.signature_verification_algorithms,
        }
    }
}

impl<E: Expectation> ServerCertVerifier for SpiffeServerVerifier<E> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let roots = self.expect.roots();
        let id =
            crate::identity::server_identity(end_entity, intermediates, &roots, now, &self.algs)?;
        self.expect.check(&id).map_err(rustls::Error::General)?;
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
