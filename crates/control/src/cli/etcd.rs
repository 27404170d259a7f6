//! The shared store's flags on `hopwise control`: the store key that seals the secrets in etcd
//! (`--store-key`, and `--store-previous-key` while moving to a new one), TLS to etcd
//! (`etcds://` with `--etcd-ca`, and `--etcd-cert`/`--etcd-key` for a client certificate) and
//! etcd's authentication (`--etcd-user`, `--etcd-password-file`: a password is never an
//! argument, where `ps` would show it). Reads the files — a file of secrets must not be
//! readable by other users — and checks that the flags fit the `--store` address.

use std::path::{Path, PathBuf};

use crate::store::etcd::access::Tls;
use crate::store::etcd::seal::StoreKey;
use crate::store::etcd::{Access, EtcdSpec, Keys};
use crate::store::{Secret, StoreError};

/// How to make a key file, for messages.
const MAKE_KEY: &str = "(umask 077; head -c 32 /dev/urandom > store.key)";

#[derive(Debug, Clone, Default, clap::Args)]
pub struct EtcdArgs {
    /// With --store etcd: the store key (32 random bytes, raw or hex; not readable by other
    /// users) that seals the CA's key and the tokens in etcd. Every replica needs the same one.
    #[arg(long, requires = "store")]
    pub store_key: Option<PathBuf>,
    /// The store key being replaced: secrets sealed with it are opened and sealed again with
    /// --store-key.
    #[arg(long, requires = "store_key")]
    pub store_previous_key: Option<PathBuf>,
    /// With --store etcds://…: the CA bundle (PEM) etcd's certificate must chain to.
    #[arg(long, requires = "store")]
    pub etcd_ca: Option<PathBuf>,
    /// A client certificate (PEM) for etcd's --client-cert-auth. With --etcd-key.
    #[arg(long, requires = "etcd_key")]
    pub etcd_cert: Option<PathBuf>,
    /// The private key (PEM) of --etcd-cert, not readable by other users.
    #[arg(long, requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
    /// The etcd user (etcd's authentication). With --etcd-password-file.
    #[arg(long, requires = "etcd_password_file")]
    pub etcd_user: Option<String>,
    /// The file holding the etcd user's password (one line; not readable by other users).
    #[arg(long, requires = "etcd_user")]
    pub etcd_password_file: Option<PathBuf>,
}

impl EtcdArgs {
    /// The connection's TLS and credentials, and the store keys, for `spec`. Errors name the
    /// flag.
    pub fn resolve(&self, spec: &EtcdSpec) -> Result<(Access, Keys), StoreError> {
        let key_file = self.check(spec).map_err(|reason| StoreError::SecretFile {
            flag: "--store",
            path: PathBuf::from(spec.url()),
            reason,
        })?;
        let current = key(key_file, "--store-key")?;
        let previous = match &self.store_previous_key {
            Some(path) => Some(key(path, "--store-previous-key")?),
            None => None,
        };
        let tls = match &self.etcd_ca {
            None => None,
            Some(ca) => Some(Tls {
                ca_pem: text(&public(ca, "--etcd-ca")?, ca, "--etcd-ca")?,
                client: match (&self.etcd_cert, &self.etcd_key) {
                    (Some(cert), Some(key)) => Some((
                        text(&public(cert, "--etcd-cert")?, cert, "--etcd-cert")?,
                        Secret(text(&private(key, "--etcd-key")?, key, "--etcd-key")?),
                    )),
                    _ => None,
                },
            }),
        };
        let user = match (&self.etcd_user, &self.etcd_password_file) {
            (Some(user), Some(path)) => {
                let flag = "--etcd-password-file";
                let password = text(&private(path, flag)?, path, flag)?;
                let password = password.trim_end_matches(['\n', '\r']).to_owned();
                Some((user.clone(), Secret(password)))
            }
            _ => None,
        };
        Ok((Access { tls, user }, Keys { current, previous }))
    }

