//! The embedded store: everything the control plane must not lose across a restart — the CA,
//! the join tokens, the mesh file in force and its version, and how many times it has started —
//! in one JSON file, `<state>/state.json`, readable by its owner only (it holds the CA's private
//! key). Every change is written whole to a temporary file, flushed to disk, renamed over the old
//! file and the directory flushed, so a crash leaves either the old state or the new one, never
//! half of each. A lock file keeps a second control plane off the same directory.
//!
//! Beside it, for people and for `hopwise up`: `<state>/ca.pem` (the trust bundle, which clients
//! of the control port trust), `<state>/tokens/<service>` (each service's join token, owner-only)
//! and `<state>/admin-token` (the token of `apply`, `rotate-ca` and `status`, owner-only).
//!
//! Leases are not stored: they are soft state that proxies renew every few seconds, and after a
//! restart they register again.
//!
//! Tokens are stored as they are, not hashed: the same file holds the CA's private key, which
//! can mint any identity and is a stronger secret than every token together, so hashing would
//! protect nothing more; keeping them lets the control plane rewrite `tokens/<service>` on every
//! start.
//!
//! [`Store`] is the plane's one door to persistence: the embedded file ([`FileStore`], the
//! default) or etcd shared by several replicas ([`etcd::EtcdStore`], `--store etcd://…`), where
//! the secrets are sealed with the replicas' store key ([`etcd::seal`]).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod etcd;

/// The state file's name inside the state directory.
pub const STATE_FILE: &str = "state.json";
/// The trust bundle written for people and scripts.
pub const BUNDLE_FILE: &str = "ca.pem";
/// The directory of per-service token files.
pub const TOKENS_DIR: &str = "tokens";
/// The admin token's file.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";
const LOCK_FILE: &str = "lock";
/// The version of the state file's layout this build writes. Format 2 added the CA's
/// generation and a rotation in progress; both have defaults, so a format-1 file still loads
/// (as generation 1, no rotation) and is written back as format 2.
pub const FORMAT: u32 = 2;
/// The oldest layout this build reads.
pub const OLDEST_FORMAT: u32 = 1;

/// Why the store could not be opened or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a hopwise state file ({reason}); move it away to start afresh")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "{path} has state format {found}, this hopwise reads formats {OLDEST_FORMAT} to {supported}: use the hopwise that wrote it"
    )]
    Format {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("{path} is locked: another control plane is running on this state directory")]
    Locked { path: PathBuf },
    #[error("etcd at {url}: {reason}")]
    Etcd { url: String, reason: String },
    #[error(
        "etcd at {url}: another replica changed {} at the same time; nothing was written, try again",
        .keys.join(", ")
    )]
    Conflict { url: String, keys: Vec<String> },
    /// A secret in etcd that this replica's store key cannot open (or seal).
    #[error("etcd at {url}: {key} {reason}")]
    Sealed {
        url: String,
        key: String,
        reason: String,
    },
    /// A file of secrets for the shared store (`--store-key`, `--etcd-password-file`, …)
    /// that cannot be used.
    #[error("{flag} {path}: {reason}")]
    SecretFile {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// `--store etcd://…` asked of a build without the `etcd` feature.
    #[error(
        "--store {url}: this build of hopwise has no etcd support; rebuild with `cargo build --features etcd` (needs `protoc`: `apt-get install protobuf-compiler`)"
    )]
    NoEtcd { url: String },
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

/// A secret string: serialised as itself, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

impl AsRef<str> for Secret {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Where the CA came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CaState {
    /// Generated by the control plane on its first start; the key lives here.
    Generated { cert_pem: String, key_pem: Secret },
    /// Supplied by the operator: the key stays in the operator's file and is read on every
    /// start; the certificate is kept to notice a different CA being passed later.
    Supplied {
        cert_path: PathBuf,
        key_path: PathBuf,
        cert_pem: String,
    },
}

/// The mesh file in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshState {
    pub text: String,
    /// 1 for the first file, +1 per applied change.
    pub version: u64,
    /// Where it came from (a file name, or `<applied>`).
    pub source: String,
    /// Milliseconds since the Unix epoch when it was applied.
    pub applied_unix_ms: i64,
}

