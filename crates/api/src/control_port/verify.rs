//! The one check of a control plane's certificate, for every client of the control port
//! ([`ControlPlane`], an expectation of [`crate::verifier`]'s one verifier): it
//! must chain to the roots the client was given, and carry exactly one URI SAN, a strict SPIFFE
//! ID ([`crate::identity::peer_identity`]) whose path is `/control` — in the mesh's trust domain
//! once the client knows it (the proxy, after its first snapshot), in any otherwise (the
//! command line). Host names play no part: the roots are the mesh's own CA, which signs nothing
//! but SPIFFE identities.

use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::verifier::{Expectation, SpiffeServerVerifier};

/// Why a client configuration toward the control port cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    #[error("no usable CA certificate to check the control plane with")]
    NoRoots,
    #[error("TLS configuration: {0}")]
    Tls(rustls::Error),
    /// The client certificate and key given do not go together, or cannot be used.
    #[error("{0}")]
    ClientCert(rustls::Error),
}

/// TLS 1.3, ALPN h2, toward a control plane checked by [`ControlVerifier`]. `client`: a
/// certificate chain and key presented when given (the proxy's; the join token is what
/// authenticates its calls, the certificate tells the control plane which proxy it is).
pub fn client_config(
    roots: RootCertStore,
    trust_domain: Option<String>,
    client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<Arc<ClientConfig>, ClientConfigError> {
    if roots.is_empty() {
        return Err(ClientConfigError::NoRoots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let control = ControlPlane {
        roots: Arc::new(roots),
        trust_domain,
    };
    let verifier = ControlVerifier::new(control, &provider);
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(ClientConfigError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(ClientConfigError::ClientCert)?,
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A control plane's certificate: chains to `roots`, `/control` of `trust_domain` (the mesh's,
/// once known: then a control plane of another trust domain is refused) or of any.
#[derive(Debug)]
pub struct ControlPlane {
    pub roots: Arc<RootCertStore>,
    pub trust_domain: Option<String>,
}

impl Expectation for ControlPlane {
    fn roots(&self) -> Arc<RootCertStore> {
        self.roots.clone()
    }

    fn check(&self, id: &str) -> Result<(), String> {
        super::check_control_identity(id, self.trust_domain.as_deref())
    }
}

/// The control port's verifier.
pub type ControlVerifier = SpiffeServerVerifier<ControlPlane>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::identity::tests::ca;
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType};
    use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
    use rustls_pki_types::{ServerName, UnixTime};

    fn leaf(issuer: &Issuer<'static, KeyPair>, sans: &[&str]) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.subject_alt_names = sans
            .iter()
            .map(|id| SanType::URI((*id).to_owned().try_into().unwrap()))
            .collect();
        params.signed_by(&key, issuer).unwrap().der().clone()
    }

    fn verify(
        roots: &[CertificateDer<'static>],
        trust_domain: Option<&str>,
        cert: &CertificateDer<'static>,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut store = RootCertStore::empty();
        for r in roots {
            store.add(r.clone()).unwrap();
        }
        let provider = rustls::crypto::ring::default_provider();
        let control = ControlPlane {
            roots: Arc::new(store),
            trust_domain: trust_domain.map(str::to_owned),
        };
        let verifier = ControlVerifier::new(control, &provider);
        let name = ServerName::try_from("127.0.0.1").unwrap();
        verifier.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
    }

    #[test]
    fn the_control_planes_verifier_accepts_only_control_from_its_roots() {
        let (root, issuer) = ca();
        let control = leaf(&issuer, &["spiffe://shop.local/control"]);
        assert!(verify(std::slice::from_ref(&root), None, &control).is_ok());
        assert!(verify(std::slice::from_ref(&root), Some("shop.local"), &control).is_ok());

        // A proxy's certificate from the same CA is not the control plane.
        let proxy = leaf(&issuer, &["spiffe://shop.local/service/b"]);
        let e = verify(std::slice::from_ref(&root), None, &proxy).unwrap_err();
        assert!(e.to_string().contains("not a control plane"), "{e}");

        // Another trust domain, once the mesh's is known.
        let other = leaf(&issuer, &["spiffe://other.local/control"]);
        let e = verify(std::slice::from_ref(&root), Some("shop.local"), &other).unwrap_err();
        assert!(e.to_string().contains("not `shop.local`"), "{e}");

        // The right identity from a CA this client does not trust.
        let (other_root, other_issuer) = ca();
        let forged = leaf(&other_issuer, &["spiffe://shop.local/control"]);
        assert!(verify(std::slice::from_ref(&root), None, &forged).is_err());
        // Either of two bundles (the flag's, the last snapshot's) is enough.
        assert!(verify(&[root, other_root], None, &forged).is_ok());
    }

    /// The command line's old check took the first `spiffe://` URI SAN; every client now
    /// takes the proxy's, the stricter: exactly one URI SAN, a strict SPIFFE ID.
    #[test]
    fn a_certificate_naming_two_or_a_malformed_identity_is_no_control_plane() {
        let (root, issuer) = ca();
        for sans in [
            &["spiffe://shop.local/control", "https://x.example/"][..],
            &["spiffe://shop.local/control", "spiffe://shop.local/control"][..],
            &["spiffe://Shop.local/control"][..],
            &["spiffe://shop.local/control/"][..],
        ] {
            let e = verify(std::slice::from_ref(&root), None, &leaf(&issuer, sans)).unwrap_err();
            assert!(
                e.to_string().contains("no SPIFFE identity"),
                "{sans:?}: {e}"
            );
        }
    }

    #[test]
    fn a_config_needs_a_root() {
        let e = client_config(RootCertStore::empty(), None, None).unwrap_err();
        assert!(matches!(e, ClientConfigError::NoRoots), "{e}");
    }
}
