//! An `IssueResponse` as the proxy takes it, before anything is written: the chain read as the
//! TLS store reads it ([`crate::tls::CertStore`]: rustls' PEM reader, at least one certificate,
//! the leaf holding the key this proxy made), the trust bundle read as its roots when it is to be
//! written, the certificate's end (`not_after_unix`, any `i64`) as a time; and when to renew
//! ([`renewal_at`]). Pure: `identity.rs` writes only what [`read`] accepts, so an answer the
//! store could not load leaves the key and certificate in use, on disk too, as they were.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::pb;
use crate::tls::provider;

/// What an answer gives, to be written and planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert_chain_pem: String,
    /// The bundle to write (only asked for when the cache has none).
    pub trust_bundle_pem: Option<String>,
    pub not_after: SystemTime,
    /// The generation of the CA that signed it (0: a control plane that does not say).
    pub generation: u64,
}

/// Why an answer is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuedError {
    #[error("the certificate chain sent is not usable: {0}")]
    Chain(String),
    #[error("the trust bundle sent is not usable: {0}")]
    Bundle(String),
}

/// `resp` as the proxy takes it, for the key it made (`key_pem`); `with_bundle`: its trust
/// bundle is to be written (the cache has none), so it must read as the store's roots.
pub fn read(
    resp: pb::IssueResponse,
    key_pem: &str,
    with_bundle: bool,
) -> Result<Issued, IssuedError> {
    let provider = provider();
    let chain = certificates(&resp.cert_chain_pem).map_err(IssuedError::Chain)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| IssuedError::Chain(format!("this proxy's key: {e}")))?;
    CertifiedKey::from_der(chain, key, &provider).map_err(|e| IssuedError::Chain(e.to_string()))?;
    let trust_bundle_pem = if with_bundle {
        let mut roots = RootCertStore::empty();
        for ca in certificates(&resp.trust_bundle_pem).map_err(IssuedError::Bundle)? {
            roots
                .add(ca)
                .map_err(|e| IssuedError::Bundle(e.to_string()))?;
        }
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| IssuedError::Bundle(e.to_string()))?;
        Some(resp.trust_bundle_pem)
    } else {
        None
    };
    Ok(Issued {
        cert_chain_pem: resp.cert_chain_pem,
        trust_bundle_pem,
        not_after: not_after(resp.not_after_unix),
        generation: resp.ca_generation,
    })
}

/// Every certificate in PEM text, as the store's `read_certs` takes a file: none is an error.
fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("it holds no certificate".to_owned());
    }
    Ok(certs)
}

/// Seconds since the Unix epoch as a time: before the epoch is the epoch (already expired), and
/// past what this platform's clock holds is the latest time it does.
pub fn not_after(unix: i64) -> SystemTime {
    let secs = u64::try_from(unix).unwrap_or(0);
    UNIX_EPOCH
        .checked_add(Duration::from_secs(secs))
        .unwrap_or_else(|| latest(secs))
}

/// The latest time at most `secs` past the epoch that this platform's `SystemTime` holds.
fn latest(secs: u64) -> SystemTime {
    let (mut lo, mut hi) = (0u64, secs);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if UNIX_EPOCH.checked_add(Duration::from_secs(mid)).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    UNIX_EPOCH + Duration::from_secs(lo)
}

/// When to renew a certificate that ends at `not_after`: 65 % to 75 % of the life left
/// (`draw` in [0, 1) places it, jitter so a fleet does not renew at once); at once when it has
/// ended. Never before `now`, never after `not_after`.
pub fn renewal_at(now: SystemTime, not_after: SystemTime, draw: f64) -> SystemTime {
    let life = not_after.duration_since(now).unwrap_or_default();
    let share = 0.65
        + 0.10
            * if (0.0..1.0).contains(&draw) {
                draw
            } else {
                0.0
            };
    let wait = Duration::try_from_secs_f64(life.as_secs_f64() * share).unwrap_or(life);
    now.checked_add(wait.min(life)).unwrap_or(not_after)
}

#[cfg(test)]
mod tests;
