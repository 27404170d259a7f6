use super::*;
use crate::store::etcd::AckValue;

fn ack(version: u64, at_unix_ms: i64) -> Option<AckValue> {
    Some(AckValue {
        version,
        accepted: true,
        reason: String::new(),
        at_unix_ms,
    })
}

/// What replica `replica` knows: the stream there, an acknowledgement, the generations.
fn fact(replica: &str, connected: bool, acked: u64, at: i64, cert: u64) -> ProxyValue {
    ProxyValue {
        replica: replica.into(),
        connected,
        last_sent: acked,
        ack: ack(acked, at),
        cert_not_after_unix: Some(1_000 + at),
        cert_issued: Some(cert),
        cert_in_force: Some(cert),
        bundle_confirmed: acked,
        admin: None,
    }
}

#[test]
fn a_proxy_that_moved_between_replicas_merges_into_its_latest_word() {
    // It was on A (acked 10, generation 1), failed over to B (acked 12, generation 2); A has
    // not noticed its stream closed yet.
    let a = fact("127.0.0.1:7900", true, 10, 100, 1);
    let b = fact("127.0.0.1:7901", true, 12, 200, 2);
    let m = merge(&[b.clone(), a.clone()]);
    assert!(m.connected);
    assert_eq!(m.replica, "127.0.0.1:7900,127.0.0.1:7901", "both, sorted");
    assert_eq!(m.ack, b.ack, "the acknowledgement received last");
    assert_eq!((m.last_sent, m.bundle_confirmed), (12, 12));
    assert_eq!((m.cert_in_force, m.cert_issued), (Some(2), Some(2)));
    assert_eq!(m.cert_not_after_unix, Some(1_200));
    assert_eq!(merge(&[a.clone(), b.clone()]), m, "order does not matter");
    // A noticed: only B is named.
    let closed = ProxyValue {
        connected: false,
        ..a.clone()
    };
    let m = merge(&[closed.clone(), b.clone()]);
    assert_eq!(m.replica, "127.0.0.1:7901");
    // Nowhere connected: not connected, no replica, the facts kept.
    let m = merge(&[closed]);
    assert!(!m.connected);
    assert_eq!(m.replica, "");
    assert_eq!(m.ack, a.ack);
    // Nothing known: nothing claimed.
    assert_eq!(merge(&[]), ProxyValue::default());
    // Same time: the higher version wins.
    let same_time = fact("x", false, 11, 100, 1);
    assert_eq!(merge(&[a.clone(), same_time.clone()]).ack, same_time.ack);
}

#[test]
fn the_admin_address_comes_from_where_the_proxy_is_connected() {
    let mut old = fact("a", false, 1, 1, 1);
    old.admin = Some("127.0.0.1:9001".parse().unwrap());
    let mut new = fact("b", true, 2, 2, 1);
    new.admin = Some("127.0.0.1:9002".parse().unwrap());
    assert_eq!(merge(&[new.clone(), old.clone()]).admin, new.admin);
    assert_eq!(merge(&[old.clone(), new.clone()]).admin, new.admin);
    new.admin = None;
    assert_eq!(merge(&[new, old.clone()]).admin, old.admin);
}

#[test]
fn other_replicas_records_come_and_go_per_lease() {
    let mut r = Remote::default();
    r.put("b".into(), "b-0".into(), 7, fact("B", true, 5, 50, 1));
    r.put("b".into(), "b-0".into(), 9, fact("C", false, 3, 30, 1));
    r.put("a".into(), "".into(), 7, fact("B", true, 4, 40, 1));
    let keys: Vec<_> = r.keys().collect();
    assert_eq!(keys, [("a", "", 7), ("b", "b-0", 7), ("b", "b-0", 9)]);
    // This replica knows b-0 too (closed here) and c-0 only it knows.
    let local = BTreeMap::from([
        (("b".into(), "b-0".into()), fact("A", false, 2, 20, 1)),
        (("c".into(), "c-0".into()), fact("A", true, 1, 10, 1)),
    ]);
    let m = r.merged(local.clone());
    let names: Vec<_> = m.keys().map(|(s, p)| format!("{s}/{p}")).collect();
    assert_eq!(names, ["a/", "b/b-0", "c/c-0"]);
    let b0 = &m[&("b".to_owned(), "b-0".to_owned())];
    assert_eq!((b0.replica.as_str(), b0.last_sent), ("B", 5));
    assert_eq!(m[&("c".to_owned(), "c-0".to_owned())].replica, "A");
    // Replica B dies: its lease's records go; what C and this replica know stays.
    r.remove("b", "b-0", 7);
    r.remove("a", "", 7);
    r.remove("a", "", 7);
    let m = r.merged(local);
    assert_eq!(m.len(), 2);
    let b0 = &m[&("b".to_owned(), "b-0".to_owned())];
    assert!(!b0.connected);
    assert_eq!(b0.last_sent, 3);
}

#[test]
fn readiness_for_each_stage_reads_the_merged_facts() {
    let p = fact("B", true, 12, 200, 1);
    assert!(live(&p, 10_000), "connected");
    let gone = ProxyValue {
        connected: false,
        ..p.clone()
    };
    assert!(live(&gone, 1_199), "its certificate is still valid");
    assert!(!live(&gone, 1_200), "expired and not connected");
    assert_eq!(not_ready(&p, RotateStage::Add, 2, 99), None);
    // Reissue: the bundle of version 12 or later must be confirmed.
    assert_eq!(not_ready(&p, RotateStage::Reissue, 1, 12), None);
    let r = not_ready(&p, RotateStage::Reissue, 1, 13).unwrap();
    assert!(r.contains("yet"), "{r}");
    let r = not_ready(&gone, RotateStage::Reissue, 1, 13).unwrap();
    assert!(r.contains("stream is closed"), "{r}");
    // Retire: the certificate in force must be from the current generation.
    let r = not_ready(&p, RotateStage::Retire, 2, 0).unwrap();
    assert!(r.contains("generation 1, current 2"), "{r}");
    let issued = ProxyValue {
        cert_issued: Some(2),
        ..p.clone()
    };
    let r = not_ready(&issued, RotateStage::Retire, 2, 0).unwrap();
    assert!(r.contains("not confirmed using it"), "{r}");
    let on_new = ProxyValue {
        cert_in_force: Some(2),
        ..issued
    };
    assert_eq!(not_ready(&on_new, RotateStage::Retire, 2, 0), None);
    let unknown = ProxyValue {
        cert_issued: None,
        cert_in_force: None,
        ..p
    };
    let r = not_ready(&unknown, RotateStage::Retire, 2, 0).unwrap();
    assert!(r.contains("unknown"), "{r}");
}
