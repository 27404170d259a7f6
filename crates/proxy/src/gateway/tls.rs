//! The gateway's TLS: the server side a stranger's client meets. TLS 1.2 and 1.3 only (rustls
//! has nothing older), no client certificate, ALPN `h2` then `http/1.1`, and a certificate
//! chosen by the name the client asks for (SNI) by the model's
//! [`Https::certificate_for`](hopwise_model::gateway::Https::certificate_for): exact, then the
//! longest wildcard. A name no certificate serves, or no name at all, gets no certificate: rustls
//! ends the handshake with an alert, so a client probing names learns none of them.
//!
//! The files are read at start and again whenever they change ([`GatewayCerts::reload_if_changed`],
//! which worker 0 calls every 2 s as it does for the mesh's own certificate): a renewed
//! certificate (cert-manager, ACME) is served from the next handshake on, with no restart. A
//! change that does not load — a key that is not the certificate's, a file half written — keeps
//! every certificate as it was, and says why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use hopwise_model::gateway::Https;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;

use crate::tls::{TlsError, provider, read_certs};

/// The certificates as loaded, and the files' modification times they were loaded at.
#[derive(Debug)]
struct Loaded {
    keys: Vec<Arc<CertifiedKey>>,
    stamp: Option<Vec<SystemTime>>,
}

/// A gateway's certificates, each chosen by the names of its entry in `https`, reloaded from
/// their files when they change.
#[derive(Debug)]
pub struct GatewayCerts {
    https: Https,
    /// Each certificate's chain and key file, in `https.certificates`' order.
    files: Vec<(PathBuf, PathBuf)>,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<Loaded>>,
}

impl GatewayCerts {
    /// Every certificate and key read from its file (relative to `base`) and checked to belong
    /// together.
    pub fn open(https: &Https, base: &Path) -> Result<Arc<GatewayCerts>, TlsError> {
        let files = (https.certificates.iter())
            .map(|c| (base.join(&c.cert), base.join(&c.key)))
            .collect();
        let certs = GatewayCerts {
            https: https.clone(),
            files,
            provider: provider(),
            current: RwLock::new(Arc::new(Loaded {
                keys: Vec::new(),
                stamp: None,
            })),
        };
        let loaded = certs.load()?;
        certs.put(loaded);
        Ok(Arc::new(certs))
    }

    /// Loads them again if a file changed since they were loaded; on failure the ones in use
    /// stay. `Ok(true)` when new ones were put in use.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let stamp = self.stamp();
        if stamp.is_some() && stamp == self.loaded().stamp {
            return Ok(false);
        }
        let fresh = self.load()?;
        self.put(fresh);
        Ok(true)
    }

    fn stamp(&self) -> Option<Vec<SystemTime>> {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let files = self.files.iter();
        files.flat_map(|(c, k)| [m(c), m(k)]).collect()
    }

    fn load(&self) -> Result<Loaded, TlsError> {
        // Read before the files, so that a change made while they are read is seen next time.
        let stamp = self.stamp();
        let mut keys = Vec::with_capacity(self.files.len());
        for (cert, key) in &self.files {
            let chain = read_certs(cert)?;
            let der = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Read {
                path: key.clone(),
                source,
            })?;
            let certified =
                CertifiedKey::from_der(chain, der, &self.provider).map_err(|source| {
                    TlsError::Key {
                        path: key.clone(),
                        source,
                    }
                })?;
            keys.push(Arc::new(certified));
        }
        Ok(Loaded { keys, stamp })
    }

    fn loaded(&self) -> Arc<Loaded> {
        match self.current.read() {
            Ok(l) => l.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn put(&self, loaded: Loaded) {
        match self.current.write() {
            Ok(mut l) => *l = Arc::new(loaded),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(loaded),
        }
    }
}

impl ResolvesServerCert for GatewayCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let i = self.https.certificate_for(hello.server_name())?;
        self.loaded().keys.get(i).cloned()
    }
}

/// The gateway's server configuration over `certs`.
pub fn server_config(certs: &Arc<GatewayCerts>) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(certs.provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(certs.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
