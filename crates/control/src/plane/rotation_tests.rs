//! CA rotation on a synthetic clock: the three stages in order, each refusal (out of order,
//! proxies not ready, just restarted), `--force`, restarts in the middle, an operator's CA, and
//! a state file from the first layout. Every certificate is read back to see which root signed
//! it.

use std::path::Path;

use super::*;
use crate::ca::DEFAULT_LIFETIME;
use crate::store::etcd::{Effect, ProxyValue};
use rcgen::{CertificateParams, KeyPair};

const MESH: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  checkout: { calls: { pricing: { timeout: 1s } } }
  pricing: {}
";

fn options(config: Option<&str>) -> Options {
    Options {
        config: config.map(|text| ConfigFile {
            name: "mesh.yaml".into(),
            text: text.into(),
        }),
        ca_files: None,
        cert_lifetime: DEFAULT_LIFETIME,
    }
}

fn start_at(dir: &Path, opts: Options, now: SystemTime) -> Started {
    Plane::start(Store::open(dir).unwrap(), opts, now).unwrap()
}

fn csr() -> String {
    let key = KeyPair::generate().unwrap();
    CertificateParams::default()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap()
}

fn der(pem: &str) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .unwrap()
        .1
        .contents
}

/// The common name of the issuer of the certificate in `pem`.
fn issuer_cn(pem: &str) -> String {
    let der = der(pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    cert.issuer()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

/// Whether `root_pem`'s key signed the certificate in `leaf_pem`.
fn signed_by(leaf_pem: &str, root_pem: &str) -> bool {
    let (leaf_der, root_der) = (der(leaf_pem), der(root_pem));
    let (_, leaf) = x509_parser::parse_x509_certificate(&leaf_der).unwrap();
    let (_, root) = x509_parser::parse_x509_certificate(&root_der).unwrap();
    leaf.verify_signature(Some(root.public_key())).is_ok()
}

/// The bundle as PEM blocks.
fn blocks(bundle: &str) -> Vec<String> {
    bundle
        .split_inclusive("-----END CERTIFICATE-----\n")
        .map(str::to_owned)
        .collect()
}

/// A plane with one proxy of pricing (`pricing-1`) that holds a certificate and has its
/// stream open, `grace` after the start.
struct Fixture {
    _dir: tempfile::TempDir,
    plane: Plane,
    token: String,
    now: SystemTime,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let t0 = SystemTime::now();
    let mut plane = start_at(dir.path(), options(Some(MESH)), t0).plane;
    let token = plane.token("pricing").unwrap().to_owned();
    let now = t0 + RECONNECT_GRACE;
    plane.issue(&token, &csr(), "pricing-1", now).unwrap();
    plane.stream_opened("pricing", "pricing-1");
    Fixture {
        _dir: dir,
        plane,
        token,
        now,
    }
}

/// What a proxy sends after it applied a snapshot: its certificate's generation and whether
/// the bundle is in force.
fn confirm(f: &mut Fixture, cert_generation: u64) {
    let version = f.plane.version();
    f.plane
        .ack_request(
            &Ack {
                service: "pricing".into(),
                version,
                accepted: true,
                token: f.token.clone(),
                proxy: "pricing-1".into(),
                cert_ca_generation: cert_generation,
                trust_bundle_applied: true,
                ..Default::default()
            },
            f.now,
        )
        .unwrap();
}

#[test]
fn add_reissue_retire_in_order_each_refused_until_it_is_safe() {
    let mut f = fixture();
    let old_root = f.plane.ca().signer_pem().to_owned();
    assert_eq!(f.plane.ca_generation(), 1);
    assert_eq!(f.plane.ca().root_names(), ["hopwise CA (shop)"]);

    // Out of order: nothing to reissue or retire yet.
    for stage in [RotateStage::Reissue, RotateStage::Retire] {
        let r = f.plane.rotate_ca(stage, false, f.now).unwrap();
        assert!(!r.done && !r.retry, "{r:?}");
        assert!(r.message.contains("no rotation in progress"), "{r:?}");
    }

    // --- add: the bundle becomes [old, new]; the old root still signs --------------------------
    let before = f.plane.version();
    let r = f.plane.rotate_ca(RotateStage::Add, false, f.now).unwrap();
    assert!(r.done && !r.unchanged, "{r:?}");
    assert_eq!(r.rotation, "added");
    assert_eq!(
        r.trust_bundle,
        ["hopwise CA (shop)", "hopwise CA (shop) #2"]
    );
    assert!(f.plane.version() > before, "snapshots are pushed");
    let bundle = f.plane.ca().trust_bundle_pem();
    let roots = blocks(&bundle);
    assert_eq!(roots.len(), 2);
    assert_eq!(roots[0], old_root, "the old root first");
    let new_root = roots[1].clone();
    let s = f.plane.snapshot("pricing", Instant::now()).unwrap();
    assert_eq!(s.fixed.trust_bundle_pem, bundle.clone());
    assert_eq!(s.fixed.ca_generation, 1, "nobody renews yet");
    let dir = f.plane.store().dir().to_owned();
    assert_eq!(std::fs::read_to_string(dir.join("ca.pem")).unwrap(), bundle);
    let issued = f.plane.issue(&f.token, &csr(), "", f.now).unwrap();
    assert!(signed_by(&issued.cert_chain_pem, &old_root));
    assert_eq!(issued.trust_bundle_pem, bundle);
    // Asking again changes nothing; retiring now is out of order.
    let again = f.plane.rotate_ca(RotateStage::Add, false, f.now).unwrap();
    assert!(again.done && again.unchanged, "{again:?}");
    assert_eq!(f.plane.ca().trust_bundle_pem(), bundle);
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(!r.done && r.message.contains("reissue before"), "{r:?}");

    // --- reissue: refused until the proxy has confirmed the new bundle -------------------------
    let r = f
        .plane
        .rotate_ca(RotateStage::Reissue, false, f.now)
        .unwrap();
    assert!(!r.done && r.retry, "{r:?}");
    assert_eq!(r.pending.len(), 1, "{r:?}");
    assert_eq!(
        (r.pending[0].service.as_str(), r.pending[0].proxy.as_str()),
        ("pricing", "pricing-1")
    );
    assert!(r.pending[0].connected);
    assert!(r.pending[0].reason.contains("trust bundle"), "{r:?}");
    assert_eq!(f.plane.ca_generation(), 1, "nothing changed");
    // An acknowledgement without the bundle in force does not count.
    let version = f.plane.version();
    f.plane
        .ack(&f.token, "pricing", "pricing-1", version, true, "", f.now)
        .unwrap();
    assert!(
        !f.plane
            .rotate_ca(RotateStage::Reissue, false, f.now)
            .unwrap()
            .done
    );
    confirm(&mut f, 1);
    let before = f.plane.version();
    let r = f
        .plane
        .rotate_ca(RotateStage::Reissue, false, f.now)
        .unwrap();
    assert!(r.done && !r.unchanged && r.pending.is_empty(), "{r:?}");
    assert_eq!((r.rotation.as_str(), r.ca_generation), ("reissued", 2));
    assert!(f.plane.version() > before);
    assert_eq!(
        f.plane.ca().trust_bundle_pem(),
        bundle,
        "the same bundle, in the same order"
    );
    let s = f.plane.snapshot("pricing", Instant::now()).unwrap();
    assert_eq!(s.fixed.ca_generation, 2, "every proxy renews at once");
    // New certificates come from the new root, and say so in their issuer.
    let issued = f.plane.issue(&f.token, &csr(), "", f.now).unwrap();
    assert!(signed_by(&issued.cert_chain_pem, &new_root));
    assert!(!signed_by(&issued.cert_chain_pem, &old_root));
    assert_eq!(issuer_cn(&issued.cert_chain_pem), "hopwise CA (shop) #2");
    let again = f
        .plane
        .rotate_ca(RotateStage::Reissue, false, f.now)
        .unwrap();
    assert!(again.done && again.unchanged);

    // --- retire: refused while a proxy's certificate is from the old root ----------------------
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(!r.done && r.retry, "{r:?}");
    assert_eq!(r.pending.len(), 1, "{r:?}");
    assert_eq!(r.pending[0].proxy, "pricing-1");
    assert!(
        r.pending[0].reason.contains("old root (CA generation 1"),
        "{r:?}"
    );
    assert_eq!(f.plane.ca().trust_bundle_pem(), bundle, "nothing changed");
    // pricing-1 renews (as it does when it sees generation 2 in its snapshot); until it says
    // the new certificate is in use, retiring still waits.
    f.plane.issue(&f.token, &csr(), "pricing-1", f.now).unwrap();
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(!r.done, "{r:?}");
    assert!(r.pending[0].reason.contains("not confirmed"), "{r:?}");
    confirm(&mut f, 2);
    let before = f.plane.version();
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(r.done && !r.unchanged, "{r:?}");
    assert_eq!(r.rotation, "");
    assert_eq!(r.trust_bundle, ["hopwise CA (shop) #2"]);
    assert!(f.plane.version() > before);
    assert_eq!(f.plane.ca().trust_bundle_pem(), new_root);
    assert_eq!(
        std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
        new_root
    );
    let s = f.plane.snapshot("pricing", Instant::now()).unwrap();
    assert_eq!(s.fixed.trust_bundle_pem, new_root.clone());
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(!r.done && r.message.contains("nothing to retire"), "{r:?}");
    let status = f.plane.status(Instant::now());
    assert_eq!((status.ca_generation, status.ca_rotation.as_str()), (2, ""));
    assert!(
        status
            .proxies
            .iter()
            .any(|p| p.proxy == "pricing-1" && p.cert_ca_generation == Some(2))
    );

    // A restart keeps the new root alone, and a second rotation numbers its root #3.
    drop(f.plane);
    let mut plane = start_at(&dir, options(None), f.now).plane;
    assert_eq!(plane.ca().trust_bundle_pem(), new_root);
    assert_eq!(plane.ca_generation(), 2);
    let issued = plane.issue(&f.token, &csr(), "", f.now).unwrap();
    assert!(signed_by(&issued.cert_chain_pem, &new_root));
    let r = plane.rotate_ca(RotateStage::Add, false, f.now).unwrap();
    assert_eq!(
        r.trust_bundle,
        ["hopwise CA (shop) #2", "hopwise CA (shop) #3"]
    );
}

#[test]
fn force_goes_ahead_and_names_who_was_not_ready() {
    let mut f = fixture();
    f.plane.rotate_ca(RotateStage::Add, false, f.now).unwrap();
    let r = f
        .plane
        .rotate_ca(RotateStage::Reissue, true, f.now)
        .unwrap();
    assert!(r.done, "{r:?}");
    assert_eq!(r.pending.len(), 1);
    assert!(r.message.contains("forced"), "{r:?}");
    assert_eq!(f.plane.ca_generation(), 2);
    let r = f.plane.rotate_ca(RotateStage::Retire, true, f.now).unwrap();
    assert!(r.done && r.pending[0].reason.contains("old root"), "{r:?}");
    assert_eq!(r.trust_bundle, ["hopwise CA (shop) #2"]);
}

#[test]
fn a_proxy_that_is_gone_does_not_hold_a_rotation_back() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = SystemTime::now();
    let mut opts = options(Some(MESH));
    opts.cert_lifetime = Duration::from_secs(60);
    let mut plane = start_at(dir.path(), opts, t0).plane;
    let token = plane.token("pricing").unwrap().to_owned();
    plane.issue(&token, &csr(), "gone", t0).unwrap();
    plane.stream_opened("pricing", "gone");
    plane.issue(&token, &csr(), "still-valid", t0).unwrap();
    let now = t0 + RECONNECT_GRACE;
    plane.rotate_ca(RotateStage::Add, false, now).unwrap();
    // Stream closed but certificate still valid: it may be serving, so it counts.
    plane.stream_closed("pricing", "gone");
    let r = plane.rotate_ca(RotateStage::Reissue, false, now).unwrap();
    let mut names: Vec<&str> = r.pending.iter().map(|p| p.proxy.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["gone", "still-valid"], "{r:?}");
    assert!(r.pending.iter().all(|p| !p.connected));
    assert!(r.pending[0].reason.contains("stream is closed"), "{r:?}");
    // Once their certificates have expired (and no stream is open) they are gone.
    let later = t0 + Duration::from_secs(120);
    let r = plane.rotate_ca(RotateStage::Reissue, false, later).unwrap();
    assert!(r.done && r.pending.is_empty(), "{r:?}");
    let r = plane.rotate_ca(RotateStage::Retire, false, later).unwrap();
    assert!(r.done, "{r:?}");
}

#[test]
fn a_restart_in_the_middle_keeps_both_roots_and_waits_for_proxies_to_reconnect() {
    let mut f = fixture();
    f.plane.rotate_ca(RotateStage::Add, false, f.now).unwrap();
    let bundle = f.plane.ca().trust_bundle_pem();
    let dir = f.plane.store().dir().to_owned();
    drop(f.plane);
    let t1 = f.now + Duration::from_secs(60);
    let s = start_at(&dir, options(None), t1);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("rotation is in progress") && n.contains("--stage reissue")),
        "{:?}",
        s.notes
    );
    let mut plane = s.plane;
    assert_eq!(plane.ca().trust_bundle_pem(), bundle);
    assert_eq!(
        plane
            .snapshot("pricing", Instant::now())
            .unwrap()
            .fixed
            .ca_generation,
        1
    );
    // It knows no proxy yet: it waits for them to come back before it trusts that.
    let r = plane.rotate_ca(RotateStage::Reissue, false, t1).unwrap();
    assert!(
        !r.done && r.retry && r.message.contains("reconnecting"),
        "{r:?}"
    );
    // pricing-1 comes back, subscribes; it must confirm the bundle again.
    plane.stream_opened("pricing", "pricing-1");
    let t2 = t1 + RECONNECT_GRACE;
    let r = plane.rotate_ca(RotateStage::Reissue, false, t2).unwrap();
    assert_eq!(r.pending.len(), 1, "{r:?}");
    let mut f = Fixture {
        _dir: f._dir,
        plane,
        token: f.token,
        now: t2,
    };
    confirm(&mut f, 1);
    assert!(
        f.plane
            .rotate_ca(RotateStage::Reissue, false, t2)
            .unwrap()
            .done
    );

    // Restarted after reissue: the new root signs, both are trusted.
    drop(f.plane);
    let t3 = t2 + Duration::from_secs(60);
    let mut plane = start_at(&dir, options(None), t3).plane;
    assert_eq!(plane.ca_generation(), 2);
    assert_eq!(plane.ca().trust_bundle_pem(), bundle);
    let issued = plane.issue(&f.token, &csr(), "", t3).unwrap();
    assert_eq!(issuer_cn(&issued.cert_chain_pem), "hopwise CA (shop) #2");
    // A proxy that renewed before the restart says so in its acknowledgement.
    plane.stream_opened("pricing", "pricing-1");
    let mut f = Fixture {
        _dir: f._dir,
        plane,
        token: f.token,
        now: t3 + RECONNECT_GRACE,
    };
    confirm(&mut f, 1);
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(!r.done && r.pending[0].reason.contains("old root"), "{r:?}");
    confirm(&mut f, 2);
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(r.done, "{r:?}");
}

