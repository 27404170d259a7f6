//! The plane on a synthetic clock and a temporary state directory: starts and restarts, tokens,
//! issuance refusals that depend on the token, leases through the API's rules, snapshots,
//! applying mesh files, acknowledgements and status.

use std::path::Path;

use super::mode::put_copy;
use super::*;
use crate::ca::DEFAULT_LIFETIME;
use crate::ca::{self, IssueError};
use crate::registry::LeaseId;
use crate::store::etcd::Effect;
use rcgen::{CertificateParams, KeyPair, SanType};

const SHOP: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  frontend:
    entry: { timeout: 3s }
    calls: { checkout: { timeout: 2s } }
  checkout:
    calls:
      pricing: { timeout: 500ms, routes: { quote: { path: /quote/ }, stock: { path: /stock/ } } }
      fee: { timeout: 500ms }
  pricing: {}
  fee:
    external: { address: 127.0.0.1:9 }
";

/// The seed's retry chain with Istio's defaults: `hopwise check` finds retry-fanout errors.
const STORM: &str = "mesh: { name: shop, trust_domain: shop.local }
defaults: { preset: istio }
services:
  frontend:
    entry: { timeout: none }
    calls: { checkout: {} }
  checkout: { protocol: grpc, calls: { pricing: {} } }
  pricing: { protocol: grpc, calls: { inventory: {} } }
  inventory: { protocol: grpc }
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

fn start_in(dir: &Path, opts: Options) -> Result<Started, StartError> {
    Plane::start(Store::open(dir)?, opts, SystemTime::now())
}

fn started(dir: &Path) -> Plane {
    start_in(dir, options(Some(SHOP))).unwrap().plane
}

fn csr(sans: Vec<SanType>) -> String {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans;
    params.serialize_request(&key).unwrap().pem().unwrap()
}

/// SHOP with a new service, `stock`, that pricing calls.
fn grown() -> String {
    SHOP.replace(
        "  pricing: {}\n",
        "  pricing: { calls: { stock: { timeout: 200ms } } }\n  stock: {}\n",
    )
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[test]
fn the_first_start_makes_a_ca_a_token_per_proxied_service_and_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_in(dir.path(), options(Some(SHOP))).unwrap();
    assert!(s.notes.iter().any(|n| n.contains("generated a new CA")));
    let plane = s.plane;
    assert_eq!(plane.config_version(), 1);
    assert_eq!(plane.version(), 1 << 32, "first start, no change yet");
    // A token for every service that runs a proxy; none for the external one.
    let tokens: Vec<&String> = plane.store().state().tokens.keys().collect();
    assert_eq!(tokens, ["checkout", "frontend", "pricing"]);
    for service in ["checkout", "frontend", "pricing"] {
        let file = dir.path().join("tokens").join(service);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap().trim(),
            plane.token(service).unwrap()
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ca.pem")).unwrap(),
        plane.ca().trust_bundle_pem()
    );
    assert_eq!(s.token_files.len(), 3);
}

#[test]
fn a_restart_loses_no_ca_token_or_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle, tokens, first_version) = {
        let mut plane = started(dir.path());
        let applied = plane
            .commit(
                prepare(&SHOP.replace("timeout: 2s", "timeout: 2.5s"), "v2.yaml"),
                SystemTime::now(),
            )
            .unwrap();
        assert!(applied.applied, "{applied:?}");
        (
            plane.ca().trust_bundle_pem(),
            plane.store().state().tokens.clone(),
            plane.version(),
        )
    };
    // Deleted token files come back.
    std::fs::remove_dir_all(dir.path().join("tokens")).unwrap();
    let s = start_in(dir.path(), options(None)).unwrap();
    assert!(s.notes.is_empty(), "{:?}", s.notes);
    let mut plane = s.plane;
    assert_eq!(plane.ca().trust_bundle_pem(), bundle);
    assert_eq!(plane.store().state().tokens, tokens);
    assert_eq!(plane.config_version(), 2);
    assert!(plane.mesh_text().contains("timeout: 2.5s"));
    assert!(dir.path().join("tokens/pricing").exists());
    // Versions and lease ids keep growing across the restart.
    assert!(plane.version() > first_version);
    assert_eq!(plane.version(), 2 << 32);
    let token = plane.token("pricing").unwrap().to_owned();
    let (lease, _, _) = plane
        .register(&token, &addr(7001), 0, Instant::now())
        .unwrap();
    assert_eq!(lease.0, (2 << 32) + 1);
    // The CA still signs for the same identities.
    let issued = plane
        .issue(&token, &csr(vec![]), "p", SystemTime::now())
        .unwrap();
    assert_eq!(issued.identity, "spiffe://shop.local/service/pricing");
}

