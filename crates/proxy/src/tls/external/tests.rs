#![allow(clippy::unwrap_used)] // tests: a failure should fail loudly

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};

use super::*;

/// 2026-01-01T00:00:00Z, the day every certificate below starts.
const START: u64 = 1_767_225_600;

fn at(secs: u64) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(secs))
}

fn ip(s: &str) -> ServerName<'static> {
    ServerName::try_from(s.to_owned()).unwrap()
}

/// The seed's certificate, as `openssl req -x509 -days 1 -subj /CN=localhost -addext
/// subjectAltName=IP:127.0.0.1` makes it: self-signed, CA:TRUE, valid one day from START.
fn seed_like(sans: Vec<SanType>) -> (CertificateParams, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.subject_alt_names = sans;
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(2026, 1, 2);
    (params, key)
}

fn loopback() -> Vec<SanType> {
    vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))]
}

fn self_signed(sans: Vec<SanType>) -> CertificateDer<'static> {
    let (params, key) = seed_like(sans);
    params.self_signed(&key).unwrap().der().clone()
}

#[test]
fn only_one_self_signed_certificate_is_a_pin() {
    let seed = self_signed(loopback());
    assert_eq!(pin_of(std::slice::from_ref(&seed)), Some(seed.clone()));
    // Two certificates: a bundle of roots, never a pin.
    assert_eq!(pin_of(&[seed.clone(), self_signed(loopback())]), None);
    // One certificate signed by another: roots (an intermediate, or a leaf), never a pin.
    let (params, key) = seed_like(vec![]);
    let issuer = Issuer::new(params, key);
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name.push(DnType::CommonName, "fee");
    let leaf = leaf
        .signed_by(&KeyPair::generate().unwrap(), &issuer)
        .unwrap();
    assert_eq!(pin_of(&[leaf.der().clone()]), None);
    assert_eq!(pin_of(&[]), None);
}

#[test]
fn a_pinned_certificate_holds_only_within_its_dates() {
    let seed = self_signed(loopback());
    let name = ip("127.0.0.1");
    check_pinned(&seed, &name, at(START + 3600)).unwrap();
    let expired = check_pinned(&seed, &name, at(START + 2 * 86_400 + 1)).unwrap_err();
    assert!(
        matches!(
            expired,
            rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { .. })
        ),
        "{expired:?}"
    );
    let early = check_pinned(&seed, &name, at(START - 1)).unwrap_err();
    assert!(
        matches!(
            early,
            rustls::Error::InvalidCertificate(CertificateError::NotValidYetContext { .. })
        ),
        "{early:?}"
    );
}

#[test]
fn a_pinned_certificate_must_name_what_is_dialled() {
    let now = at(START + 60);
    let seed = self_signed(loopback());
    for other in ["127.0.0.2", "localhost"] {
        // `localhost` is only the CN: names are read from the SAN alone.
        let e = check_pinned(&seed, &ip(other), now).unwrap_err();
        assert!(
            matches!(
                e,
                rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{other}: {e:?}"
        );
    }
    let dns = self_signed(vec![SanType::DnsName("fee.example".try_into().unwrap())]);
    check_pinned(&dns, &ip("fee.example"), now).unwrap();
    assert!(check_pinned(&dns, &ip("127.0.0.1"), now).is_err());
    // No SAN at all names nothing.
    assert!(check_pinned(&self_signed(vec![]), &ip("127.0.0.1"), now).is_err());
}

#[test]
fn a_pinned_certificate_for_clients_only_is_refused() {
    let (mut params, key) = seed_like(loopback());
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_only = params.self_signed(&key).unwrap().der().clone();
    let e = check_pinned(&client_only, &ip("127.0.0.1"), at(START + 60)).unwrap_err();
    assert_eq!(
        e,
        rustls::Error::InvalidCertificate(CertificateError::InvalidPurpose)
    );
}

#[test]
fn another_certificate_with_the_same_subject_is_verified_as_roots_and_refused() {
    let provider = provider();
    let seed = self_signed(loopback());
    let verifier = External::new(vec![seed.clone()], &provider).unwrap();
    let name = ip("127.0.0.1");
    let now = at(START + 60);
    verifier
        .verify_server_cert(&seed, &[], &name, &[], now)
        .unwrap();
    // Same subject, same SAN, same dates, another key: not the pin, and the pin as a root
    // did not sign it.
    let twin = self_signed(loopback());
    assert_ne!(twin, seed);
    assert!(
        verifier
            .verify_server_cert(&twin, &[], &name, &[], now)
            .is_err()
    );
    // The pinned certificate sent again as if it were an intermediate changes nothing.
    assert!(
        verifier
            .verify_server_cert(&twin, std::slice::from_ref(&seed), &name, &[], now)
            .is_err()
    );
}

#[test]
fn a_self_signed_ca_still_verifies_what_it_issued() {
    // The mesh's own ca.pem is one self-signed certificate too: a certificate it signed is
    // verified as a chain (and the CA's own certificate is no server's, so no pin is met).
    let provider = provider();
    let (params, key) = seed_like(vec![]);
    let ca = params.self_signed(&key).unwrap().der().clone();
    let issuer = Issuer::new(params, key);
    let mut leaf = CertificateParams::default();
    leaf.subject_alt_names = loopback();
    leaf.not_before = rcgen::date_time_ymd(2026, 1, 1);
    leaf.not_after = rcgen::date_time_ymd(2026, 1, 2);
    let leaf = leaf
        .signed_by(&KeyPair::generate().unwrap(), &issuer)
        .unwrap()
        .der()
        .clone();
    let verifier = External::new(vec![ca], &provider).unwrap();
    let now = at(START + 60);
    verifier
        .verify_server_cert(&leaf, &[], &ip("127.0.0.1"), &[], now)
        .unwrap();
    assert!(
        verifier
            .verify_server_cert(&leaf, &[], &ip("127.0.0.2"), &[], now)
            .is_err()
    );
}
