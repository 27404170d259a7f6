use super::*;

fn state() -> State {
    State {
        ca: Some(CaState::Generated {
            cert_pem: "CERT".into(),
            key_pem: Secret("KEY".into()),
        }),
        ca_generation: 2,
        rotation: Some(Rotation::Added {
            next_cert_pem: "NEXT".into(),
            next_key_pem: Secret("NEXT-KEY".into()),
            at_unix_ms: 5,
        }),
        tokens: BTreeMap::from([
            ("a".to_owned(), Secret("hopwise-join-aa".into())),
            ("b".to_owned(), Secret("hopwise-join-bb".into())),
        ]),
        mesh: Some(MeshState {
            text: "services: { a: {} }\n".into(),
            version: 3,
            source: "m.yaml".into(),
            applied_unix_ms: 7,
        }),
        admin_token: Some(Secret("hopwise-admin-cc".into())),
        ..State::default()
    }
}

fn put(key: &str, value: &[u8], revision: i64) -> Change {
    Change {
        key: key.into(),
        value: Some(value.to_vec()),
        revision,
    }
}

#[test]
fn the_store_address_is_read_with_its_endpoints_and_prefix() {
    let spec = EtcdSpec::parse("etcd://127.0.0.1:2379").unwrap();
    assert_eq!(spec.endpoints, ["127.0.0.1:2379"]);
    assert_eq!(spec.prefix, "/hopwise");
    let spec = EtcdSpec::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/meshes/shop/").unwrap();
    assert_eq!(spec.endpoints, ["10.0.0.1:2379", "10.0.0.2:2379"]);
    assert_eq!(spec.prefix, "/meshes/shop");
    assert_eq!(spec.url(), "etcd://10.0.0.1:2379,10.0.0.2:2379/meshes/shop");
    for bad in [
        "http://127.0.0.1:2379",
        "etcd://",
        "etcd://127.0.0.1",
        "etcd://127.0.0.1:0",
        "etcd://127.0.0.1:2379,,x:1",
        "etcd://:2379",
    ] {
        let err = EtcdSpec::parse(bad).unwrap_err();
        assert!(
            err.contains(bad) || err.contains("HOST:PORT"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn keys_name_what_they_hold_and_secrets_share_one_prefix() {
    let l = Layout::new("/hopwise/");
    let keys = [
        (Key::Ca, "/hopwise/secret/ca"),
        (Key::Mesh, "/hopwise/mesh"),
        (
            Key::Token("pricing".into()),
            "/hopwise/secret/tokens/pricing",
        ),
        (Key::AdminToken, "/hopwise/secret/admin-token"),
        (
            Key::Copy {
                service: "b".into(),
                lease: 0x694d_8a2f_5e1c_0b07,
            },
            "/hopwise/copies/b/694d8a2f5e1c0b07",
        ),
    ];
    for (key, text) in keys {
        assert_eq!(l.key(&key), text);
        assert_eq!(l.parse(text), Some(key));
    }
    for other in [
        // One spelling per lease (fuzz/corpus/etcd_records/lease-in-capitals): a key read
        // prints back to itself.
        "/hopwise/copies/b/694dBa2f5e1c0b07",
        "/hopwise/copies/b/+94d8a2f5e1c0b07",
        "/hopwise/proxies/b/x/00000000000000AB",
        "/hopwise/copies/b/12",
        "/hopwise/copies/b/zzzzzzzzzzzzzzzz",
        "/hopwise/secret/tokens/",
        "/hopwise/secret/tokens/a/b",
        "/other/mesh",
        "/hopwise/mesh2",
    ] {
        assert_eq!(l.parse(other), None, "{other}");
    }
    let encoded = encode_state(&l, &state());
    let secret: Vec<&String> = encoded
        .iter()
        .filter(|(_, v)| {
            let v = String::from_utf8_lossy(v);
            v.contains("KEY") || v.contains("hopwise-join-") || v.contains("hopwise-admin-")
        })
        .map(|(k, _)| k)
        .collect();
    assert_eq!(secret.len(), 4, "{secret:?}");
    assert!(
        secret.iter().all(|k| k.starts_with("/hopwise/secret/")),
        "{secret:?}"
    );
}

#[test]
fn the_state_survives_encoding_except_the_embedded_counters() {
    let l = Layout::new("/p");
    let s = state();
    let back = decode_state(&l, &encode_state(&l, &s)).unwrap();
    assert_eq!(back, s);
    let mut counted = s.clone();
    counted.starts = 41;
    assert_eq!(encode_state(&l, &counted), encode_state(&l, &s));
    // A record that does not decode is named.
    let mut kvs = encode_state(&l, &s);
    kvs.insert("/p/mesh".into(), b"{not json".to_vec());
    let (key, _) = decode_state(&l, &kvs).unwrap_err();
    assert_eq!(key, "/p/mesh");
    // A copy's record reads back; garbage does not.
    let v = CopyValue {
        addr: "127.0.0.1:7001".parse().unwrap(),
        healthy: true,
        ttl_ms: 3000,
        admin: None,
        labels: [("version".into(), "v2".into())].into(),
    };
    assert_eq!(CopyValue::decode(&v.encode()), Some(v));
    assert_eq!(CopyValue::decode(b"[]"), None);
}

#[test]
fn a_write_touches_only_what_changed_and_is_guarded_by_the_revision_seen() {
    let l = Layout::new("/p");
    let mut view = View::new(l.clone());
    // Nothing stored: every key must not exist yet (revision 0).
    let writes = view.plan(&state());
    assert_eq!(writes.len(), 5);
    assert!(writes.iter().all(|w| w.expect == 0 && w.value.is_some()));
    view.committed(&writes, state(), 10);
    assert_eq!(view.revision(), 10);
    assert!(view.plan(&state()).is_empty(), "nothing changed");
    // A new mesh file and a new token: two writes, each guarded by its key's revision.
    let mut next = state();
    if let Some(m) = next.mesh.as_mut() {
        m.version = 4;
    }
    next.tokens
        .insert("c".into(), Secret("hopwise-join-cc".into()));
    let writes = view.plan(&next);
    let keys: Vec<(&str, i64)> = writes.iter().map(|w| (w.key.as_str(), w.expect)).collect();
    assert_eq!(keys, [("/p/mesh", 10), ("/p/secret/tokens/c", 0)]);
}

#[test]
fn the_view_follows_changes_in_order_and_skips_its_own_late_echoes() {
    let l = Layout::new("/p");
    let other = View::new(l.clone());
    let writes = other.plan(&state());
    let mut view = View::new(l.clone());
    let changes: Vec<Change> = writes
        .iter()
        .map(|w| put(&w.key, w.value.as_deref().unwrap(), 5))
        .collect();
    let (effects, problems) = view.apply(&changes);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(effects, [Effect::State]);
    assert_eq!(view.state(), &state());
    // This replica applies config version 4 (revision 9); the watch then reports an older
    // write of the mesh (revision 7) late: it is skipped.
    let mut next = state();
    if let Some(m) = next.mesh.as_mut() {
        m.version = 4;
    }
    let writes = view.plan(&next);
    view.committed(&writes, next.clone(), 9);
    let old = encode_state(&l, &state());
    let (effects, _) = view.apply(&[put("/p/mesh", &old["/p/mesh"], 7)]);
    assert!(effects.is_empty());
    assert_eq!(view.state(), &next);
    // Its own write, echoed: no change either.
    let (effects, _) = view.apply(&[put("/p/mesh", writes[0].value.as_deref().unwrap(), 9)]);
    assert!(effects.is_empty());
    // Copies come and go; an unreadable record is reported, not taken.
    let v = CopyValue {
        addr: "127.0.0.1:7001".parse().unwrap(),
        healthy: false,
        ttl_ms: 2000,
        admin: None,
        labels: Default::default(),
    };
    let key = l.key(&Key::Copy {
        service: "b".into(),
        lease: 77,
    });
    let (effects, _) = view.apply(&[put(&key, &v.encode(), 11)]);
    assert_eq!(
        effects,
        [Effect::CopyPut {
            service: "b".into(),
            lease: 77,
            value: v
        }]
    );
    let (effects, _) = view.apply(&[Change {
        key: key.clone(),
        value: None,
        revision: 12,
    }]);
    assert_eq!(effects, [Effect::CopyGone { lease: 77 }]);
    let (effects, problems) = view.apply(&[put(&key, b"nonsense", 13)]);
    assert!(effects.is_empty());
    assert_eq!(problems.len(), 1);
    assert_eq!(view.revision(), 13, "versions follow the revision");
    // A state record that does not decode keeps the state before it.
    let (effects, problems) = view.apply(&[put("/p/mesh", b"{", 14)]);
    assert!(effects.is_empty());
    assert!(problems[0].contains("/p/mesh"), "{problems:?}");
    assert_eq!(view.state(), &next);
}

#[test]
fn a_full_read_after_a_broken_watch_finds_what_was_deleted() {
    let l = Layout::new("/p");
    let mut view = View::new(l.clone());
    let writes = view.plan(&state());
    view.committed(&writes, state(), 3);
    let present: std::collections::BTreeSet<&str> = [
        "/p/mesh",
        "/p/secret/ca",
        "/p/secret/admin-token",
        "/p/secret/tokens/a",
    ]
    .into();
    let gone = view.missing(&present, 20);
    assert_eq!(
        gone,
        [Change {
            key: "/p/secret/tokens/b".into(),
            value: None,
            revision: 20
        }]
    );
}

#[test]
fn a_proxys_record_is_keyed_by_service_name_and_the_writing_replicas_lease() {
    let l = Layout::new("/p");
    for (proxy, segment) in [
        ("b@127.0.0.1:7001", "b@127.0.0.1:7001"),
        ("", "%"),
        ("a/b%c", "a%2Fb%25c"),
        ("%", "%25"),
    ] {
        let key = Key::Proxy {
            service: "b".into(),
            proxy: proxy.into(),
            lease: 0xab,
        };
        let text = l.key(&key);
        assert_eq!(text, format!("/p/proxies/b/{segment}/00000000000000ab"));
        assert_eq!(l.parse(&text), Some(key), "{text}");
    }
    for other in [
        "/p/proxies/b/x",
        "/p/proxies/b/x/12",
        "/p/proxies//x/00000000000000ab",
        "/p/proxies/b//00000000000000ab",
        "/p/proxies/b/x/00000000000000ab/more",
        "/p/proxies/b/a%2Gb/00000000000000ab",
        "/p/proxies/b/a%2/00000000000000ab",
    ] {
        assert_eq!(l.parse(other), None, "{other}");
    }
    let v = ProxyValue {
        replica: "127.0.0.1:7900".into(),
        connected: true,
        last_sent: 40,
        ack: Some(AckValue {
            version: 40,
            accepted: false,
            reason: "needs a restart".into(),
            at_unix_ms: 1_700_000_000_000,
        }),
        cert_not_after_unix: Some(1_700_086_400),
        cert_issued: Some(2),
        cert_in_force: Some(1),
        bundle_confirmed: 38,
        admin: Some("127.0.0.1:9901".parse().unwrap()),
    };
    assert_eq!(ProxyValue::decode(&v.encode()), Some(v));
    // What an older or newer replica may leave out reads as unknown.
    let sparse = ProxyValue::decode(br#"{"replica":"r","connected":false}"#).unwrap();
    assert_eq!(sparse.ack, None);
    assert_eq!(sparse.bundle_confirmed, 0);
    assert_eq!(ProxyValue::decode(b"[]"), None);
    // Proxies' records are not state: the state's keys ignore them.
    let mut kvs = encode_state(&l, &state());
    kvs.insert("/p/proxies/b/x/00000000000000ab".into(), b"{}".to_vec());
    assert_eq!(decode_state(&l, &kvs).unwrap(), state());
}

#[test]
fn the_view_reports_proxies_records_as_they_come_and_go() {
    let l = Layout::new("/p");
    let mut view = View::new(l.clone());
    let key = l.key(&Key::Proxy {
        service: "a".into(),
        proxy: "a-0".into(),
        lease: 5,
    });
    let v = ProxyValue {
        replica: "127.0.0.1:7901".into(),
        connected: true,
        ..ProxyValue::default()
    };
    let (effects, problems) = view.apply(&[put(&key, &v.encode(), 3)]);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        effects,
        [Effect::ProxyPut {
            service: "a".into(),
            proxy: "a-0".into(),
            lease: 5,
            value: v
        }]
    );
    let (effects, _) = view.apply(&[Change {
        key: key.clone(),
        value: None,
        revision: 4,
    }]);
    assert_eq!(
        effects,
        [Effect::ProxyGone {
            service: "a".into(),
            proxy: "a-0".into(),
            lease: 5
        }]
    );
    let (effects, problems) = view.apply(&[put(&key, b"nonsense", 5)]);
    assert!(effects.is_empty());
    assert!(problems[0].contains("not a proxy's record"), "{problems:?}");
    assert_eq!(view.revision(), 5);
    // Not state: a full read never lists them as missing state keys.
    assert!(view.missing(&Default::default(), 9).is_empty());
}

#[test]
fn the_view_knows_when_each_state_key_last_changed() {
    let l = Layout::new("/p");
    let mut view = View::new(l.clone());
    assert_eq!(view.modified(&Key::Ca), 0, "never seen");
    let writes = view.plan(&state());
    view.committed(&writes, state(), 4);
    assert_eq!(view.modified(&Key::Ca), 4);
    // A later batch moves the view on; the CA's revision stays where the CA changed.
    let mut next = state();
    next.ca_generation = 3;
    let doc = encode_state(&l, &next);
    let mesh = l.key(&Key::Mesh);
    let (effects, _) = view.apply(&[
        put(&l.key(&Key::Ca), &doc[&l.key(&Key::Ca)], 8),
        put(
            &mesh,
            b"{\"text\":\"\",\"version\":9,\"source\":\"x\",\"applied_unix_ms\":0}",
            9,
        ),
    ]);
    assert_eq!(effects, [Effect::State]);
    assert_eq!((view.modified(&Key::Ca), view.revision()), (8, 9));
}

#[test]
fn etcds_means_tls() {
    let spec = EtcdSpec::parse("etcds://127.0.0.1:2379/p").unwrap();
    assert!(spec.tls);
    assert_eq!(spec.url(), "etcds://127.0.0.1:2379/p");
    assert!(!EtcdSpec::parse("etcd://127.0.0.1:2379").unwrap().tls);
}

mod sealed;