#[test]
fn a_different_config_on_restart_is_not_applied_behind_the_operators_back() {
    let dir = tempfile::tempdir().unwrap();
    drop(started(dir.path()));
    let edited = SHOP.replace("timeout: 2s", "timeout: 1.5s");
    let s = start_in(dir.path(), options(Some(&edited))).unwrap();
    assert_eq!(s.plane.mesh_text(), SHOP);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("NOT applied") && n.contains("hopwise control apply")),
        "{:?}",
        s.notes
    );
}

#[test]
fn the_first_start_needs_a_sound_mesh_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = start_in(dir.path(), options(None)).unwrap_err();
    assert!(matches!(err, StartError::NoConfig { .. }), "{err}");
    let err = start_in(
        dir.path(),
        options(Some("services: { a: { calls: { b: {} } } }\n")),
    )
    .unwrap_err();
    match err {
        StartError::InvalidConfig { rendered, .. } => {
            assert!(rendered.starts_with("mesh.yaml:1:"), "{rendered}");
            assert!(rendered.contains("which is not a service"), "{rendered}");
        }
        other => panic!("{other}"),
    }
    match start_in(dir.path(), options(Some(STORM))).unwrap_err() {
        StartError::Refused { findings, .. } => {
            assert!(findings.iter().any(|f| f.code == "retry-fanout"));
        }
        other => panic!("{other}"),
    }
    // Nothing was written by the refused starts.
    assert!(!dir.path().join("state.json").exists());
}

#[test]
fn issuance_refuses_unknown_tokens_and_services_no_longer_in_the_mesh() {
    let dir = tempfile::tempdir().unwrap();
    let mut plane = started(dir.path());
    let now = SystemTime::now();
    assert_eq!(
        plane.issue("hopwise-join-nope", &csr(vec![]), "", now),
        Err(IssueError::UnknownToken)
    );
    assert_eq!(
        plane.issue("", &csr(vec![]), "", now),
        Err(IssueError::UnknownToken)
    );
    // The token decides the identity: pricing's token cannot get checkout's.
    let pricing = plane.token("pricing").unwrap().to_owned();
    let checkout_id = SanType::URI("spiffe://shop.local/service/checkout".try_into().unwrap());
    assert!(matches!(
        plane.issue(&pricing, &csr(vec![checkout_id]), "", now),
        Err(IssueError::WrongIdentity { .. })
    ));
    let issued = plane
        .issue(&pricing, &csr(vec![]), "pricing-1", now)
        .unwrap();
    assert_eq!(issued.identity, "spiffe://shop.local/service/pricing");
    // Remove pricing from the mesh: its token no longer gets certificates.
    let without = "mesh: { name: shop, trust_domain: shop.local }
services:
  frontend: { entry: { timeout: 3s }, calls: { checkout: { timeout: 2s } } }
  checkout: {}
";
    let r = plane.commit(prepare(without, "v2.yaml"), now).unwrap();
    assert!(r.applied, "{r:?}");
    assert_eq!(
        plane.issue(&pricing, &csr(vec![]), "", now),
        Err(IssueError::UnknownService("pricing".into()))
    );
}

