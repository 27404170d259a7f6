//! The registry's tests: leases on a synthetic clock, the endpoint sets, the indexes kept equal
//! to a scan of every copy.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::*;
use hopwise_model::labels::Labels;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

const TTL: Duration = Duration::from_secs(10);

#[test]
fn a_copy_serves_once_healthy_and_leaves_when_its_lease_expires() {
    let t0 = Instant::now();
    let mut r = Registry::new();
    let id = r.register("pricing", addr(1), TTL, t0).unwrap();
    assert!(
        r.endpoints("pricing", t0).is_empty(),
        "not before its first probe"
    );
    let v = r.version();
    r.set_health(id, true, t0).unwrap();
    assert!(r.version() > v);
    assert_eq!(r.endpoints("pricing", t0), [addr(1)]);
    // Renewed in time, it stays.
    r.renew(id, t0 + Duration::from_secs(8)).unwrap();
    assert_eq!(
        r.endpoints("pricing", t0 + Duration::from_secs(15)),
        [addr(1)]
    );
    // Not renewed: gone at expiry, at once, and its renewals are refused.
    let later = t0 + Duration::from_secs(18);
    assert!(r.endpoints("pricing", later).is_empty());
    let changes = r.expire(later);
    assert_eq!(changes.removed, [("pricing".to_owned(), addr(1))]);
    assert_eq!(r.renew(id, later), Err(RegistryError::UnknownLease(id)));
}

#[test]
fn unhealthy_copies_leave_and_come_back() {
    let t0 = Instant::now();
    let mut r = Registry::new();
    let a = r.register("pricing", addr(1), TTL, t0).unwrap();
    let b = r.register("pricing", addr(2), TTL, t0).unwrap();
    r.set_health(a, true, t0).unwrap();
    r.set_health(b, true, t0).unwrap();
    assert_eq!(r.endpoints("pricing", t0), [addr(1), addr(2)]);
    let changes = r.set_health(a, false, t0).unwrap();
    assert_eq!(changes.removed, [("pricing".to_owned(), addr(1))]);
    assert_eq!(r.endpoints("pricing", t0), [addr(2)]);
    // No change, no new version.
    let v = r.version();
    assert!(r.set_health(b, true, t0).unwrap().is_empty());
    assert_eq!(r.version(), v);
}

#[test]
fn deregistering_removes_at_once_and_a_restart_replaces_the_old_lease() {
    let t0 = Instant::now();
    let mut r = Registry::new();
    let a = r.register("fee", addr(1), TTL, t0).unwrap();
    r.set_health(a, true, t0).unwrap();
    // The same copy restarted before its old lease expired: one entry, not two.
    let a2 = r.register("fee", addr(1), TTL, t0).unwrap();
    r.set_health(a2, true, t0).unwrap();
    assert_eq!(r.endpoints("fee", t0), [addr(1)]);
    assert_eq!(r.copies().count(), 1);
    r.deregister(a2);
    assert!(r.endpoints("fee", t0).is_empty());
}

#[test]
fn lease_ids_continue_after_a_restart_and_the_next_expiry_is_known() {
    let t0 = Instant::now();
    let mut r = Registry::starting_after(7 << 32);
    assert_eq!(r.next_expiry(), None);
    let a = r.register("a", addr(1), TTL, t0).unwrap();
    assert_eq!(a, LeaseId((7 << 32) + 1));
    let b = r
        .register("a", addr(2), Duration::from_secs(2), t0)
        .unwrap();
    assert_eq!(r.next_expiry(), Some(t0 + Duration::from_secs(2)));
    assert_eq!(r.copy(b).map(|c| c.inbound), Some(addr(2)));
    r.expire(t0 + Duration::from_secs(3));
    assert_eq!(r.copy(b), None);
    assert_eq!(r.next_expiry(), Some(t0 + TTL));
}

