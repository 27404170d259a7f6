//! The cached snapshots ([`Plane::shared_snapshot`]) against fresh ones ([`Plane::snapshot`]):
//! the same content after every kind of change, the same `Arc` while nothing in a service's
//! snapshot changed, and a registry change that rebuilds nothing of the mesh file's parts.

use super::*;
use crate::ca;

const MESH: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  a: { calls: { b: { timeout: 1s }, c: { timeout: 1s } } }
  d: { calls: { b: { timeout: 1s } } }
  b: {}
  c: {}
";

fn plane(dir: &std::path::Path) -> Plane {
    let options = Options::first("mesh.yaml", MESH, ca::DEFAULT_LIFETIME);
    Plane::start(Store::open(dir).unwrap(), options, SystemTime::now())
        .unwrap()
        .plane
}

/// The cached snapshot of `service` has the fresh one's content; its version may be older.
fn same_as_fresh(plane: &mut Plane, service: &str, now: Instant) -> Arc<Snapshot> {
    let cached = plane.shared_snapshot(service, now).unwrap();
    let fresh = plane.snapshot(service, now).unwrap();
    assert_eq!(
        (&cached.fixed, &cached.upstreams),
        (&fresh.fixed, &fresh.upstreams)
    );
    assert!(cached.version <= fresh.version);
    cached
}

#[test]
fn a_cached_snapshot_is_the_fresh_one_and_is_rebuilt_only_when_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path());
    let t0 = Instant::now();
    let a1 = same_as_fresh(&mut p, "a", t0);
    let d1 = same_as_fresh(&mut p, "d", t0);
    assert!(Arc::ptr_eq(&a1, &p.shared_snapshot("a", t0).unwrap()));

    // A copy of `c` joins: `a`'s snapshot changes, its fixed part and `b`'s list do not;
    // `d` (which does not call `c`) keeps its snapshot.
    let c = p.token("c").unwrap().to_owned();
    let (lease, _, _) = p.register(&c, "127.0.0.1:7001", 2000, t0).unwrap();
    p.set_health(&c, lease.0, true, t0).unwrap();
    let a2 = same_as_fresh(&mut p, "a", t0);
    assert!(!Arc::ptr_eq(&a1, &a2));
    assert!(Arc::ptr_eq(&a1.fixed, &a2.fixed));
    assert!(Arc::ptr_eq(&a1.upstreams[0], &a2.upstreams[0]));
    assert_eq!(a2.upstreams[1].endpoints, ["127.0.0.1:7001"]);
    assert!(Arc::ptr_eq(&d1, &same_as_fresh(&mut p, "d", t0)));
    // `b`'s list is one, shared by both callers.
    let d2 = p.shared_snapshot("d", t0).unwrap();
    assert!(Arc::ptr_eq(&a2.upstreams[0], &d2.upstreams[0]));

    // Its lease expires before anyone processes it: the list leaves at once.
    let later = t0 + Duration::from_secs(3);
    let a3 = same_as_fresh(&mut p, "a", later);
    assert!(a3.upstreams[1].endpoints.is_empty());

    // A token rotated: every fixed part is checked again; the same content keeps its `Arc`.
    let stamp = p.config_stamp();
    p.rotate_token("d").unwrap();
    assert!(p.config_stamp() > stamp);
    let a4 = same_as_fresh(&mut p, "a", later);
    assert!(Arc::ptr_eq(&a3, &a4));

    // A new mesh file: every fixed part changes.
    let grown = format!("{MESH}  e: {{}}\n");
    p.commit(prepare(&grown, "mesh.yaml"), SystemTime::now())
        .unwrap();
    let a5 = same_as_fresh(&mut p, "a", later);
    assert!(!Arc::ptr_eq(&a4.fixed, &a5.fixed));
    assert_eq!(&*a5.fixed.mesh_yaml, grown.as_str());
}