    /// Whether the flags fit the address (the files are not read); the store key's file.
    fn check(&self, spec: &EtcdSpec) -> Result<&Path, String> {
        let url = spec.url();
        let Some(key_file) = &self.store_key else {
            return Err(format!(
                "`{url}` needs --store-key FILE: the CA's key and the tokens are sealed with it in etcd; \
                 every replica takes the same file (make one: {MAKE_KEY})"
            ));
        };
        let tls_flags = self.etcd_ca.is_some() || self.etcd_cert.is_some();
        match (spec.tls, tls_flags) {
            (true, _) if self.etcd_ca.is_none() => Err(format!(
                "`{url}` needs --etcd-ca FILE: the CA bundle etcd's certificate chains to"
            )),
            (false, true) => Err(format!(
                "`{url}` is plain HTTP, and --etcd-ca/--etcd-cert are for TLS: write etcds://{}",
                url.trim_start_matches("etcd://")
            )),
            _ => Ok(key_file),
        }
    }
}

fn key(path: &Path, flag: &'static str) -> Result<StoreKey, StoreError> {
    StoreKey::parse(&private(path, flag)?).map_err(|e| StoreError::SecretFile {
        flag,
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn text(bytes: &[u8], path: &Path, flag: &'static str) -> Result<String, StoreError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| StoreError::SecretFile {
        flag,
        path: path.to_owned(),
        reason: "is not text (PEM)".into(),
    })
}

fn public(path: &Path, flag: &'static str) -> Result<Vec<u8>, StoreError> {
    std::fs::read(path).map_err(|e| StoreError::SecretFile {
        flag,
        path: path.to_owned(),
        reason: format!("cannot be read: {e}"),
    })
}

/// A file of secrets: refused when other users may read or write it.
fn private(path: &Path, flag: &'static str) -> Result<Vec<u8>, StoreError> {
    let bytes = public(path, flag)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| StoreError::SecretFile {
                flag,
                path: path.to_owned(),
                reason: format!("cannot be read: {e}"),
            })?
            .permissions()
            .mode();
        if mode & 0o007 != 0 {
            return Err(StoreError::SecretFile {
                flag,
                path: path.to_owned(),
                reason: format!(
                    "other users may read or change it (mode {:04o}): `chmod 600` it",
                    mode & 0o7777
                ),
            });
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> EtcdArgs {
        EtcdArgs {
            store_key: Some("k".into()),
            ..EtcdArgs::default()
        }
    }

    fn spec(text: &str) -> EtcdSpec {
        EtcdSpec::parse(text).unwrap()
    }

    #[test]
    fn the_flags_must_fit_the_address() {
        let plain = spec("etcd://127.0.0.1:2379");
        let tls = spec("etcds://127.0.0.1:2379");
        assert_eq!(args().check(&plain), Ok(Path::new("k")));
        let no_key = EtcdArgs::default().check(&plain).unwrap_err();
        assert!(
            no_key.contains("--store-key") && no_key.contains("urandom"),
            "{no_key}"
        );
        let no_ca = args().check(&tls).unwrap_err();
        assert!(no_ca.contains("--etcd-ca"), "{no_ca}");
        let with_ca = EtcdArgs {
            etcd_ca: Some("ca.pem".into()),
            ..args()
        };
        assert_eq!(with_ca.check(&tls), Ok(Path::new("k")));
        let tls_on_plain = with_ca.check(&plain).unwrap_err();
        assert!(
            tls_on_plain.contains("etcds://127.0.0.1:2379"),
            "{tls_on_plain}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.key");
        std::fs::write(&path, "ab".repeat(32)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = key(&path, "--store-key").unwrap_err().to_string();
        assert!(err.contains("chmod 600") && err.contains("0644"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(key(&path, "--store-key").is_ok());
        std::fs::write(&path, "short").unwrap();
        let err = key(&path, "--store-key").unwrap_err().to_string();
        assert!(err.contains("32 bytes"), "{err}");
    }
}
