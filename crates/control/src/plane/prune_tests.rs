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

#[test]
fn a_new_name_at_the_cap_is_refused_even_with_an_admin_address() {
    // `Subscribe` recorded the admin address before it admitted the name, so the name was
    // known by then and passed: a join token could grow its records without end.
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path());
    let now = Instant::now();
    for i in 0..MAX_PROXY_NAMES_PER_SERVICE {
        p.subscriber_joined("b", &format!("b-{i}"), None).unwrap();
    }
    let admin = Some("127.0.0.1:9901".parse().unwrap());
    assert!(matches!(
        p.subscriber_joined("b", "b-new", admin),
        Err(ApiError::TooManyProxies { .. })
    ));
    assert!(
        !names(&p, now).contains(&"b-new".to_owned()),
        "no record kept"
    );
    assert_eq!(p.subscribed_admins().len(), 0);
    // A known name joins again with its admin address.
    p.subscriber_joined("b", "b-1", admin).unwrap();
    assert_eq!(p.subscribed_admins().len(), 1);
}

#[test]
fn a_name_no_log_or_terminal_should_see_is_refused_before_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path());
    let now = Instant::now();
    let token = p.token("b").unwrap().to_owned();
    let long = "p".repeat(request::MAX_PROXY_NAME + 1);
    for bad in ["b-1\nforged line", "\u{1b}[2J", long.as_str()] {
        let admin = Some("127.0.0.1:9901".parse().unwrap());
        assert!(matches!(
            p.subscriber_joined("b", bad, admin),
            Err(ApiError::BadProxyName(_))
        ));
        assert!(matches!(
            p.ack(&token, "b", bad, 1, true, "", SystemTime::now()),
            Err(ApiError::BadProxyName(_))
        ));
    }
    assert!(names(&p, now).is_empty());
}