#[test]
fn copies_put_from_a_shared_store_change_the_version_only_when_endpoints_change() {
    let t0 = Instant::now();
    let far = t0 + Duration::from_secs(3600);
    let mut r = Registry::new();
    let v = r.version();
    assert!(
        !r.put(LeaseId(9), "b", addr(1), false, TTL, far),
        "unhealthy: no endpoint"
    );
    assert_eq!(r.version(), v);
    assert!(r.put(LeaseId(9), "b", addr(1), true, TTL, far));
    assert_eq!(r.endpoints("b", t0), [addr(1)]);
    assert!(
        !r.put(LeaseId(9), "b", addr(1), true, TTL, far),
        "the same again"
    );
    assert!(!r.deregister(LeaseId(9)).is_empty());
    assert!(r.endpoints("b", t0).is_empty());
}

#[test]
fn each_change_names_the_service_whose_endpoints_changed() {
    let t0 = Instant::now();
    let far = t0 + Duration::from_secs(3600);
    let mut r = Registry::new();
    let a = r.register("pricing", addr(1), TTL, t0).unwrap();
    let b = r.register("stock", addr(2), TTL, t0).unwrap();
    assert!(
        r.take_touched().is_empty(),
        "unhealthy copies are in no endpoint set"
    );
    r.set_health(a, true, t0).unwrap();
    r.renew(b, t0).unwrap();
    assert_eq!(r.take_touched(), BTreeSet::from(["pricing".to_owned()]));
    assert!(r.take_touched().is_empty(), "taken");
    r.set_health(b, true, t0).unwrap();
    r.deregister(a);
    assert_eq!(
        r.take_touched(),
        BTreeSet::from(["pricing".to_owned(), "stock".to_owned()])
    );
    // A shared store's copy that moves to another service leaves the old one's set too.
    r.put(LeaseId(99), "stock", addr(9), true, TTL, far);
    r.take_touched();
    r.put(LeaseId(99), "pricing", addr(9), true, TTL, far);
    assert_eq!(
        r.take_touched(),
        BTreeSet::from(["pricing".to_owned(), "stock".to_owned()])
    );
    r.expire(t0 + TTL);
    assert_eq!(r.take_touched(), BTreeSet::from(["stock".to_owned()]));
}

#[test]
fn leases_shorter_than_a_second_are_refused() {
    let mut r = Registry::new();
    assert!(matches!(
        r.register("a", addr(1), Duration::from_millis(10), Instant::now()),
        Err(RegistryError::TtlTooShort(_))
    ));
}

proptest::proptest! {
    /// Whatever happens, the endpoint set holds exactly the healthy, unexpired copies.
    #[test]
    fn endpoints_are_exactly_the_live_healthy_copies(
        ops in proptest::collection::vec((0u8..5, 0u16..4, 0u64..30), 0..60),
    ) {
        let t0 = Instant::now();
        let mut r = Registry::new();
        let mut ids: Vec<LeaseId> = Vec::new();
        let mut now = t0;
        for (op, which, dt) in ops {
            now += Duration::from_secs(dt % 7);
            let id = ids.get(usize::from(which)).copied();
            match (op, id) {
                (0, _) => {
                    if let Ok(id) = r.register("s", addr(which), TTL, now) {
                        ids.push(id);
                    }
                }
                (1, Some(id)) => { let _ = r.renew(id, now); }
                (2, Some(id)) => { let _ = r.set_health(id, true, now); }
                (3, Some(id)) => { let _ = r.set_health(id, false, now); }
                (4, Some(id)) => { r.deregister(id); }
                _ => {}
            }
            let expected: std::collections::BTreeSet<SocketAddr> = r
                .copies()
                .filter(|(_, c)| c.healthy && c.expires > now)
                .map(|(_, c)| c.inbound)
                .collect();
            let got: std::collections::BTreeSet<SocketAddr> =
                r.endpoints("s", now).into_iter().collect();
            proptest::prop_assert_eq!(got, expected);
        }
    }
}

