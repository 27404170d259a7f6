//! The proxy's identity from the control plane: a key made here (it never leaves this
//! process), a certificate request, and what comes back — once [`issued::read`] takes it —
//! written for the [`crate::tls::CertStore`]; renewal planned at about 70 % of the
//! certificate's life ([`issued::renewal_at`]).

use std::time::SystemTime;

use super::cache::write_file;
use super::{Client, ControlError, ControlOptions, issued, pb};

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
        let key_pem = key.serialize_pem();
        // Snapshots keep the trust bundle current (an answer here may be older than the last
        // snapshot); this copy only fills a cache that has none, for the TLS store to start.
        // Nothing is written unless the store could load all of it.
        let issued = issued::read(resp, &key_pem, !files.ca.exists())
            .map_err(|e| ControlError::Refused(e.to_string()))?;
        // Key first: a certificate on disk without its key would be picked up half-made.
        write_file(&files.key, &key_pem, true)?;
        if let Some(bundle) = &issued.trust_bundle_pem {
            write_file(&files.ca, bundle, false)?;
        }
        write_file(&files.cert, &issued.cert_chain_pem, false)?;
        Ok(Cert {
            not_after: issued.not_after,
            generation: issued.generation,
        })
    }
}

/// Around 70 % of the certificate's life, with ±5 % jitter so a fleet does not renew at once.
pub(super) fn renewal_time(now: SystemTime, not_after: SystemTime) -> SystemTime {
    issued::renewal_at(now, not_after, fastrand::f64())
}