/// A CA rotation in progress (`hopwise control rotate-ca`), between its stages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "kebab-case")]
pub enum Rotation {
    /// After `add`: a new root, generated here, is trusted after the signing one (`ca`), which
    /// still signs. The bundle is [ca, next].
    Added {
        next_cert_pem: String,
        next_key_pem: Secret,
        /// Milliseconds since the Unix epoch.
        at_unix_ms: i64,
    },
    /// After `reissue`: the new root is `ca` and signs; the old one is still trusted until
    /// `retire`. The bundle is [previous, ca].
    Reissued {
        previous_cert_pem: String,
        at_unix_ms: i64,
    },
}

fn first_generation() -> u64 {
    1
}

/// Everything persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub format: u32,
    /// Control-plane starts on this state so far; versions and lease ids carry it, so they
    /// are unique across restarts.
    pub starts: u64,
    /// The CA that signs.
    pub ca: Option<CaState>,
    /// The signing CA's generation: 1 for the first root, +1 at each rotation's `reissue`
    /// (format 2; absent in format 1, which means 1).
    #[serde(default = "first_generation")]
    pub ca_generation: u64,
    /// A CA rotation in progress (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<Rotation>,
    /// Service → its join token.
    pub tokens: BTreeMap<String, Secret>,
    pub mesh: Option<MeshState>,
    /// The admin token (made at the first start of a build that has it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<Secret>,
}

impl Default for State {
    fn default() -> Self {
        State {
            format: FORMAT,
            starts: 0,
            ca: None,
            ca_generation: first_generation(),
            rotation: None,
            tokens: BTreeMap::new(),
            mesh: None,
            admin_token: None,
        }
    }
}

/// Where the state is kept: the embedded file, or etcd shared by replicas.
// One per process, never moved around: the etcd variant's size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Store {
    File(FileStore),
    Etcd(etcd::EtcdStore),
}

impl Store {
    /// The embedded store in `dir` (see [`FileStore::open`]).
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        FileStore::open(dir).map(Store::File)
    }

    /// The local directory: the state file (embedded), token files and `ca.pem`.
    pub fn dir(&self) -> &Path {
        match self {
            Store::File(s) => s.dir(),
            Store::Etcd(s) => s.dir(),
        }
    }

    /// Where the state is, for messages: `<dir>/state.json` or `etcd://…/prefix`.
    pub fn location(&self) -> String {
        match self {
            Store::File(s) => s.path().display().to_string(),
            Store::Etcd(s) => s.spec().url(),
        }
    }

    /// The state as last written (or, with etcd, as last seen).
    pub fn state(&self) -> &State {
        match self {
            Store::File(s) => s.state(),
            Store::Etcd(s) => s.view().state(),
        }
    }

    /// Writes `next` durably, then makes it the current state; on error nothing changed.
    /// Returns the etcd revision of the write (`None`: embedded, or nothing to write). With
    /// etcd this blocks: call it off the async threads.
    pub fn commit(&mut self, next: State) -> Result<Option<u64>, StoreError> {
        match self {
            Store::File(s) => s.commit(next).map(|()| None),
            Store::Etcd(s) => s.commit(next),
        }
    }

    /// Writes `<dir>/tokens/<service>` for every token. Returns the files written.
    pub fn write_tokens(&self) -> Result<Vec<PathBuf>, StoreError> {
        write_tokens(self.dir(), self.state())
    }

    /// Writes `<dir>/ca.pem`, the trust bundle (public).
    pub fn write_bundle(&self, pem: &str) -> Result<PathBuf, StoreError> {
        write_bundle(self.dir(), pem)
    }

    /// Writes `<dir>/admin-token` (owner-only), if the state has one. Returns the file.
    pub fn write_admin_token(&self) -> Result<Option<PathBuf>, StoreError> {
        let Some(token) = &self.state().admin_token else {
            return Ok(None);
        };
        let path = self.dir().join(ADMIN_TOKEN_FILE);
        write_atomic(&path, format!("{}\n", token.0).as_bytes(), 0o600)?;
        Ok(Some(path))
    }

    /// The etcd store, when replicas share one.
    pub fn etcd(&self) -> Option<&etcd::EtcdStore> {
        match self {
            Store::File(_) => None,
            Store::Etcd(s) => Some(s),
        }
    }

    pub fn etcd_mut(&mut self) -> Option<&mut etcd::EtcdStore> {
        match self {
            Store::File(_) => None,
            Store::Etcd(s) => Some(s),
        }
    }
}

