//! Which public keys the CA signs: ECDSA P-256/P-384, Ed25519 and RSA ≥ 2048 bits; every other
//! key is refused naming its type. RSA, P-521 and Ed448 CSRs are fixtures made once with
//! OpenSSL (`fixtures/README.md`): ring makes no such keys.

use super::*;
use rcgen::{CertificateParams, KeyPair};

const ID: &str = "spiffe://shop.local/service/pricing";

fn issue(csr_pem: &str) -> Result<Issued, IssueError> {
    let now = SystemTime::now();
    let ca = Ca::generate("shop", now).unwrap().0;
    ca.issue(csr_pem, ID, DEFAULT_LIFETIME, now)
}

fn refusal(csr_pem: &str) -> String {
    match issue(csr_pem) {
        Err(e @ IssueError::UnsupportedKey(_)) => e.to_string(),
        other => panic!("expected unsupported-key, got {other:?}"),
    }
}

#[test]
fn signs_p256_p384_ed25519_and_rsa_2048() {
    for alg in [
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &rcgen::PKCS_ECDSA_P384_SHA384,
        &rcgen::PKCS_ED25519,
    ] {
        let key = KeyPair::generate_for(alg).unwrap();
        let csr = CertificateParams::default()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        issue(&csr).unwrap();
    }
    issue(include_str!("fixtures/rsa2048.csr")).unwrap();
}

#[test]
fn refuses_weak_or_unknown_keys_naming_them() {
    let rsa = refusal(include_str!("fixtures/rsa1024-sha1.csr"));
    assert!(rsa.contains("RSA-1024"), "{rsa}");
    assert!(rsa.contains("at least 2048 bits"), "{rsa}");
    let p521 = refusal(include_str!("fixtures/p521.csr"));
    assert!(p521.contains("ECDSA on the curve 1.3.132.0.35"), "{p521}");
    let ed448 = refusal(include_str!("fixtures/ed448.csr"));
    assert!(ed448.contains("Ed448"), "{ed448}");
}

#[test]
fn counts_the_bits_of_a_modulus() {
    assert_eq!(modulus_bits(&[]), 0);
    assert_eq!(modulus_bits(&[0, 0]), 0);
    assert_eq!(modulus_bits(&[0, 0x80, 0]), 16);
    assert_eq!(modulus_bits(&[0x7f, 0xff]), 15);
    assert_eq!(modulus_bits(&[0, 0, 1]), 1);
}
