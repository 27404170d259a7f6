use super::*;

use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
};

/// A CA, and a signer of server certificates for any SPIFFE id under it.
fn ca() -> (CertificateDer<'static>, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    (cert.der().clone(), Issuer::new(params, key))
}

fn leaf(issuer: &Issuer<'static, KeyPair>, id: &str) -> CertificateDer<'static> {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.subject_alt_names = vec![SanType::URI(id.to_owned().try_into().unwrap())];
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
    let verifier = control_verifier(
        Arc::new(store),
        trust_domain.map(str::to_owned),
        &provider(),
    );
    let name = ServerName::try_from("127.0.0.1").unwrap();
    verifier.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
}

#[test]
fn the_control_planes_verifier_accepts_only_control_from_its_roots() {
    let (root, issuer) = ca();
    let control = leaf(&issuer, "spiffe://shop.local/control");
    assert!(verify(std::slice::from_ref(&root), None, &control).is_ok());
    assert!(verify(std::slice::from_ref(&root), Some("shop.local"), &control).is_ok());

    // A proxy's certificate from the same CA is not the control plane.
    let proxy = leaf(&issuer, "spiffe://shop.local/service/b");
    let e = verify(std::slice::from_ref(&root), None, &proxy).unwrap_err();
    assert!(e.to_string().contains("not a control plane"), "{e}");

    // Another trust domain, once the mesh's is known.
    let other = leaf(&issuer, "spiffe://other.local/control");
    let e = verify(std::slice::from_ref(&root), Some("shop.local"), &other).unwrap_err();
    assert!(e.to_string().contains("not `shop.local`"), "{e}");

    // The right identity from a CA this proxy does not trust.
    let (other_root, other_issuer) = ca();
    let forged = leaf(&other_issuer, "spiffe://shop.local/control");
    assert!(verify(std::slice::from_ref(&root), None, &forged).is_err());
    // Either of two bundles (the flag's, the last snapshot's) is enough.
    assert!(verify(&[root, other_root], None, &forged).is_ok());
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