/// Writes `<dir>/tokens/<service>` (owner-only) for every token in `state`.
fn write_tokens(dir: &Path, state: &State) -> Result<Vec<PathBuf>, StoreError> {
    let dir = dir.join(TOKENS_DIR);
    create_private_dir(&dir)?;
    let mut written = Vec::new();
    for (service, token) in &state.tokens {
        let path = dir.join(service);
        write_atomic(&path, format!("{}\n", token.0).as_bytes(), 0o600)?;
        written.push(path);
    }
    Ok(written)
}

fn write_bundle(dir: &Path, pem: &str) -> Result<PathBuf, StoreError> {
    let path = dir.join(BUNDLE_FILE);
    write_atomic(&path, pem.as_bytes(), 0o644)?;
    Ok(path)
}

/// The embedded store: the state as last written, and the lock on its directory.
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    state: State,
    _lock: File,
}

impl FileStore {
    /// Opens (creating if needed) the state directory `dir` and reads its state; a directory
    /// without a state file starts empty. Takes the directory's lock.
    pub fn open(dir: &Path) -> Result<FileStore, StoreError> {
        create_private_dir(dir)?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io("open", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked { path: lock_path });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io("lock", &lock_path)(e)),
        }
        let path = dir.join(STATE_FILE);
        let state = match std::fs::read(&path) {
            Ok(bytes) => parse(&path, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(io("read", &path)(e)),
        };
        Ok(FileStore {
            dir: dir.to_owned(),
            state,
            _lock: lock,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<state>/state.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The state as last written.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Writes `next` durably, then makes it the current state. On error nothing changed: the
    /// file still holds the old state, and so does memory.
    pub fn commit(&mut self, next: State) -> Result<(), StoreError> {
        let path = self.path();
        let text = serde_json::to_vec_pretty(&next).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            reason: format!("cannot be serialised: {e}"),
        })?;
        write_atomic(&path, &text, 0o600)?;
        self.state = next;
        Ok(())
    }

    /// Writes `<state>/tokens/<service>` (owner-only) for every token in the state. Returns the
    /// files written.
    pub fn write_tokens(&self) -> Result<Vec<PathBuf>, StoreError> {
        write_tokens(&self.dir, &self.state)
    }

    /// Writes `<state>/ca.pem`, the trust bundle (public).
    pub fn write_bundle(&self, pem: &str) -> Result<PathBuf, StoreError> {
        write_bundle(&self.dir, pem)
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<State, StoreError> {
    // The format is read first, so a newer layout is reported as such, not as corruption.
    #[derive(Deserialize)]
    struct Head {
        format: u32,
    }
    let corrupt = |e: serde_json::Error| StoreError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let head: Head = serde_json::from_slice(bytes).map_err(corrupt)?;
    if !(OLDEST_FORMAT..=FORMAT).contains(&head.format) {
        return Err(StoreError::Format {
            path: path.to_owned(),
            found: head.format,
            supported: FORMAT,
        });
    }
    serde_json::from_slice(bytes).map_err(corrupt)
}

fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(io("create the directory", dir))
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the new one: a temporary
/// file in the same directory, created with `mode`, flushed to disk, renamed over `path`, then
/// the directory flushed.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StoreError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(&tmp).map_err(io("create", &tmp))?;
    // `mode` applies only when the file is created: a leftover temporary keeps its own bits.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io("set the permissions of", &tmp))?;
    }
    file.write_all(bytes).map_err(io("write", &tmp))?;
    file.sync_all().map_err(io("flush", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io("replace", path))?;
    #[cfg(unix)]
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io("flush the directory", &dir))?;
    Ok(())
}

#[cfg(test)]
mod tests {
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
}