#[test]
fn leases_follow_the_tokens_rules() {
    let dir = tempfile::tempdir().unwrap();
    let mut plane = started(dir.path());
    let t0 = Instant::now();
    let pricing = plane.token("pricing").unwrap().to_owned();
    let checkout = plane.token("checkout").unwrap().to_owned();
    for bad in ["nowhere", "0.0.0.0:7001", "127.0.0.1:0", ""] {
        assert_eq!(
            plane.register(&pricing, bad, 0, t0).unwrap_err(),
            ApiError::BadAddress(bad.into())
        );
    }
    assert!(matches!(
        plane.register(&pricing, &addr(1), 500, t0),
        Err(ApiError::Ttl(_))
    ));
    assert!(matches!(
        plane.register(&pricing, &addr(1), 3_600_001, t0),
        Err(ApiError::Ttl(_))
    ));
    assert_eq!(
        plane.register("wrong", &addr(1), 0, t0).unwrap_err(),
        ApiError::UnknownToken
    );
    let (lease, ttl, changed) = plane.register(&pricing, &addr(1), 0, t0).unwrap();
    assert_eq!(ttl, DEFAULT_TTL);
    assert!(!changed, "a new copy serves only once healthy");
    // Only pricing's token may touch pricing's lease.
    assert_eq!(
        plane.set_health(&checkout, lease.0, true, t0),
        Err(ApiError::NotYourLease(lease.0))
    );
    assert_eq!(
        plane.renew("wrong", lease.0, t0),
        Err(ApiError::UnknownToken)
    );
    assert_eq!(
        plane.deregister(&pricing, 12345),
        Err(ApiError::UnknownLease(12345))
    );
    let v = plane.version();
    assert_eq!(plane.set_health(&pricing, lease.0, true, t0), Ok(true));
    assert!(plane.version() > v);
    assert_eq!(plane.renew(&pricing, lease.0, t0), Ok(false));
    assert_eq!(plane.deregister(&pricing, lease.0), Ok(true));
    assert_eq!(
        plane.renew(&pricing, lease.0, t0),
        Err(ApiError::UnknownLease(lease.0))
    );
}

#[test]
fn snapshots_carry_policy_endpoints_bundle_and_allowed_callers() {
    let dir = tempfile::tempdir().unwrap();
    let mut plane = started(dir.path());
    let t0 = Instant::now();
    let pricing = plane.token("pricing").unwrap().to_owned();
    let (a, _, _) = plane.register(&pricing, &addr(7002), 1000, t0).unwrap();
    let (b, _, _) = plane.register(&pricing, &addr(7001), 5000, t0).unwrap();
    plane.set_health(&pricing, a.0, true, t0).unwrap();
    plane.set_health(&pricing, b.0, true, t0).unwrap();

    let s = plane.snapshot("checkout", t0).unwrap();
    assert_eq!(s.version, plane.version());
    assert_eq!(s.fixed.config_version, 1);
    assert_eq!(s.fixed.identity, "spiffe://shop.local/service/checkout");
    assert_eq!(&*s.fixed.mesh_yaml, SHOP);
    assert_eq!(s.fixed.trust_bundle_pem, plane.ca().trust_bundle_pem());
    // One entry per mesh service called (two routes to pricing make one), none for external fee.
    assert_eq!(s.upstreams.len(), 1);
    assert_eq!(s.upstreams[0].service, "pricing");
    assert_eq!(
        s.upstreams[0].identity,
        "spiffe://shop.local/service/pricing"
    );
    assert_eq!(s.upstreams[0].endpoints, [addr(7001), addr(7002)]);
    assert_eq!(
        s.fixed.allowed_callers,
        ["spiffe://shop.local/service/frontend"]
    );
    let policy: serde_json::Value = serde_json::from_str(&s.fixed.policy_json).unwrap();
    assert_eq!(policy["name"], "checkout");
    assert_eq!(policy["calls"].as_array().unwrap().len(), 3);

    let p = plane.snapshot("pricing", t0).unwrap();
    assert!(p.upstreams.is_empty());
    assert_eq!(
        p.fixed.allowed_callers,
        ["spiffe://shop.local/service/checkout"]
    );
    assert_eq!(
        plane.snapshot("fee", t0),
        Err(ApiError::External("fee".into()))
    );
    assert_eq!(
        plane.snapshot("nope", t0),
        Err(ApiError::UnknownService("nope".into()))
    );

    // A second later copy `a` (TTL 1 s) has expired: it leaves the snapshot, and the version
    // grows when the expiry is processed.
    let later = t0 + Duration::from_millis(1500);
    assert_eq!(plane.next_expiry(), Some(t0 + Duration::from_secs(1)));
    let v = plane.version();
    assert!(plane.expire(later));
    assert!(plane.version() > v);
    assert_eq!(
        plane.snapshot("checkout", later).unwrap().upstreams[0].endpoints,
        [addr(7001)]
    );
}

