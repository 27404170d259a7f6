//! What the proxy keeps on disk in its cache directory: its certificate, key and trust bundle
//! (the files [`crate::tls::CertStore`] reloads), and the last accepted snapshot, so a restart
//! while the control plane is down still serves. Every file is written to a temporary name and
//! renamed over the old one; the key is readable by its owner only.

use std::path::{Path, PathBuf};

use super::{Cached, ControlError, ControlOptions};
use crate::tls::{CertFiles, CertStore};

pub(super) fn write_file(path: &Path, text: &str, secret: bool) -> Result<(), ControlError> {
    let err = |source| ControlError::Write {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(err)?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Puts files just written in force now rather than at the next periodic reload. Returns
/// whether what is on disk is in use.
pub(super) fn reload(certs: Option<&CertStore>) -> bool {
    match certs.map(CertStore::reload_if_changed) {
        None | Some(Ok(_)) => true,
        Some(Err(e)) => {
            tracing::warn!("keeping the old certificates: {e}");
            false
        }
    }
}

impl ControlOptions {
    pub(super) fn cert_files(&self) -> CertFiles {
        CertFiles::in_dir(&self.cache, &self.service)
    }

    fn snapshot_file(&self) -> PathBuf {
        self.cache.join("snapshot.json")
    }

    /// Writes a snapshot's trust bundle to `ca.pem` (atomically: a temporary file renamed over
    /// it) when it differs from the file, and puts it in force at once. Returns whether the
    /// bundle is in force.
    pub(super) fn sync_bundle(&self, pem: &str, certs: Option<&CertStore>) -> bool {
        if pem.is_empty() {
            return false;
        }
        let path = self.cert_files().ca;
        if std::fs::read_to_string(&path).ok().as_deref() != Some(pem) {
            if let Err(e) = write_file(&path, pem, false) {
                tracing::warn!("keeping the old trust bundle: {e}");
                return false;
            }
            tracing::info!(
                "trust bundle updated: {} CA certificate(s)",
                pem.matches("-----BEGIN CERTIFICATE-----").count()
            );
        }
        reload(certs)
    }

    pub(super) fn load_cache(&self) -> Result<Cached, ControlError> {
        let text = std::fs::read_to_string(self.snapshot_file())
            .map_err(|_| ControlError::NoCache(self.cache.clone()))?;
        serde_json::from_str(&text).map_err(|_| ControlError::NoCache(self.cache.clone()))
    }

    pub(super) fn save_cache(&self, cached: &Cached) -> Result<(), ControlError> {
        let text = serde_json::to_string_pretty(cached)
            .map_err(|e| ControlError::Config(e.to_string()))?;
        write_file(&self.snapshot_file(), &text, false)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn options(cache: &Path) -> ControlOptions {
        ControlOptions {
            servers: vec!["https://127.0.0.1:1".into()],
            control_ca: cache.join("control-ca.pem"),
            token: crate::control::Token::fixed(""),
            advertise: None,
            service: "b".into(),
            copy: 0,
            name: "b-0".into(),
            cache: cache.to_owned(),
            health_path: "/".into(),
            lease_ttl: Duration::from_secs(10),
            labels: Default::default(),
        }
    }

    #[test]
    fn a_snapshots_trust_bundle_replaces_the_file_only_when_it_differs() {
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path());
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "OLD").unwrap();
        // A control plane that sends no bundle leaves the file alone, and it is not in force.
        assert!(!opts.sync_bundle("", None));
        assert_eq!(std::fs::read_to_string(&ca).unwrap(), "OLD");
        assert!(opts.sync_bundle("OLD\nNEW\n", None));
        assert_eq!(std::fs::read_to_string(&ca).unwrap(), "OLD\nNEW\n");
        let written = std::fs::metadata(&ca).unwrap().modified().unwrap();
        // The same bundle again: the file is not touched (the TLS store does not reload).
        std::thread::sleep(Duration::from_millis(20));
        assert!(opts.sync_bundle("OLD\nNEW\n", None));
        assert_eq!(std::fs::metadata(&ca).unwrap().modified().unwrap(), written);
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ca.pem"]);
    }
}
