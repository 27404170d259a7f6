//! TLS to a service outside the mesh (`external.tls`): how the server's certificate is verified
//! from what `ca_file` holds. Several certificates, or one that is not self-signed: roots, as
//! any TLS client verifies (chain, validity, the name dialled). One self-signed certificate may
//! be a CA (the mesh's own `ca.pem`) or the server's own certificate, made as the seed makes its
//! fee's (`openssl req -x509 …`, CA:TRUE): a presented certificate byte-identical to it is
//! taken as a pin — still within its dates, its SAN matching the name dialled, and the
//! handshake signed by its key — and any other certificate is verified with the file as roots.
//! Everything else fails closed. It must not widen what the roots path accepts: a certificate
//! that is not the pinned one never gets past webpki's checks.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_name;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::{TlsError, provider, read_certs};

/// A client config for a TLS service outside the mesh: verified against `ca` (roots, or a
/// pinned self-signed certificate) for the name the connector dials.
pub fn external_client_config(ca: &Path, alpn: &[u8]) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = provider();
    let bundle = |reason: String| TlsError::Bundle {
        path: ca.to_owned(),
        reason,
    };
    let verifier = External::new(read_certs(ca)?, &provider).map_err(bundle)?;
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bundle(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// The file's certificate when it is the only one and self-signed (issuer = subject): the one
/// a server may present as itself.
fn pin_of(certs: &[CertificateDer<'static>]) -> Option<CertificateDer<'static>> {
    let [only] = certs else { return None };
    let (_, parsed) = x509_parser::parse_x509_certificate(only.as_ref()).ok()?;
    (parsed.issuer().as_raw() == parsed.subject().as_raw()).then(|| only.clone())
}

/// Checks on the pinned certificate once the server presented exactly it: its validity at
/// `now`, its SAN against `name`, and an EKU (when it has one) that allows a server. No chain:
/// the bytes are the trust.
pub(crate) fn check_pinned(
    cert: &CertificateDer<'_>,
    name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    let bad = || rustls::Error::InvalidCertificate(CertificateError::BadEncoding);
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|_| bad())?;
    let validity = parsed.validity();
    let at = |t: i64| {
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            u64::try_from(t).unwrap_or(0),
        ))
    };
    let (not_before, not_after) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    let time = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    if time < not_before {
        return Err(CertificateError::NotValidYetContext {
            time: now,
            not_before: at(not_before),
        }
        .into());
    }
    if time > not_after {
        return Err(CertificateError::ExpiredContext {
            time: now,
            not_after: at(not_after),
        }
        .into());
    }
    if let Ok(Some(eku)) = parsed.extended_key_usage()
        && !(eku.value.any || eku.value.server_auth)
    {
        return Err(CertificateError::InvalidPurpose.into());
    }
    verify_server_name(&ParsedCertificate::try_from(cert)?, name)
}

/// The pin when the server presents it, else the roots.
#[derive(Debug)]
struct External {
    pin: Option<CertificateDer<'static>>,
    roots: Arc<WebPkiServerVerifier>,
}

impl External {
    /// The verifier for a file's certificates; the error says why they cannot be roots.
    fn new(
        certs: Vec<CertificateDer<'static>>,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Self, String> {
        let pin = pin_of(&certs);
        let mut roots = RootCertStore::empty();
        for c in certs {
            roots.add(c).map_err(|e| e.to_string())?;
        }
        let roots = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(External { pin, roots })
    }
}

impl ServerCertVerifier for External {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.pin {
            Some(pin) if pin.as_ref() == end_entity.as_ref() => {
                check_pinned(end_entity, server_name, now)?;
                Ok(ServerCertVerified::assertion())
            }
            _ => self
                .roots
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
        }
    }

    // The handshake's signature is checked by the presented certificate's key in both cases:
    // for a pin that is what proves the server holds the pinned certificate's key.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.roots.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.roots.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.roots.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;
