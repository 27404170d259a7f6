//! The TLS under the command line's (and the lab's and the bench's) gRPC channel: the CA bundle
//! given read into roots, then `hopwise-api`'s one verifier and connector (TCP_NODELAY, TLS 1.3;
//! the server's certificate must chain to the bundle and carry exactly one URI SAN, the strict
//! SPIFFE ID `spiffe://<trust-domain>/control`, of any trust domain: the command line does not
//! know the mesh's). The proxy's client uses the same verifier and connector.

use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// TLS 1.3 toward a control plane trusting the CA certificates in `bundle_pem` (every one must
/// parse).
pub fn client_config(bundle_pem: &str) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(bundle_pem.as_bytes()) {
        let cert = cert.map_err(|e| e.to_string())?;
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    if roots.is_empty() {
        return Err("it holds no CA certificate".to_owned());
    }
    hopwise_api::control_port::client_config(roots, None, None).map_err(|e| e.to_string())
}
