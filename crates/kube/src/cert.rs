//! The webhook's serving certificate: a CA of its own (its PEM is the registration's
//! `caBundle`, which is how the API server trusts the webhook) and a leaf for the names the API
//! server dials — the Service's DNS names in a cluster, 127.0.0.1 in the tests. rcgen, ECDSA
//! P-256. The CA's key is dropped once the leaf is signed: nothing else is ever signed with it.
//! Makes PEM text; writes nothing.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A serving certificate, its key and the CA that signed it, as PEM.
#[derive(Clone)]
pub struct ServingCert {
    /// The registration's `caBundle`.
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// A fresh CA and a leaf for `names` (each a DNS name or an IP address), valid for rcgen's
/// default span (from 1975 to 4096: the install's answer to rotation is to install again).
pub fn serving(names: &[&str]) -> Result<ServingCert, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "hopwise webhook CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name
        .push(DnType::CommonName, "hopwise webhook");
    leaf.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => Ok(SanType::DnsName((*n).try_into()?)),
        })
        .collect::<Result<_, rcgen::Error>>()?;
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(ServingCert {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