#[test]
fn a_proxy_known_only_by_its_stream_holds_retire_back() {
    let mut f = fixture();
    f.plane.rotate_ca(RotateStage::Add, false, f.now).unwrap();
    confirm(&mut f, 1);
    f.plane
        .rotate_ca(RotateStage::Reissue, false, f.now)
        .unwrap();
    // A proxy whose certificate the plane has never heard of (an older proxy that does not say).
    f.plane.stream_opened("checkout", "checkout-1");
    f.plane.issue(&f.token, &csr(), "pricing-1", f.now).unwrap();
    confirm(&mut f, 2);
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert_eq!(r.pending.len(), 1, "{r:?}");
    assert_eq!(r.pending[0].proxy, "checkout-1");
    assert!(r.pending[0].reason.contains("unknown"), "{r:?}");
}

#[test]
fn an_operators_ca_can_be_rotated_to_a_generated_root() {
    use rcgen::{BasicConstraints, IsCa};
    let dir = tempfile::tempdir().unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let files = CaFiles {
        cert: dir.path().join("op.pem"),
        key: dir.path().join("op-key.pem"),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    let state = dir.path().join("state");
    let mut opts = options(Some(MESH));
    opts.ca_files = Some(files.clone());
    let t0 = SystemTime::now();
    let mut plane = start_at(&state, opts.clone(), t0).plane;
    let now = t0 + RECONNECT_GRACE;
    for stage in [RotateStage::Add, RotateStage::Reissue, RotateStage::Retire] {
        let r = plane.rotate_ca(stage, false, now).unwrap();
        assert!(r.done, "{r:?}");
    }
    assert_eq!(plane.ca().root_names(), ["hopwise CA (shop) #2"]);
    drop(plane);
    // The state holds the generated root now; the operator's files are no longer read, and
    // passing them again is refused rather than silently switching back.
    let plane = start_at(&state, options(None), now).plane;
    assert_eq!(plane.ca().root_names(), ["hopwise CA (shop) #2"]);
    drop(plane);
    let err = Plane::start(Store::open(&state).unwrap(), opts, now).unwrap_err();
    assert!(matches!(err, StartError::CaConflict(_)), "{err:?}");
}

#[test]
fn a_state_file_of_the_first_layout_starts_and_is_written_in_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = {
        let plane = start_at(dir.path(), options(Some(MESH)), SystemTime::now()).plane;
        plane.ca().trust_bundle_pem()
    };
    // Turn it into what the first layout wrote: format 1, no CA generation, no rotation.
    let path = dir.path().join("state.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json["format"] = 1.into();
    json.as_object_mut().unwrap().remove("ca_generation");
    std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();

    let plane = start_at(dir.path(), options(None), SystemTime::now()).plane;
    assert_eq!(plane.ca().trust_bundle_pem(), bundle);
    assert_eq!(plane.ca_generation(), 1);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"format\": 2"), "{text}");
}

