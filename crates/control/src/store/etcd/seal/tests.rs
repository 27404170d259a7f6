use super::*;

fn key(byte: u8) -> StoreKey {
    StoreKey::parse(&[byte; KEY_LEN]).unwrap()
}

fn keys(byte: u8) -> Keys {
    Keys {
        current: key(byte),
        previous: None,
    }
}

const AT: &str = "/hopwise/secret/tokens/pricing";

#[test]
fn a_sealed_value_opens_with_its_key_and_shows_nothing_of_the_secret() {
    let k = keys(7);
    let sealed = k.seal(AT, b"hopwise-join-0123").unwrap();
    let text = String::from_utf8(sealed.clone()).unwrap();
    assert!(text.starts_with("hopwise-sealed:1:"), "{text}");
    assert!(!text.contains("hopwise-join"), "{text}");
    assert!(is_sealed(&sealed));
    assert_eq!(
        k.open(AT, &sealed).unwrap(),
        (b"hopwise-join-0123".to_vec(), true)
    );
    // A fresh nonce each time: the same secret never reads the same twice.
    assert_ne!(k.seal(AT, b"hopwise-join-0123").unwrap(), sealed);
}

#[test]
fn a_value_moved_to_another_key_or_changed_does_not_open() {
    let k = keys(7);
    let sealed = k.seal(AT, b"token").unwrap();
    let moved = k.open("/hopwise/secret/admin-token", &sealed).unwrap_err();
    assert!(matches!(moved, SealError::Damaged(_)), "{moved:?}");
    let mut flipped = sealed.clone();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
    assert!(matches!(k.open(AT, &flipped), Err(SealError::Damaged(_))));
    // Relabelled with another key's id: refused as that key's, and never opened.
    let other = keys(8);
    let text = String::from_utf8(sealed).unwrap();
    let relabelled = text.replace(k.current.id(), other.current.id());
    assert!(matches!(
        other.open(AT, relabelled.as_bytes()),
        Err(SealError::Damaged(_))
    ));
}

#[test]
fn another_key_is_named_not_called_corrupt() {
    let sealed = keys(1).seal(AT, b"token").unwrap();
    let err = keys(2).open(AT, &sealed).unwrap_err();
    let SealError::OtherKey { found, have } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(found, key(1).id());
    assert_eq!(have, key(2).id());
    assert!(err.to_string().contains("--store-previous-key"), "{err}");
    let none = no_key(&sealed).to_string();
    assert!(none.contains("no --store-key"), "{none}");
    assert!(none.contains(key(1).id()), "{none}");
}

#[test]
fn the_previous_key_opens_and_says_the_value_is_stale() {
    let sealed = keys(1).seal(AT, b"token").unwrap();
    let rotated = Keys {
        current: key(2),
        previous: Some(key(1)),
    };
    assert_eq!(
        rotated.open(AT, &sealed).unwrap(),
        (b"token".to_vec(), false)
    );
}

#[test]
fn key_files_are_32_bytes_raw_or_hex() {
    let hex = "ab".repeat(32);
    let from_hex = StoreKey::parse(format!("{hex}\n").as_bytes()).unwrap();
    assert_eq!(from_hex.id(), StoreKey::parse(&[0xab; 32]).unwrap().id());
    assert_eq!(from_hex.id().len(), 16);
    for bad in [
        &b""[..],
        b"short",
        &[0u8; 31],
        &[0u8; 33],
        "zz".repeat(32).as_bytes(),
    ] {
        assert!(
            matches!(StoreKey::parse(bad), Err(SealError::KeyLength(_))),
            "{bad:?}"
        );
    }
    // The id is not the key, and Debug shows only the id.
    assert!(!from_hex.id().contains("abab"));
    assert_eq!(
        format!("{from_hex:?}"),
        format!("StoreKey({})", from_hex.id())
    );
}

#[test]
fn garbage_is_malformed_never_a_panic() {
    let k = keys(3);
    for bad in [
        &b"hopwise-sealed:1:"[..],
        b"hopwise-sealed:1:abc",
        b"hopwise-sealed:1:abc:zz",
        b"hopwise-sealed:1:abc:+1",
        b"\xff\xfe",
    ] {
        assert!(k.open(AT, bad).is_err(), "{bad:?}");
    }
    let short = format!("hopwise-sealed:1:{}:00ff", k.current.id());
    assert_eq!(k.open(AT, short.as_bytes()), Err(SealError::Malformed));
}
