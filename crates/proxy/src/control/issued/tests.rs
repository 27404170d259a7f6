use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::*;

/// A CA's certificate, and a leaf it signed for `key`.
fn issued_for(key: &KeyPair) -> (String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let leaf = CertificateParams::new(vec!["pricing".into()]).unwrap();
    let leaf = leaf.signed_by(key, &Issuer::new(ca, ca_key)).unwrap();
    (leaf.pem(), ca_pem)
}

fn response(chain: &str, bundle: &str, not_after_unix: i64) -> pb::IssueResponse {
    pb::IssueResponse {
        cert_chain_pem: chain.into(),
        trust_bundle_pem: bundle.into(),
        not_after_unix,
        identity: "spiffe://shop.local/service/pricing".into(),
        ca_generation: 3,
    }
}

#[test]
fn an_answer_for_this_key_is_taken_with_its_bundle_when_asked() {
    let key = KeyPair::generate().unwrap();
    let (leaf, ca) = issued_for(&key);
    let taken = read(
        response(&leaf, &ca, 1_800_000_000),
        &key.serialize_pem(),
        true,
    )
    .unwrap();
    assert_eq!(taken.cert_chain_pem, leaf);
    assert_eq!(taken.trust_bundle_pem.as_deref(), Some(ca.as_str()));
    assert_eq!(
        taken.not_after,
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    );
    assert_eq!(taken.generation, 3);
    // The cache has a bundle: the answer's is not read, nor written.
    let taken = read(response(&leaf, "", 0), &key.serialize_pem(), false).unwrap();
    assert_eq!(taken.trust_bundle_pem, None);
}

#[test]
fn an_answer_the_store_could_not_load_is_refused_before_anything_is_written() {
    let key = KeyPair::generate().unwrap();
    let (leaf, ca) = issued_for(&key);
    let (other_leaf, _) = issued_for(&KeyPair::generate().unwrap());
    let pem = key.serialize_pem();
    let chain = |r| matches!(r, Err(IssuedError::Chain(_)));
    assert!(
        chain(read(response("", &ca, 0), &pem, true)),
        "no certificate"
    );
    assert!(chain(read(response("garbage", &ca, 0), &pem, true)));
    let cut = &leaf[..leaf.len() / 2];
    assert!(chain(read(response(cut, &ca, 0), &pem, true)), "cut short");
    assert!(
        chain(read(response(&other_leaf, &ca, 0), &pem, true)),
        "another key's"
    );
    let bundle = |r| matches!(r, Err(IssuedError::Bundle(_)));
    assert!(bundle(read(response(&leaf, "", 0), &pem, true)), "no root");
    let not_der = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(bundle(read(response(&leaf, not_der, 0), &pem, true)));
}

#[test]
fn any_end_is_a_time_and_the_renewal_falls_within_the_life_left() {
    assert_eq!(not_after(-1), UNIX_EPOCH);
    assert_eq!(not_after(i64::MIN), UNIX_EPOCH);
    assert!(not_after(i64::MAX) >= UNIX_EPOCH + Duration::from_secs(1 << 40));
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let end = now + Duration::from_secs(1000);
    let near = |t: SystemTime, secs: u64| {
        let want = now + Duration::from_secs(secs);
        let off = t
            .duration_since(want)
            .or_else(|e| Ok::<_, ()>(e.duration()));
        assert!(
            off.unwrap() < Duration::from_millis(1),
            "{t:?} is not {want:?}"
        );
    };
    near(renewal_at(now, end, 0.0), 650);
    near(renewal_at(now, end, 0.5), 700);
    let late = renewal_at(now, end, 0.999_999);
    assert!(late > now + Duration::from_secs(749) && late <= now + Duration::from_secs(750));
    // Ended already, or at the end of time; a draw out of range is read as 0.
    assert_eq!(renewal_at(now, UNIX_EPOCH, 0.5), now);
    assert_eq!(renewal_at(now, now, 0.5), now);
    let far = not_after(i64::MAX);
    assert!(renewal_at(now, far, 0.99) <= far);
    near(renewal_at(now, end, f64::NAN), 650);
}