#[test]
fn apply_refuses_findings_invalid_files_and_trust_domain_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut plane = started(dir.path());
    let now = SystemTime::now();
    let before = (plane.version(), plane.config_version());

    let r = plane.commit(prepare(STORM, "storm.yaml"), now).unwrap();
    assert!(!r.applied);
    assert!(
        r.findings
            .iter()
            .any(|f| f.code == "retry-fanout" && f.severity == Severity::Error)
    );
    assert!(r.message.contains("storm.yaml"), "{}", r.message);

    let r = plane
        .commit(
            prepare("services:\n  a: { timout: 1s }\n", "typo.yaml"),
            now,
        )
        .unwrap();
    assert!(!r.applied);
    assert_eq!(r.diagnostics.len(), 1);
    assert!(
        r.diagnostics[0].starts_with("typo.yaml:2:"),
        "{:?}",
        r.diagnostics
    );
    assert!(
        r.diagnostics[0].contains("did you mean `timeout`"),
        "{:?}",
        r.diagnostics
    );

    let moved = SHOP.replace("trust_domain: shop.local", "trust_domain: other.local");
    let r = plane.commit(prepare(&moved, "moved.yaml"), now).unwrap();
    assert!(!r.applied);
    assert!(
        r.diagnostics[0].contains("mesh.trust_domain"),
        "{:?}",
        r.diagnostics
    );

    // Nothing changed, in memory or on disk.
    assert_eq!((plane.version(), plane.config_version()), before);
    assert_eq!(plane.mesh_text(), SHOP);
    assert_eq!(plane.store().state().mesh.as_ref().unwrap().text, SHOP);

    let r = plane.commit(prepare(SHOP, "same.yaml"), now).unwrap();
    assert!(r.applied && r.unchanged);
    assert_eq!((plane.version(), plane.config_version()), before);
}

#[test]
fn apply_changes_the_version_and_makes_tokens_for_new_services() {
    let dir = tempfile::tempdir().unwrap();
    let mut plane = started(dir.path());
    let v = plane.version();
    let grown = grown();
    let r = plane
        .commit(prepare(&grown, "grown.yaml"), SystemTime::now())
        .unwrap();
    assert!(r.applied && !r.unchanged, "{r:?}");
    assert_eq!(r.config_version, 2);
    assert_eq!(r.version, plane.version());
    assert!(plane.version() > v);
    assert!(r.message.contains("1 new token"), "{}", r.message);
    let token = plane.token("stock").unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("tokens/stock"))
            .unwrap()
            .trim(),
        token
    );
    let s = plane.snapshot("pricing", Instant::now()).unwrap();
    assert_eq!(s.upstreams[0].service, "stock");
    assert_eq!(&*s.fixed.mesh_yaml, grown.as_str());
}

