//! The embedded store: `<state>/state.json` written whole and atomically (a temporary file,
//! flushed, renamed over the old one, the directory flushed), the lock that keeps a second
//! control plane off the directory, and the files beside it (token files, `ca.pem`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::io;
use super::{
    BUNDLE_FILE, FORMAT, LOCK_FILE, OLDEST_FORMAT, STATE_FILE, State, StoreError, TOKENS_DIR,
};

/// Writes `<dir>/tokens/<service>` (owner-only) for every token in `state`.
pub(super) fn write_tokens(dir: &Path, state: &State) -> Result<Vec<PathBuf>, StoreError> {
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

pub(super) fn write_bundle(dir: &Path, pem: &str) -> Result<PathBuf, StoreError> {
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

/// The state a `state.json` holds (`bytes`, read from `path`, which errors name): a format this
/// build reads ([`StoreError::Format`] otherwise, so a newer file is not called corrupt), then
/// the state ([`StoreError::Corrupt`] when it does not read). Pure: what [`FileStore::open`]
/// runs on the file, and what the `stored_state` fuzz target feeds.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<State, StoreError> {
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

pub(super) fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
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
