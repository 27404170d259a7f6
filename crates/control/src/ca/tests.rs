//! Issuance checked by reading the certificate back with x509-parser (SAN, EKU, validity,
//! issuer, key), and every refusal with its reason.

use super::*;
use rcgen::{CertificateParams, KeyPair};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;

const ID: &str = "spiffe://shop.local/service/pricing";

fn now() -> SystemTime {
    SystemTime::now()
}

fn ca() -> Ca {
    Ca::generate("shop", now()).unwrap().0
}

/// A CSR made the way a proxy makes one: its own key, and the SANs given.
fn csr(key: &KeyPair, sans: Vec<SanType>) -> String {
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans;
    params.serialize_request(key).unwrap().pem().unwrap()
}

fn uri(s: &str) -> SanType {
    SanType::URI(s.to_owned().try_into().unwrap())
}

fn der_of(pem_text: &str) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem_text.as_bytes())
        .unwrap()
        .1
        .contents
}

fn with_cert<T>(pem_text: &str, f: impl FnOnce(&X509Certificate<'_>) -> T) -> T {
    let der = der_of(pem_text);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    f(&cert)
}

#[test]
fn issues_a_certificate_whose_only_name_is_the_identity() {
    let ca = ca();
    let key = KeyPair::generate().unwrap();
    let t = now();
    let lifetime = Duration::from_secs(24 * 3600);
    let issued = ca
        .issue(&csr(&key, vec![uri(ID)]), ID, lifetime, t)
        .unwrap();
    assert_eq!(issued.identity, ID);
    assert_eq!(issued.trust_bundle_pem, ca.trust_bundle_pem());
    let ca_pem = ca.trust_bundle_pem();
    let ca_der = der_of(&ca_pem);
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    with_cert(&issued.cert_chain_pem, |cert| {
        // The only SAN: the URI of the identity.
        let san = cert.subject_alternative_name().unwrap().unwrap();
        assert_eq!(san.value.general_names, [GeneralName::URI(ID)]);
        // Server and client authentication, nothing else.
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && eku.client_auth);
        assert!(!eku.any && !eku.code_signing && !eku.email_protection && eku.other.is_empty());
        // A leaf, for signatures.
        assert!(!cert.is_ca());
        let ku = cert.key_usage().unwrap().unwrap().value;
        assert!(ku.digital_signature() && !ku.key_cert_sign());
        // Validity: from a minute ago, for the lifetime.
        let nb = cert.validity().not_before.timestamp();
        let na = cert.validity().not_after.timestamp();
        assert_eq!(nb, unix_seconds(t - BACKDATE));
        assert_eq!(na, unix_seconds(t + lifetime));
        assert_eq!(na, unix_seconds(issued.not_after));
        assert!(nb < unix_seconds(t));
        // Signed by the CA, with the proxy's own key.
        assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
        cert.verify_signature(Some(ca_cert.public_key())).unwrap();
        assert_eq!(cert.public_key().raw, key.subject_public_key_info());
        let aki = cert
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(a) => a.key_identifier.clone(),
                _ => None,
            })
            .unwrap();
        let ski = ca_cert
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(k) => Some(k.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(aki.0, ski.0);
    });
}

#[test]
fn a_csr_without_names_gets_the_identity_and_lifetimes_go_down_to_seconds() {
    let ca = ca();
    let key = KeyPair::generate().unwrap();
    let t = now();
    let issued = ca
        .issue(&csr(&key, vec![]), ID, Duration::from_secs(3), t)
        .unwrap();
    with_cert(&issued.cert_chain_pem, |cert| {
        let san = cert.subject_alternative_name().unwrap().unwrap();
        assert_eq!(san.value.general_names, [GeneralName::URI(ID)]);
        assert_eq!(
            cert.validity().not_after.timestamp(),
            unix_seconds(t + Duration::from_secs(3))
        );
    });
    assert_eq!(
        ca.issue(&csr(&key, vec![]), ID, Duration::from_millis(500), t),
        Err(IssueError::Lifetime(Duration::from_millis(500)))
    );
}

#[test]
fn every_certificate_has_its_own_serial() {
    let ca = ca();
    let key = KeyPair::generate().unwrap();
    let request = csr(&key, vec![uri(ID)]);
    let serial = |pem_text: &str| with_cert(pem_text, |c| c.raw_serial().to_vec());
    let a = ca.issue(&request, ID, DEFAULT_LIFETIME, now()).unwrap();
    let b = ca.issue(&request, ID, DEFAULT_LIFETIME, now()).unwrap();
    assert_ne!(serial(&a.cert_chain_pem), serial(&b.cert_chain_pem));
}

