//! The control plane's stored state as it reads it back at start: any bytes as the embedded
//! store's `state.json` (`hopwise_control::store::parse`), as the value of each of the etcd
//! store's state keys (`store::etcd::decode_state`), and as a sealed value at a secret key
//! (`store::etcd::Keys::open`, a fixed store key). Only someone who can write the state
//! directory or etcd reaches these; a replica must still refuse, not panic. Never a panic, and:
//! - `state.json` read is of a format this build reads, and what `FileStore::commit` writes of
//!   it (pretty JSON) reads back as the same state; a format error only for a `format` outside
//!   the range read;
//! - a state read from etcd's keys, written back with `encode_state`, reads back the same;
//! - a sealed value opens only to what sealing it again opens to, at that key alone; the bytes
//!   sealed open back as they were, and not at another key.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;

use hopwise_control::store::etcd::seal::{StoreKey, no_key};
use hopwise_control::store::etcd::{Key, Keys, Layout, decode_state, encode_state};
use hopwise_control::store::{FORMAT, OLDEST_FORMAT, StoreError, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    state_file(data);
    etcd_values(data);
    sealed(data);
});

fn state_file(data: &[u8]) {
    let path = Path::new("/fuzz/state.json");
    match parse(path, data) {
        Ok(state) => {
            assert!((OLDEST_FORMAT..=FORMAT).contains(&state.format));
            let written = serde_json::to_vec_pretty(&state).expect("a state read is written");
            assert_eq!(
                parse(path, &written).expect("what was written reads"),
                state
            );
        }
        Err(StoreError::Format { found, .. }) => {
            assert!(!(OLDEST_FORMAT..=FORMAT).contains(&found));
        }
        Err(StoreError::Corrupt { reason, .. }) => assert!(!reason.is_empty()),
        Err(e) => panic!("{e}"),
    }
}

fn etcd_values(data: &[u8]) {
    let layout = Layout::new("/hopwise");
    for key in [
        Key::Ca,
        Key::Mesh,
        Key::Token("pricing".into()),
        Key::AdminToken,
    ] {
        let kvs = BTreeMap::from([(layout.key(&key), data.to_vec())]);
        let Ok(state) = decode_state(&layout, &kvs) else {
            continue;
        };
        let again = decode_state(&layout, &encode_state(&layout, &state));
        assert_eq!(again.as_ref(), Ok(&state), "{key:?}");
    }
}

fn sealed(data: &[u8]) {
    let layout = Layout::new("/hopwise");
    let (at, elsewhere) = (
        layout.key(&Key::AdminToken),
        layout.key(&Key::Token("a".into())),
    );
    let keys = Keys {
        current: StoreKey::parse(&[7u8; 32]).expect("a 32-byte key"),
        previous: None,
    };
    let _ = no_key(data);
    if let Ok((plain, _)) = keys.open(&at, data) {
        let again = keys.seal(&at, &plain).expect("sealed");
        assert_eq!(keys.open(&at, &again).expect("opens").0, plain);
        assert!(
            keys.open(&elsewhere, data).is_err(),
            "opened at another key"
        );
    }
    let sealed = keys.seal(&at, data).expect("sealed");
    assert_eq!(keys.open(&at, &sealed), Ok((data.to_vec(), true)));
    assert!(
        keys.open(&elsewhere, &sealed).is_err(),
        "opened at another key"
    );
}
