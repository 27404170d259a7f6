//! The gateway's TLS: the server side a stranger's client meets. TLS 1.2 and 1.3 only (rustls
//! has nothing older), no client certificate, ALPN `h2` then `http/1.1`, and a certificate
//! chosen by the name the client asks for (SNI) by the model's
//! [`Https::certificate_for`](hopwise_model::gateway::Https::certificate_for): exact, then the
//! longest wildcard. A name no certificate serves, or no name at all, gets no certificate: rustls
//! ends the handshake with an alert, so a client probing names learns none of them.
//!
//! The files are read once, at start (a changed certificate needs a restart).

use std::path::Path;
use std::sync::Arc;

use hopwise_model::gateway::Https;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;

use crate::tls::{TlsError, provider, read_certs};

/// Each certificate loaded, and the names that choose it.
#[derive(Debug)]
struct ByName {
    https: Https,
    keys: Vec<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ByName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let i = self.https.certificate_for(hello.server_name())?;
        self.keys.get(i).cloned()
    }
}

/// The gateway's server configuration, every certificate and key read from its file (relative
/// to `base`) and checked to belong together.
pub fn server_config(https: &Https, base: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let mut keys = Vec::with_capacity(https.certificates.len());
    for c in &https.certificates {
        let (cert, key) = (base.join(&c.cert), base.join(&c.key));
        let chain = read_certs(&cert)?;
        let der = PrivateKeyDer::from_pem_file(&key).map_err(|source| TlsError::Read {
            path: key.clone(),
            source,
        })?;
        let certified = CertifiedKey::from_der(chain, der, &provider)
            .map_err(|source| TlsError::Key { path: key, source })?;
        keys.push(Arc::new(certified));
    }
    let resolver = ByName {
        https: https.clone(),
        keys,
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
