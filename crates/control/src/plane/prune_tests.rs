//! Records of proxies gone for good are dropped, on explicit `now` values: no stream open for
//! [`PROXY_RECORD_TTL`] and no certificate still valid; a dropped name frees its place under
//! [`MAX_PROXY_NAMES_PER_SERVICE`].

use super::*;
use crate::ca;

const MESH: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  a: { calls: { b: { timeout: 1s } } }
  b: {}
";

fn plane(dir: &std::path::Path) -> Plane {
    let options = Options::first("mesh.yaml", MESH, ca::DEFAULT_LIFETIME);
    Plane::start(Store::open(dir).unwrap(), options, SystemTime::now())
        .unwrap()
        .plane
}

fn names(plane: &Plane, now: Instant) -> Vec<String> {
    plane
        .status(now)
        .proxies
        .into_iter()
        .map(|p| p.proxy)
        .collect()
}

#[test]
fn a_proxy_without_a_stream_is_dropped_after_the_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path());
    let (t0, wall) = (Instant::now(), SystemTime::now());
    p.stream_opened("b", "b-1");
    p.stream_opened("b", "b-2");
    p.stream_closed("b", "b-1");
    assert_eq!(p.prune_proxies(t0, wall), 0, "the clock starts now");
    let almost = t0 + PROXY_RECORD_TTL - Duration::from_millis(1);
    assert_eq!(p.prune_proxies(almost, wall), 0);
    assert_eq!(p.prune_proxies(t0 + PROXY_RECORD_TTL, wall), 1);
    // The one whose stream is open stays, however long.
    assert_eq!(names(&p, t0), vec!["b-2"]);
    assert_eq!(p.prune_proxies(t0 + 100 * PROXY_RECORD_TTL, wall), 0);
}

#[test]
fn a_proxy_that_comes_back_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path());
    let (t0, wall) = (Instant::now(), SystemTime::now());
    p.stream_opened("b", "b-1");
    p.stream_closed("b", "b-1");
    p.prune_proxies(t0, wall);
    // Back before the TTL: its idle time is forgotten.
    p.stream_opened("b", "b-1");
    p.prune_proxies(t0 + Duration::from_secs(30), wall);
    p.stream_closed("b", "b-1");
    p.prune_proxies(t0 + Duration::from_secs(40), wall);
    assert_eq!(p.prune_proxies(t0 + PROXY_RECORD_TTL, wall), 0);
    let later = t0 + Duration::from_secs(40) + PROXY_RECORD_TTL;
    assert_eq!(p.prune_proxies(later, wall), 1);
}

#[test]
fn a_proxy_whose_certificate_is_valid_is_kept_until_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path());
    let (t0, wall) = (Instant::now(), SystemTime::now());
    let not_after = wall + Duration::from_secs(3600);
    p.record_issued("b", "b-1", not_after, 1);
    p.prune_proxies(t0, wall);
    // It may still be serving: a CA rotation must wait for it.
    let later = t0 + 2 * PROXY_RECORD_TTL;
    assert_eq!(p.prune_proxies(later, wall + PROXY_RECORD_TTL), 0);
    assert_eq!(p.prune_proxies(later, not_after), 1);
}

#[test]
fn a_dropped_name_frees_its_place_under_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path());
    let (t0, wall) = (Instant::now(), SystemTime::now());
    for i in 0..MAX_PROXY_NAMES_PER_SERVICE {
        p.admit_proxy("b", &format!("b-{i}")).unwrap();
        p.stream_opened("b", &format!("b-{i}"));
    }
    assert!(matches!(
        p.admit_proxy("b", "b-new"),
        Err(ApiError::TooManyProxies { cap, .. }) if cap == MAX_PROXY_NAMES_PER_SERVICE
    ));
    // Another service's names are its own.
    p.admit_proxy("a", "a-1").unwrap();
    p.stream_closed("b", "b-0");
    p.prune_proxies(t0, wall);
    p.prune_proxies(t0 + PROXY_RECORD_TTL, wall);
    p.admit_proxy("b", "b-new").unwrap();
}
