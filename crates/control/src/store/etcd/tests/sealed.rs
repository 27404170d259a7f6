//! The view with a store key: what etcd is sent, what it can be made to take back.

use super::*;
use crate::store::etcd::seal::{SealError, StoreKey};

fn keys(byte: u8) -> Keys {
    Keys {
        current: StoreKey::parse(&[byte; 32]).unwrap(),
        previous: None,
    }
}

/// The changes that etcd would report after `view` wrote `state` (at `revision`).
fn as_stored(view: &View, state: &State, revision: i64) -> Vec<Change> {
    view.plan(state)
        .iter()
        .map(|w| put(&w.key, &view.stored(w).unwrap().unwrap(), revision))
        .collect()
}

const SECRETS: [&str; 5] = [
    "KEY",
    "NEXT-KEY",
    "hopwise-join-aa",
    "hopwise-join-bb",
    "hopwise-admin-cc",
];

#[test]
fn secrets_leave_sealed_and_come_back_whole() {
    let l = Layout::new("/p");
    let writer = View::sealed(l.clone(), keys(1));
    let stored = as_stored(&writer, &state(), 5);
    for c in &stored {
        let text = String::from_utf8_lossy(c.value.as_deref().unwrap()).into_owned();
        let secret = l.is_secret(&c.key);
        assert_eq!(
            text.starts_with("hopwise-sealed:1:"),
            secret,
            "{}: {text}",
            c.key
        );
        for s in SECRETS {
            assert!(!text.contains(s), "{} holds {s}: {text}", c.key);
        }
    }
    let mut reader = View::sealed(l.clone(), keys(1));
    let (effects, problems) = reader.apply(&stored);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(effects, [Effect::State]);
    assert_eq!(reader.state(), &state());
    // Opened values are compared, not ciphertexts: nothing to write, nothing to seal again.
    assert!(reader.plan(&state()).is_empty());
    assert!(reader.reseal().is_empty());
}

#[test]
fn another_key_or_none_is_refused_and_the_state_not_taken() {
    let l = Layout::new("/p");
    let stored = as_stored(&View::sealed(l.clone(), keys(1)), &state(), 5);
    let mut other = View::sealed(l.clone(), keys(2));
    let (_, problems) = other.apply(&stored);
    assert!(!problems.is_empty());
    let (_, why) = other.unreadable().unwrap();
    assert!(matches!(why, SealError::OtherKey { .. }), "{why:?}");
    assert_eq!(other.state().ca, None, "no secret taken");
    assert_eq!(other.state().tokens.len(), 0);
    let mut none = View::new(l);
    none.apply(&stored);
    assert!(matches!(
        none.unreadable(),
        Some((_, SealError::NoKey { .. }))
    ));
}

#[test]
fn a_sealed_value_moved_to_another_key_does_not_open() {
    let l = Layout::new("/p");
    let stored = as_stored(&View::sealed(l.clone(), keys(1)), &state(), 5);
    let token_a = stored
        .iter()
        .find(|c| c.key == "/p/secret/tokens/a")
        .unwrap();
    let mut view = View::sealed(l, keys(1));
    view.apply(&[put(
        "/p/secret/tokens/b",
        token_a.value.as_deref().unwrap(),
        6,
    )]);
    let (key, why) = view.unreadable().unwrap();
    assert_eq!(key, "/p/secret/tokens/b");
    assert!(matches!(why, SealError::Damaged(_)), "{why:?}");
    assert!(view.state().tokens.is_empty());
}

#[test]
fn plaintext_secrets_are_taken_in_and_sealed_again() {
    let l = Layout::new("/p");
    // As a replica before sealing wrote them.
    let plain = View::new(l.clone());
    let stored = as_stored(&plain, &state(), 5);
    let mut view = View::sealed(l.clone(), keys(1));
    let (_, problems) = view.apply(&stored);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(view.state(), &state());
    let reseal = view.reseal();
    let mut names: Vec<&str> = reseal.iter().map(|w| w.key.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "/p/secret/admin-token",
            "/p/secret/ca",
            "/p/secret/tokens/a",
            "/p/secret/tokens/b"
        ]
    );
    assert!(
        reseal.iter().all(|w| w.expect == 5),
        "guarded by what was read"
    );
    let sealed: Vec<Change> = reseal
        .iter()
        .map(|w| put(&w.key, &view.stored(w).unwrap().unwrap(), 6))
        .collect();
    view.committed(&reseal, state(), 6);
    assert!(view.reseal().is_empty());
    // Another replica with the key reads what was sealed.
    let mut other = View::sealed(l, keys(1));
    other.apply(&stored);
    other.apply(&sealed);
    assert_eq!(other.state(), &state());
    assert!(other.reseal().is_empty());
}

#[test]
fn the_previous_key_opens_and_the_current_one_seals_again() {
    let l = Layout::new("/p");
    let stored = as_stored(&View::sealed(l.clone(), keys(1)), &state(), 5);
    let rotated = Keys {
        current: keys(2).current,
        previous: Some(keys(1).current),
    };
    let mut view = View::sealed(l, rotated);
    let (_, problems) = view.apply(&stored);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(view.state(), &state());
    assert_eq!(view.reseal().len(), 4);
}