proptest::proptest! {
    /// Whatever happens (two services, leases on shared addresses, renewals that move expiries,
    /// copies put from a shared store that change service), every index answers as a scan of
    /// every copy would.
    #[test]
    fn the_indexes_answer_as_a_scan_of_every_copy(
        ops in proptest::collection::vec((0u8..7, 0u16..6, 0u64..30, proptest::bool::ANY), 0..80),
    ) {
        let t0 = Instant::now();
        let mut r = Registry::new();
        let mut ids: Vec<LeaseId> = Vec::new();
        let mut now = t0;
        for (op, which, dt, flag) in ops {
            now += Duration::from_secs(dt % 5);
            let service = if flag { "s" } else { "t" };
            let id = ids.get(usize::from(which)).copied();
            let ttl = Duration::from_secs(1 + dt % 9);
            match (op, id) {
                (0, _) => {
                    if let Ok(id) = r.register(service, addr(which % 3), ttl, now) {
                        ids.push(id);
                    }
                }
                (1, Some(id)) => { let _ = r.renew(id, now); }
                (2, Some(id)) => { let _ = r.set_health(id, flag, now); }
                (3, Some(id)) => { r.deregister(id); }
                (4, _) => { r.expire(now); }
                (5, _) => {
                    let id = LeaseId(1000 + u64::from(which));
                    r.put(id, service, addr(which % 3), flag, ttl, now + ttl);
                    ids.push(id);
                }
                _ => {}
            }
            let copies: Vec<(LeaseId, Copy)> = r.copies().map(|(id, c)| (*id, c.clone())).collect();
            proptest::prop_assert_eq!(
                r.next_expiry(),
                copies.iter().map(|(_, c)| c.expires).min()
            );
            for s in ["s", "t"] {
                let live: BTreeSet<SocketAddr> = copies
                    .iter()
                    .filter(|(_, c)| c.service == s && c.healthy && c.expires > now)
                    .map(|(_, c)| c.inbound)
                    .collect();
                let got = r.endpoints(s, now);
                proptest::prop_assert_eq!(&got, &live.into_iter().collect::<Vec<_>>());
                for port in 0..3 {
                    let at: Vec<LeaseId> = copies
                        .iter()
                        .filter(|(_, c)| c.service == s && c.inbound == addr(port))
                        .map(|(id, _)| *id)
                        .collect();
                    proptest::prop_assert_eq!(r.leases_at(s, addr(port)), at.clone());
                    let besides = copies.iter().filter(|(_, c)| c.service == s).count() - at.len();
                    proptest::prop_assert_eq!(r.held_besides(s, addr(port)), besides);
                }
            }
        }
    }
}

#[test]
fn each_service_knows_the_version_of_its_last_change() {
    let t0 = Instant::now();
    let mut r = Registry::new();
    assert_eq!(r.changed_at("a"), 0);
    let a = r.register("a", addr(1), TTL, t0).unwrap();
    assert_eq!(
        r.changed_at("a"),
        0,
        "an unhealthy copy changes no endpoint set"
    );
    r.set_health(a, true, t0).unwrap();
    let at = r.changed_at("a");
    assert!(at > 0);
    let b = r.register("b", addr(2), TTL, t0).unwrap();
    r.set_health(b, true, t0).unwrap();
    r.renew(a, t0).unwrap();
    assert_eq!(
        r.changed_at("a"),
        at,
        "b's change and a's renewal leave a's list alone"
    );
    r.deregister(a);
    assert!(r.changed_at("a") > at);
    // The list holds until its live leases expire.
    let live: Vec<_> = r.live("b", t0).map(|(a, until, _)| (a, until)).collect();
    assert_eq!(live, [(addr(2), t0 + TTL)]);
}

