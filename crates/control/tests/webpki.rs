//! Certificates the CA issues pass the checks the proxies' TLS runs on them (rustls and
//! webpki, as in `hopwise-proxy`'s `tls.rs`): as a client certificate under the trust bundle,
//! and as a server certificate signed by a trust anchor — from a generated root, from the same
//! root loaded back from the store, and from an operator's root.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hopwise_control::ca::Ca;
use rcgen::{CertificateParams, KeyPair, SanType};
use rustls::RootCertStore;
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

const ID: &str = "spiffe://shop.local/service/pricing";

fn check(ca: &Ca) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.subject_alt_names = vec![SanType::URI(ID.to_owned().try_into().unwrap())];
    let csr = params.serialize_request(&key).unwrap().pem().unwrap();
    let issued = ca
        .issue(&csr, ID, Duration::from_secs(600), SystemTime::now())
        .unwrap();

    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(issued.trust_bundle_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let roots = Arc::new(roots);
    let leaf = CertificateDer::from_pem_slice(issued.cert_chain_pem.as_bytes()).unwrap();
    let now = UnixTime::now();

    // Inbound: the caller's certificate, as the proxy's client verifier checks it.
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .unwrap();
    verifier.verify_client_cert(&leaf, &[], now).unwrap();

    // Outbound: the server's certificate, signed by a trust anchor (the proxy then compares the
    // SPIFFE identity itself: there is no DNS name to check).
    let parsed = ParsedCertificate::try_from(&leaf).unwrap();
    verify_server_cert_signed_by_trust_anchor(
        &parsed,
        &roots,
        &[],
        now,
        provider.signature_verification_algorithms.all,
    )
    .unwrap();
}

#[test]
fn a_generated_root_and_its_stored_copy_issue_certificates_rustls_accepts() {
    let now = SystemTime::now();
    let (ca, root) = Ca::generate("shop", now).unwrap();
    check(&ca);
    check(&Ca::from_pem(&root.cert_pem, &root.key_pem, "stored", now).unwrap());
}

#[test]
fn an_operators_root_issues_certificates_rustls_accepts() {
    use rcgen::{BasicConstraints, DistinguishedName, DnType, IsCa, KeyUsagePurpose};
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Operator Root");
    params.distinguished_name = dn;
    let cert = params.self_signed(&key).unwrap();
    let ca = Ca::from_pem(&cert.pem(), &key.serialize_pem(), "op", SystemTime::now()).unwrap();
    check(&ca);
}
