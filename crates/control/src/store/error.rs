//! Why the store could not be opened or written: every variant names the file, the flag or the
//! etcd key at fault.

use std::path::{Path, PathBuf};

use super::OLDEST_FORMAT;

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

pub(super) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}