#[test]
fn an_unknown_stage_is_named() {
    assert_eq!(RotateStage::parse("reissue"), Ok(RotateStage::Reissue));
    assert_eq!(
        RotateStage::parse("rollback"),
        Err(ApiError::BadStage("rollback".into()))
    );
}

#[test]
fn every_stage_of_a_rotation_wakes_every_stream() {
    let mut f = fixture();
    let t0 = Instant::now();
    let token = f.plane.token("pricing").unwrap().to_owned();
    let (lease, _, _) = f.plane.register(&token, "127.0.0.1:7001", 0, t0).unwrap();
    f.plane.set_health(&token, lease.0, true, t0).unwrap();
    let only_checkout = Wake::Services(["checkout".to_owned()].into());
    assert_eq!(f.plane.take_wake(), only_checkout);
    // A refused stage changes nothing and wakes nobody.
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(!r.done, "{r:?}");
    assert_eq!(f.plane.take_wake(), Wake::Services(Default::default()));
    // The bundle (add, retire) or the CA generation (reissue) changes in every snapshot.
    for stage in [RotateStage::Add, RotateStage::Reissue, RotateStage::Retire] {
        let before = f.plane.snapshot("pricing", t0).unwrap();
        let r = f.plane.rotate_ca(stage, true, f.now).unwrap();
        assert!(r.done && !r.unchanged, "{r:?}");
        assert_eq!(f.plane.take_wake(), Wake::Everyone, "{}", stage.name());
        let after = f.plane.snapshot("pricing", t0).unwrap();
        assert!(
            before.fixed.trust_bundle_pem != after.fixed.trust_bundle_pem
                || before.fixed.ca_generation != after.fixed.ca_generation,
            "{}",
            stage.name()
        );
    }
}

