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

use std::path::{Path, PathBuf};

mod error;
pub mod etcd;
mod file;
mod state;

pub use error::StoreError;
pub use file::{FileStore, parse, write_atomic};
pub use state::{CaState, MeshState, Rotation, Secret, State};

use file::{write_bundle, write_tokens};

/// The state file's name inside the state directory.
pub const STATE_FILE: &str = "state.json";
/// The trust bundle written for people and scripts.
pub const BUNDLE_FILE: &str = "ca.pem";
/// The directory of per-service token files.
pub const TOKENS_DIR: &str = "tokens";
/// The admin token's file.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";
pub(super) const LOCK_FILE: &str = "lock";
/// The version of the state file's layout this build writes. Format 2 added the CA's
/// generation and a rotation in progress; both have defaults, so a format-1 file still loads
/// (as generation 1, no rotation) and is written back as format 2.
pub const FORMAT: u32 = 2;
/// The oldest layout this build reads.
pub const OLDEST_FORMAT: u32 = 1;

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

#[cfg(test)]
mod tests;