#[test]
fn refuses_a_csr_asking_for_another_identity() {
    let ca = ca();
    let key = KeyPair::generate().unwrap();
    let other = "spiffe://shop.local/service/checkout";
    assert_eq!(
        ca.issue(&csr(&key, vec![uri(other)]), ID, DEFAULT_LIFETIME, now()),
        Err(IssueError::WrongIdentity {
            asked: other.into(),
            allowed: ID.into()
        })
    );
    // Its own identity and another one: still refused.
    assert!(matches!(
        ca.issue(
            &csr(&key, vec![uri(ID), uri(other)]),
            ID,
            DEFAULT_LIFETIME,
            now()
        ),
        Err(IssueError::WrongIdentity { .. })
    ));
    // Another trust domain.
    assert!(matches!(
        ca.issue(
            &csr(&key, vec![uri("spiffe://evil.local/service/pricing")]),
            ID,
            DEFAULT_LIFETIME,
            now()
        ),
        Err(IssueError::WrongIdentity { .. })
    ));
}

#[test]
fn refuses_dns_ip_and_email_names() {
    let ca = ca();
    let key = KeyPair::generate().unwrap();
    let cases = [
        (
            SanType::DnsName("pricing.internal".try_into().unwrap()),
            "DNS name",
            "pricing.internal",
        ),
        (
            SanType::IpAddress(std::net::Ipv4Addr::new(10, 0, 0, 7).into()),
            "IP address",
            "10.0.0.7",
        ),
        (
            SanType::Rfc822Name("ops@shop.local".try_into().unwrap()),
            "e-mail address",
            "ops@shop.local",
        ),
    ];
    for (san, kind, value) in cases {
        // Alone, and beside the right identity.
        for sans in [vec![san.clone()], vec![uri(ID), san.clone()]] {
            let err = ca
                .issue(&csr(&key, sans), ID, DEFAULT_LIFETIME, now())
                .unwrap_err();
            assert_eq!(
                err,
                IssueError::ForbiddenName {
                    kind,
                    value: value.into()
                }
            );
            assert!(err.to_string().contains(value), "{err}");
        }
    }
}

#[test]
fn refuses_a_csr_that_asks_to_be_a_ca() {
    let ca = ca();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let request = params.serialize_request(&key).unwrap().pem().unwrap();
    assert_eq!(
        ca.issue(&request, ID, DEFAULT_LIFETIME, now()),
        Err(IssueError::AsksForCa)
    );
}

#[test]
fn refuses_malformed_csrs() {
    let ca = ca();
    let key = KeyPair::generate().unwrap();
    let good = csr(&key, vec![uri(ID)]);
    let der = der_of(&good);
    let cases = [
        "".to_owned(),
        "not a CSR at all".to_owned(),
        "-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----\n".to_owned(),
        pem_encode("CERTIFICATE REQUEST", b"\x30\x03\x02\x01\x00"),
        pem_encode("CERTIFICATE REQUEST", &der[..der.len() / 2]),
        // A certificate, not a request.
        ca.trust_bundle_pem(),
    ];
    for text in cases {
        let err = ca.issue(&text, ID, DEFAULT_LIFETIME, now()).unwrap_err();
        assert!(matches!(err, IssueError::Malformed(_)), "{text:?}: {err:?}");
    }
    // Trailing bytes after the request.
    let mut longer = der.clone();
    longer.extend_from_slice(b"\x00\x00");
    assert!(matches!(
        ca.issue(
            &pem_encode("CERTIFICATE REQUEST", &longer),
            ID,
            DEFAULT_LIFETIME,
            now()
        ),
        Err(IssueError::Malformed(_))
    ));
}

#[test]
fn refuses_a_csr_whose_signature_does_not_verify() {
    let ca = ca();
    let key = KeyPair::generate().unwrap();
    let mut der = der_of(&csr(&key, vec![uri(ID)]));
    // The signature is the last field: change its last byte.
    let last = der.len() - 1;
    der[last] ^= 0x01;
    assert_eq!(
        ca.issue(
            &pem_encode("CERTIFICATE REQUEST", &der),
            ID,
            DEFAULT_LIFETIME,
            now()
        ),
        Err(IssueError::BadSignature)
    );
    // The request of one key, its public key swapped for another's: the signature no longer
    // matches the key it carries.
    let other = KeyPair::generate().unwrap();
    let mut der = der_of(&csr(&key, vec![uri(ID)]));
    let mine = key.public_key_raw().to_vec();
    let at = der
        .windows(mine.len())
        .position(|w| w == mine.as_slice())
        .unwrap();
    der[at..at + mine.len()].copy_from_slice(other.public_key_raw());
    assert_eq!(
        ca.issue(
            &pem_encode("CERTIFICATE REQUEST", &der),
            ID,
            DEFAULT_LIFETIME,
            now()
        ),
        Err(IssueError::BadSignature)
    );
}