#[test]
fn acks_and_certificates_show_in_status() {
    let dir = tempfile::tempdir().unwrap();
    let mut plane = started(dir.path());
    let t0 = Instant::now();
    let now = SystemTime::now();
    let pricing = plane.token("pricing").unwrap().to_owned();
    let checkout = plane.token("checkout").unwrap().to_owned();
    let issued = plane
        .issue(&pricing, &csr(vec![]), "pricing-1", now)
        .unwrap();
    plane.stream_opened("pricing", "pricing-1");
    plane.record_sent("pricing", "pricing-1", plane.version());
    assert_eq!(
        plane.ack(&checkout, "pricing", "pricing-1", 1, true, "", now),
        Err(ApiError::WrongService {
            token_for: "checkout".into(),
            asked: "pricing".into()
        })
    );
    plane
        .ack(
            &pricing,
            "pricing",
            "pricing-1",
            plane.version(),
            false,
            "bad route",
            now,
        )
        .unwrap();
    let (lease, _, _) = plane.register(&pricing, &addr(7001), 0, t0).unwrap();
    plane.set_health(&pricing, lease.0, true, t0).unwrap();

    let status = plane.status(t0);
    assert_eq!(status.mesh, "shop");
    assert_eq!(status.proxies.len(), 1);
    let p = &status.proxies[0];
    assert_eq!(
        (p.service.as_str(), p.proxy.as_str()),
        ("pricing", "pricing-1")
    );
    assert!(p.connected);
    assert!(!p.last_ack_accepted);
    assert_eq!(p.last_ack_reason, "bad route");
    assert_eq!(
        p.cert_not_after_unix,
        Some(ca::unix_seconds(issued.not_after))
    );
    let svc = status
        .services
        .iter()
        .find(|s| s.service == "pricing")
        .unwrap();
    assert_eq!(svc.certs_issued, 1);
    assert_eq!(svc.copies.len(), 1);
    assert_eq!(svc.copies[0].inbound_addr, addr(7001));
    assert!(svc.copies[0].healthy);
    assert!(
        status
            .services
            .iter()
            .any(|s| s.service == "fee" && s.external)
    );
    plane.stream_closed("pricing", "pricing-1");
    assert!(!plane.status(t0).proxies[0].connected);
}

fn write_operator_ca(dir: &Path, name: &str) -> CaFiles {
    use rcgen::{BasicConstraints, IsCa};
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let files = CaFiles {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}-key.pem")),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    files
}

#[test]
fn an_operators_ca_is_kept_by_path_and_never_switched_silently() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let files = write_operator_ca(dir.path(), "op");
    let mut opts = options(Some(SHOP));
    opts.ca_files = Some(files.clone());
    let bundle = {
        let plane = start_in(&state, opts.clone()).unwrap().plane;
        // The key is not copied into the state.
        let text = std::fs::read_to_string(state.join("state.json")).unwrap();
        assert!(!text.contains("PRIVATE KEY"));
        plane.ca().trust_bundle_pem()
    };
    // Restarted without the flags: the stored paths are read again.
    let plane = start_in(&state, options(None)).unwrap().plane;
    assert_eq!(plane.ca().trust_bundle_pem(), bundle);
    drop(plane);
    // Another CA: refused, naming the file.
    let other = write_operator_ca(dir.path(), "other");
    let mut opts = options(None);
    opts.ca_files = Some(other);
    let err = start_in(&state, opts).unwrap_err().to_string();
    assert!(
        err.contains("other.pem") && err.contains("rotation"),
        "{err}"
    );

    // A generated CA cannot be replaced by an operator's either.
    let fresh = dir.path().join("fresh");
    drop(started(&fresh));
    let mut opts = options(None);
    opts.ca_files = Some(files);
    assert!(matches!(
        start_in(&fresh, opts),
        Err(StartError::CaConflict(_))
    ));
}

#[test]
fn too_short_a_certificate_lifetime_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(Some(SHOP));
    opts.cert_lifetime = Duration::from_millis(10);
    assert!(matches!(
        start_in(dir.path(), opts),
        Err(StartError::Lifetime(_))
    ));
}

