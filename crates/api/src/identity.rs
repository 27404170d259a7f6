//! The SPIFFE identity of a peer certificate, by the X.509-SVID rules: exactly one URI SAN, and
//! that a SPIFFE ID checked strictly ([`crate::spiffe::parse_id`]). The one reading: the proxy
//! names its callers with it, and every client of the control port checks the server with it,
//! so a certificate that names nobody (or two) fails closed everywhere. [`server_identity`] is
//! the first half of every server-certificate verifier in the mesh: the chain, then the
//! identity; each verifier then says which identity it wants.

use rustls::RootCertStore;
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::ParsedCertificate;
use rustls_pki_types::{CertificateDer, UnixTime};

/// Why a certificate that chains to the mesh's CA still names nobody.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("the peer presented no certificate")]
    NoCertificate,
    #[error("the certificate cannot be parsed")]
    Unparsable,
    #[error("the certificate carries no URI SAN (no SPIFFE ID)")]
    NoUri,
    #[error("the certificate carries {0} URI SANs; a SPIFFE certificate has exactly one")]
    SeveralUris(usize),
    #[error("the certificate's URI SAN is not a SPIFFE ID: {0}")]
    Malformed(#[from] crate::spiffe::SpiffeIdError),
}

/// The SPIFFE ID of a certificate: its one URI SAN, a strict SPIFFE ID.
pub fn peer_identity(cert: &CertificateDer<'_>) -> Result<String, IdentityError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|_| IdentityError::Unparsable)?;
    let san = parsed
        .subject_alternative_name()
        .map_err(|_| IdentityError::Unparsable)?
        .ok_or(IdentityError::NoUri)?;
    let mut uris = san
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            x509_parser::extensions::GeneralName::URI(uri) => Some(*uri),
            _ => None,
        });
    let uri = uris.next().ok_or(IdentityError::NoUri)?;
    let more = uris.count();
    if more > 0 {
        return Err(IdentityError::SeveralUris(more + 1));
    }
    crate::spiffe::parse_id(uri)?;
    Ok(uri.to_owned())
}

/// The SPIFFE ID of a certificate ([`peer_identity`]), if it has a valid one.
pub fn spiffe_id(cert: &CertificateDer<'_>) -> Option<String> {
    peer_identity(cert).ok()
}

/// The SPIFFE identity of a server's certificate that chains to `roots` (through
/// `intermediates`, valid at `now`); an error, for rustls, when it does not chain or names
/// nobody.
pub fn server_identity(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &RootCertStore,
    now: UnixTime,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<String, rustls::Error> {
    let parsed = ParsedCertificate::try_from(end_entity)?;
    verify_server_cert_signed_by_trust_anchor(&parsed, roots, intermediates, now, algs.all)?;
    spiffe_id(end_entity).ok_or_else(|| {
        rustls::Error::General("the server's certificate carries no SPIFFE identity".to_owned())
    })
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};

    /// A CA, and a signer of certificates under it.
    pub(crate) fn ca() -> (CertificateDer<'static>, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        (cert.der().clone(), Issuer::new(params, key))
    }

    fn leaf_with(issuer: &Issuer<'static, KeyPair>, sans: Vec<SanType>) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.subject_alt_names = sans;
        params.signed_by(&key, issuer).unwrap().der().clone()
    }

    #[test]
    fn a_peer_identity_is_exactly_one_strict_spiffe_uri() {
        let (_, issuer) = ca();
        let uri = |s: &str| SanType::URI(s.to_owned().try_into().unwrap());
        let ok = leaf_with(&issuer, vec![uri("spiffe://m.local/service/a")]);
        assert_eq!(peer_identity(&ok).unwrap(), "spiffe://m.local/service/a");
        let none = leaf_with(&issuer, vec![SanType::DnsName("a".try_into().unwrap())]);
        assert_eq!(peer_identity(&none), Err(IdentityError::NoUri));
        let empty = leaf_with(&issuer, vec![]);
        assert_eq!(peer_identity(&empty), Err(IdentityError::NoUri));
        let two = leaf_with(
            &issuer,
            vec![uri("spiffe://m.local/service/a"), uri("https://a.example/")],
        );
        assert_eq!(peer_identity(&two), Err(IdentityError::SeveralUris(2)));
        for bad in [
            "SPIFFE://m.local/service/a",
            "spiffe://m.local/service/a/",
            "spiffe://M.local/a",
        ] {
            let c = leaf_with(&issuer, vec![uri(bad)]);
            assert!(
                matches!(peer_identity(&c), Err(IdentityError::Malformed(_))),
                "{bad}"
            );
            assert_eq!(spiffe_id(&c), None);
        }
    }
}