#[test]
fn signs_other_key_types_proxies_may_use() {
    let ca = ca();
    for alg in [
        &rcgen::PKCS_ECDSA_P384_SHA384,
        &rcgen::PKCS_ED25519,
        &rcgen::PKCS_ECDSA_P256_SHA256,
    ] {
        let key = KeyPair::generate_for(alg).unwrap();
        let issued = ca
            .issue(&csr(&key, vec![uri(ID)]), ID, DEFAULT_LIFETIME, now())
            .unwrap();
        with_cert(&issued.cert_chain_pem, |cert| {
            assert_eq!(cert.public_key().raw, key.subject_public_key_info());
        });
    }
}

#[test]
fn a_stored_root_signs_like_the_generated_one() {
    let t = now();
    let (first, root) = Ca::generate("shop", t).unwrap();
    let again = Ca::from_pem(&root.cert_pem, &root.key_pem, "stored", t).unwrap();
    assert_eq!(first.trust_bundle_pem(), again.trust_bundle_pem());
    assert!(root.key_pem.contains("PRIVATE KEY"));
    let key = KeyPair::generate().unwrap();
    let issued = again
        .issue(&csr(&key, vec![uri(ID)]), ID, DEFAULT_LIFETIME, t)
        .unwrap();
    let ca_der = der_of(&root.cert_pem);
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    assert!(ca_cert.is_ca());
    with_cert(&issued.cert_chain_pem, |cert| {
        cert.verify_signature(Some(ca_cert.public_key())).unwrap();
    });
    // The root: P-256, valid ten years, path length 0.
    let ca_na = ca_cert.validity().not_after.timestamp();
    assert_eq!(ca_na, unix_seconds(t + ROOT_LIFETIME));
    assert_eq!(
        ca_cert
            .basic_constraints()
            .unwrap()
            .unwrap()
            .value
            .path_len_constraint,
        Some(0)
    );
}

/// An operator's CA, made the way `openssl` or another CA tool would: a self-signed CA.
fn operator_ca(not_after: SystemTime) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Operator Root");
    params.distinguished_name = dn;
    params.not_before = offset(now() - Duration::from_secs(3600));
    params.not_after = offset(not_after);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[test]
fn an_operators_ca_signs_and_cuts_lifetimes_to_its_own() {
    let t = now();
    let (cert, key) = operator_ca(t + Duration::from_secs(7200));
    let ca = Ca::from_pem(&cert, &key, "op.pem and op-key.pem", t).unwrap();
    assert!(same_certificate(&ca.trust_bundle_pem(), &cert));
    let leaf_key = KeyPair::generate().unwrap();
    let issued = ca
        .issue(&csr(&leaf_key, vec![uri(ID)]), ID, DEFAULT_LIFETIME, t)
        .unwrap();
    let ca_der = der_of(&cert);
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    with_cert(&issued.cert_chain_pem, |leaf| {
        leaf.verify_signature(Some(ca_cert.public_key())).unwrap();
        assert_eq!(leaf.issuer().as_raw(), ca_cert.subject().as_raw());
        // 24 h asked, but the CA ends in 2 h.
        assert_eq!(
            leaf.validity().not_after.timestamp(),
            ca_cert.validity().not_after.timestamp()
        );
    });
}

#[test]
fn refuses_an_unusable_operator_ca_naming_the_files() {
    let t = now();
    let what = "op.pem and op-key.pem";
    let (cert, key) = operator_ca(t + Duration::from_secs(7200));
    let (_, other_key) = operator_ca(t + Duration::from_secs(7200));
    // Not a CA: a leaf certificate.
    let ca = ca();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = ca
        .issue(&csr(&leaf_key, vec![]), ID, DEFAULT_LIFETIME, t)
        .unwrap();
    let cases: Vec<(String, String, &str)> = vec![
        ("garbage".into(), key.clone(), "not a PEM certificate"),
        (
            cert.clone(),
            "garbage".into(),
            "not a usable PEM private key",
        ),
        (cert.clone(), other_key, "does not belong"),
        (leaf.cert_chain_pem, leaf_key.serialize_pem(), "is not a CA"),
        (
            operator_ca(t - Duration::from_secs(60)).0,
            key.clone(),
            "not valid now",
        ),
    ];
    for (c, k, expected) in cases {
        let err = Ca::from_pem(&c, &k, what, t).unwrap_err().to_string();
        assert!(err.contains(what), "{err}");
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

#[test]
fn pem_encoding_round_trips() {
    for len in [0usize, 1, 2, 3, 47, 48, 49, 200] {
        let data: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
        let text = pem_encode("TEST", &data);
        let (_, parsed) = x509_parser::pem::parse_x509_pem(text.as_bytes()).unwrap();
        assert_eq!(parsed.label, "TEST");
        assert_eq!(parsed.contents, data);
    }
}
