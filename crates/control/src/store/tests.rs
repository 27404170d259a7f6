//! The embedded store on a temporary directory: a restart, owner-only secrets, corrupt and
//! older or newer files, the lock, and `Debug` without secrets.

use std::collections::BTreeMap;

use super::*;

fn sample() -> State {
    State {
        format: FORMAT,
        starts: 3,
        ca: Some(CaState::Generated {
            cert_pem: "-----BEGIN CERTIFICATE-----\n...".into(),
            key_pem: Secret("key".into()),
        }),
        ca_generation: 2,
        rotation: Some(Rotation::Reissued {
            previous_cert_pem: "-----BEGIN CERTIFICATE-----\nold".into(),
            at_unix_ms: 1_700_000_000_000,
        }),
        tokens: BTreeMap::from([
            ("a".to_owned(), Secret("hopwise-join-aa".into())),
            ("b".to_owned(), Secret("hopwise-join-bb".into())),
        ]),
        mesh: Some(MeshState {
            text: "services: { a: {} }\n".into(),
            version: 4,
            source: "mesh.yaml".into(),
            applied_unix_ms: 1_700_000_000_000,
        }),
        admin_token: Some(Secret("hopwise-admin-cc".into())),
    }
}

#[test]
fn state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    {
        let mut store = Store::open(&state_dir).unwrap();
        assert_eq!(
            store.state(),
            &State::default(),
            "a new directory starts empty"
        );
        store.commit(sample()).unwrap();
        store.write_tokens().unwrap();
        store.write_bundle("bundle").unwrap();
    }
    let store = Store::open(&state_dir).unwrap();
    assert_eq!(store.state(), &sample());
    assert_eq!(
        std::fs::read_to_string(state_dir.join("tokens/a")).unwrap(),
        "hopwise-join-aa\n"
    );
    assert_eq!(
        std::fs::read_to_string(state_dir.join("ca.pem")).unwrap(),
        "bundle"
    );
    // No temporary file is left behind.
    let names: Vec<String> = std::fs::read_dir(&state_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

#[cfg(unix)]
#[test]
fn secrets_are_readable_by_the_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    store.commit(sample()).unwrap();
    store.write_tokens().unwrap();
    store.write_bundle("bundle").unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("state.json")), 0o600);
    assert_eq!(mode(&dir.path().join("tokens")), 0o700);
    assert_eq!(mode(&dir.path().join("tokens/a")), 0o600);
    assert_eq!(mode(&dir.path().join("ca.pem")), 0o644);
}

#[test]
fn a_corrupt_file_is_a_clear_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STATE_FILE);
    for bad in [
        &b"{\"format\": 1, \"starts\": "[..],
        b"",
        b"\x00\xff garbage",
        b"[1, 2, 3]",
        b"{\"format\": 1, \"starts\": \"many\"}",
    ] {
        std::fs::write(&path, bad).unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("state.json"), "{text}");
        assert!(text.contains("not a hopwise state file"), "{text}");
    }
    // A truncated copy of a real state is corrupt too.
    let good = serde_json::to_vec(&sample()).unwrap();
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    assert!(matches!(
        Store::open(dir.path()),
        Err(StoreError::Corrupt { .. })
    ));
}

/// A state file exactly as the first layout (format 1) wrote it: no CA generation, no
/// rotation. It loads as generation 1 with no rotation in progress.
#[test]
fn a_format_1_file_still_loads() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = r#"{
  "format": 1,
  "starts": 4,
  "ca": { "kind": "generated", "cert_pem": "CERT", "key_pem": "KEY" },
  "tokens": { "a": "hopwise-join-aa" },
  "mesh": { "text": "services: { a: {} }\n", "version": 2, "source": "m.yaml", "applied_unix_ms": 5 }
}"#;
    std::fs::write(dir.path().join(STATE_FILE), v1).unwrap();
    let store = Store::open(dir.path()).unwrap();
    let state = store.state();
    assert_eq!(state.format, 1);
    assert_eq!(state.starts, 4);
    assert_eq!(state.ca_generation, 1);
    assert_eq!(state.rotation, None);
    assert_eq!(state.tokens["a"].0, "hopwise-join-aa");
    // Written back in the current layout, it reads the same.
    let mut store = store;
    let next = State {
        format: FORMAT,
        ..store.state().clone()
    };
    store.commit(next.clone()).unwrap();
    drop(store);
    assert_eq!(Store::open(dir.path()).unwrap().state(), &next);
    let text = std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap();
    assert!(text.contains("\"format\": 2"), "{text}");
    assert!(text.contains("\"ca_generation\": 1"), "{text}");
    assert!(!text.contains("rotation"), "no rotation, no field: {text}");
}

#[test]
fn a_rotation_in_progress_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = sample();
    state.rotation = Some(Rotation::Added {
        next_cert_pem: "NEXT".into(),
        next_key_pem: Secret("NEXT-KEY".into()),
        at_unix_ms: 7,
    });
    Store::open(dir.path())
        .unwrap()
        .commit(state.clone())
        .unwrap();
    assert_eq!(Store::open(dir.path()).unwrap().state(), &state);
    let text = std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap();
    assert!(text.contains("\"stage\": \"added\""), "{text}");
    assert!(!format!("{state:?}").contains("NEXT-KEY"));
}

#[test]
fn a_newer_format_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(STATE_FILE), "{\"format\": 9}").unwrap();
    let err = Store::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("format 9"), "{err}");
}

#[test]
fn a_second_control_plane_cannot_open_the_same_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = Store::open(dir.path()).unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    drop(first);
    Store::open(dir.path()).unwrap();
}

#[test]
fn an_unwritable_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let err = Store::open(&file.join("state")).unwrap_err().to_string();
    assert!(err.contains("plain-file"), "{err}");
}

#[test]
fn debug_output_shows_no_secret() {
    let text = format!("{:?}", sample());
    assert!(!text.contains("hopwise-join-aa"), "{text}");
    assert!(!text.contains("\"key\""), "{text}");
}