#[test]
fn a_copy_shared_through_etcd_brings_its_admin_address() {
    use crate::store::etcd::CopyValue;
    let mut r = Registry::new();
    let far = Instant::now() + Duration::from_secs(3600);
    let value = CopyValue {
        addr: "127.0.0.1:7001".parse().unwrap(),
        healthy: true,
        ttl_ms: 2000,
        admin: Some("127.0.0.1:9901".parse().unwrap()),
        labels: Default::default(),
    };
    let put = Effect::CopyPut {
        service: "pricing".into(),
        lease: 7,
        value: value.clone(),
    };
    put_copy(&mut r, put, far);
    assert_eq!(r.copy(LeaseId(7)).and_then(|c| c.admin), value.admin);
    // A record written before the field existed reads as a copy without an admin endpoint.
    let old = CopyValue::decode(br#"{"addr":"127.0.0.1:7001","healthy":true,"ttl_ms":2000}"#);
    assert_eq!(old.map(|v| v.admin), Some(None));
}

/// Every running service's snapshot, but for the version.
fn contents(plane: &Plane, now: Instant) -> BTreeMap<String, Snapshot> {
    ["frontend", "checkout", "pricing"]
        .into_iter()
        .map(|s| {
            let mut snapshot = plane.snapshot(s, now).unwrap();
            snapshot.version = 0;
            (s.to_owned(), snapshot)
        })
        .collect()
}

/// Takes the wake after a change and checks it against the snapshots: a stream that is not
/// woken has the same content as before (so it had nothing to send).
fn wake_after(plane: &mut Plane, before: &BTreeMap<String, Snapshot>, now: Instant) -> Wake {
    let wake = plane.take_wake();
    for (service, after) in contents(plane, now) {
        if !wake.wakes(&service) {
            assert_eq!(before[&service], after, "{service} was not woken: {wake:?}");
        }
    }
    wake
}

fn services(names: &[&str]) -> Wake {
    Wake::Services(names.iter().map(|n| (*n).to_owned()).collect())
}

#[test]
fn a_change_wakes_only_the_streams_whose_snapshot_it_may_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut plane = started(dir.path());
    let t0 = Instant::now();
    let pricing = plane.token("pricing").unwrap().to_owned();
    let checkout = plane.token("checkout").unwrap().to_owned();
    assert_eq!(
        plane.take_wake(),
        services(&[]),
        "nothing changed since the start"
    );

    // New copies are unhealthy: no endpoint set changed, nobody is woken.
    let mut seen = contents(&plane, t0);
    let (p, _, _) = plane.register(&pricing, &addr(7001), 0, t0).unwrap();
    let (c, _, _) = plane.register(&checkout, &addr(7002), 1000, t0).unwrap();
    assert_eq!(wake_after(&mut plane, &seen, t0), services(&[]));

    // pricing's copy turns healthy: checkout, which calls it, is woken; frontend and pricing's
    // own subscribers are not (nothing of pricing's copies is in their snapshots).
    plane.set_health(&pricing, p.0, true, t0).unwrap();
    assert_eq!(wake_after(&mut plane, &seen, t0), services(&["checkout"]));
    seen = contents(&plane, t0);

    // checkout's copy: frontend only. Renewing changes nothing.
    plane.set_health(&checkout, c.0, true, t0).unwrap();
    assert_eq!(wake_after(&mut plane, &seen, t0), services(&["frontend"]));
    seen = contents(&plane, t0);
    plane.renew(&pricing, p.0, t0).unwrap();
    assert_eq!(wake_after(&mut plane, &seen, t0), services(&[]));

    // Changes made before one publish are woken together; a lease that expires counts.
    plane.deregister(&pricing, p.0).unwrap();
    let later = t0 + Duration::from_secs(2);
    assert!(plane.expire(later), "checkout's 1 s lease expired");
    assert_eq!(
        wake_after(&mut plane, &seen, later),
        services(&["checkout", "frontend"])
    );
    seen = contents(&plane, later);

    // An apply changes every snapshot's mesh file: everyone.
    let grown = grown();
    let r = plane
        .commit(prepare(&grown, "grown.yaml"), SystemTime::now())
        .unwrap();
    assert!(r.applied, "{r:?}");
    assert_eq!(wake_after(&mut plane, &seen, later), Wake::Everyone);
    assert_eq!(plane.take_wake(), services(&[]), "taken");
    // The same file again changes nothing.
    plane
        .commit(prepare(&grown, "again.yaml"), SystemTime::now())
        .unwrap();
    assert_eq!(plane.take_wake(), services(&[]));

    // The new service's copies concern pricing, which calls it now.
    let stock = plane.token("stock").unwrap().to_owned();
    let (s, _, _) = plane.register(&stock, &addr(7003), 0, later).unwrap();
    plane.set_health(&stock, s.0, true, later).unwrap();
    assert_eq!(plane.take_wake(), services(&["pricing"]));
}