#[test]
fn a_copys_labels_travel_with_its_endpoint_and_a_change_of_them_is_a_change() {
    let t0 = Instant::now();
    let mut r = Registry::new();
    let v2: Labels = [("version".to_owned(), "v2".to_owned())].into();
    let a = r.register("b", addr(1), TTL, t0).unwrap();
    let before = r.version();
    r.set_labels(a, v2.clone()).unwrap();
    assert_eq!(
        r.version(),
        before,
        "a copy that serves nothing yet changes no set"
    );
    r.set_health(a, true, t0).unwrap();
    let live: Vec<_> = r.live("b", t0).map(|(a, _, l)| (a, l.clone())).collect();
    assert_eq!(live, [(addr(1), v2.clone())]);
    let serving = r.version();
    r.set_labels(a, v2).unwrap();
    assert_eq!(r.version(), serving, "the same labels: no change");
    r.set_labels(a, Labels::new()).unwrap();
    assert!(
        r.version() > serving,
        "a serving copy relabelled: its set changed"
    );
    assert!(r.take_touched().contains("b"));
    // A shared record put again keeps the labels its lease was given.
    r.set_labels(a, [("version".to_owned(), "v1".to_owned())].into())
        .unwrap();
    r.put(a, "b", addr(1), true, TTL, t0 + TTL);
    assert_eq!(r.copy(a).unwrap().labels["version"], "v1");
}

fn pod(last: u8) -> SocketAddr {
    SocketAddr::from(([10, 244, 0, last], 4143))
}

fn listed(ready: &[u8], terminating: &[u8]) -> Endpoints {
    let ips = |l: &[u8]| l.iter().map(|&i| pod(i).ip()).collect();
    Endpoints {
        ready: ips(ready),
        terminating: ips(terminating),
        ports: Default::default(),
    }
}

#[test]
fn where_kubernetes_knows_a_service_only_its_ready_addresses_take_traffic() {
    let t0 = Instant::now();
    let mut r = Registry::new();
    for i in [5, 6, 7] {
        let id = r.register("api", pod(i), TTL, t0).unwrap();
        r.set_health(id, true, t0).unwrap();
    }
    // Unknown to Kubernetes: leases alone decide.
    assert_eq!(r.endpoints("api", t0), [pod(5), pod(6), pod(7)]);
    r.take_touched();

    // .5 ready, .6 terminating, .7 not listed (its pod is gone, or not ready).
    let v = r.version();
    assert!(r.set_discovered("api", Some(listed(&[5], &[6]))));
    assert!(r.version() > v, "callers are sent the change");
    assert_eq!(r.take_touched(), BTreeSet::from(["api".to_owned()]));
    assert_eq!(r.endpoints("api", t0), [pod(5)]);
    let seen = r.discovered("api").unwrap();
    let states: Vec<_> = [5, 6, 7].map(|i| seen.state(pod(i).ip())).into();
    assert_eq!(states, ["ready", "terminating", "absent"]);

    // The same list again changes nothing and wakes no one.
    let v = r.version();
    assert!(!r.set_discovered("api", Some(listed(&[5], &[6]))));
    assert_eq!(r.version(), v);
    assert!(r.take_touched().is_empty());

    // Listed ready is not enough: the copy's own health and lease still count.
    let id = r.leases_at("api", pod(5))[0];
    r.set_health(id, false, t0).unwrap();
    assert!(r.endpoints("api", t0).is_empty());
    r.set_health(id, true, t0).unwrap();
    // Listed ready without a copy there: nothing to send to (no proxy vouched for it).
    r.set_discovered("api", Some(listed(&[5, 8], &[])));
    assert_eq!(r.endpoints("api", t0), [pod(5)]);

    // Kubernetes forgets the Service: leases alone again.
    assert!(r.set_discovered("api", None));
    assert_eq!(r.endpoints("api", t0), [pod(5), pod(6), pod(7)]);
    // Other services are never gated by it.
    r.set_discovered("api", Some(listed(&[], &[])));
    let id = r.register("web", pod(9), TTL, t0).unwrap();
    r.set_health(id, true, t0).unwrap();
    assert_eq!(r.endpoints("web", t0), [pod(9)]);
    assert!(r.endpoints("api", t0).is_empty());
}