/// What another replica (the one holding etcd lease 7, listening on 127.0.0.1:7901) wrote of
/// its proxy `checkout-1`, as the watch brings it.
fn other_replica_says(f: &mut Fixture, facts: ProxyValue) {
    f.plane.learn_proxy(&Effect::ProxyPut {
        service: "checkout".into(),
        proxy: "checkout-1".into(),
        lease: 7,
        value: ProxyValue {
            replica: "127.0.0.1:7901".into(),
            ..facts
        },
    });
}

#[test]
fn a_proxy_connected_to_another_replica_is_shown_and_waited_for() {
    let mut f = fixture();
    f.plane.set_replica("127.0.0.1:7900");
    other_replica_says(
        &mut f,
        ProxyValue {
            connected: true,
            cert_in_force: Some(1),
            ..ProxyValue::default()
        },
    );
    let status = f.plane.status(Instant::now());
    let rows: Vec<(&str, bool, &str)> = status
        .proxies
        .iter()
        .map(|p| (p.proxy.as_str(), p.connected, p.replica.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("checkout-1", true, "127.0.0.1:7901"),
            ("pricing-1", true, "127.0.0.1:7900")
        ]
    );
    f.plane.rotate_ca(RotateStage::Add, false, f.now).unwrap();
    confirm(&mut f, 1);
    // The local proxy confirmed the new bundle; the other replica's has not said so yet.
    let r = f
        .plane
        .rotate_ca(RotateStage::Reissue, false, f.now)
        .unwrap();
    assert!(!r.done && r.retry, "{r:?}");
    let pending: Vec<(&str, &str)> = r
        .pending
        .iter()
        .map(|p| (p.proxy.as_str(), p.replica.as_str()))
        .collect();
    assert_eq!(pending, [("checkout-1", "127.0.0.1:7901")]);
    // Its record now says it did (at the version this replica is at, as snapshots are sent).
    let version = f.plane.version();
    other_replica_says(
        &mut f,
        ProxyValue {
            connected: true,
            cert_in_force: Some(1),
            bundle_confirmed: version,
            ..ProxyValue::default()
        },
    );
    let r = f
        .plane
        .rotate_ca(RotateStage::Reissue, false, f.now)
        .unwrap();
    assert!(r.done, "{r:?}");
    // Retire waits for its certificate from the new root; then the other replica dies with
    // it in the middle: its record goes with the replica's lease, and it holds nothing back.
    confirm(&mut f, 2);
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(!r.done && r.pending.len() == 1, "{r:?}");
    assert!(r.pending[0].reason.contains("old root"), "{r:?}");
    f.plane.learn_proxy(&Effect::ProxyGone {
        service: "checkout".into(),
        proxy: "checkout-1".into(),
        lease: 7,
    });
    let r = f
        .plane
        .rotate_ca(RotateStage::Retire, false, f.now)
        .unwrap();
    assert!(r.done, "{r:?}");
    assert_eq!(f.plane.status(Instant::now()).proxies.len(), 1);
}

#[test]
fn this_replicas_own_records_echoed_by_the_watch_are_not_another_replicas() {
    let mut f = fixture();
    // Embedded store: nothing to share.
    assert!(f.plane.take_proxy_writes().is_none());
    f.plane.set_replica_lease(Some(7));
    other_replica_says(
        &mut f,
        ProxyValue {
            connected: true,
            ..ProxyValue::default()
        },
    );
    let status = f.plane.status(Instant::now());
    assert_eq!(status.proxies.len(), 1, "{status:?}");
    assert_eq!(status.proxies[0].proxy, "pricing-1");
}
