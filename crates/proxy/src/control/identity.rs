//! The proxy's identity from the control plane: a key made here (it never leaves this
//! process), a certificate request, and what comes back written for the
//! [`crate::tls::CertStore`]; renewal planned at about 70 % of the certificate's life.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::cache::write_file;
use super::{Client, ControlError, ControlOptions, pb};

/// A certificate just issued.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cert {
    pub(super) not_after: SystemTime,
    /// The generation of the CA that signed it (0: a control plane that does not say).
    pub(super) generation: u64,
}

impl ControlOptions {
    /// Makes a key here, sends only the request, and writes what comes back for the
    /// [`crate::tls::CertStore`] (which picks up renewals from disk).
    pub(super) async fn issue(&self, client: &mut Client) -> Result<Cert, ControlError> {
        let key = rcgen::KeyPair::generate().map_err(|e| ControlError::Csr(e.to_string()))?;
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, self.service.clone());
        let csr = params
            .serialize_request(&key)
            .and_then(|c| c.pem())
            .map_err(|e| ControlError::Csr(e.to_string()))?;
        let resp = client
            .issue(pb::IssueRequest {
                csr_pem: csr,
                token: self.token.current(),
                proxy: self.name.clone(),
            })
            .await
            .map_err(|s| ControlError::Refused(s.message().to_owned()))?
            .into_inner();
        std::fs::create_dir_all(&self.cache).map_err(|source| ControlError::Write {
            path: self.cache.clone(),
            source,
        })?;
        let files = self.cert_files();
        // Key first: a certificate on disk without its key would be picked up half-made.
        write_file(&files.key, &key.serialize_pem(), true)?;
        // Snapshots keep the trust bundle current (an answer here may be older than the last
        // snapshot); this copy only fills a cache that has none, for the TLS store to start.
        if !files.ca.exists() {
            write_file(&files.ca, &resp.trust_bundle_pem, false)?;
        }
        write_file(&files.cert, &resp.cert_chain_pem, false)?;
        Ok(Cert {
            not_after: UNIX_EPOCH + Duration::from_secs(resp.not_after_unix.max(0) as u64),
            generation: resp.ca_generation,
        })
    }
}

/// Around 70 % of the certificate's life, with ±5 % jitter so a fleet does not renew at once.
pub(super) fn renewal_time(now: SystemTime, not_after: SystemTime) -> SystemTime {
    let life = not_after.duration_since(now).unwrap_or_default();
    let share = 0.65 + fastrand::f64() * 0.10;
    now + life.mul_f64(share)
}
