//! Mutual TLS between proxies, with SPIFFE identities.
//!
//! The proxy's certificate, key and trust bundle come from a [`CertStore`] that can be reloaded
//! while the proxy runs: new handshakes use the new material, open connections keep theirs.
//! Inbound, a caller must present a certificate from the mesh's CA; its SPIFFE identity
//! (`spiffe://<trust-domain>/service/<name>`) is read from the URI SAN. Outbound, the server must
//! present the identity of the service we meant to reach — a certificate from the right CA for
//! the wrong service is refused. Toward the control plane ([`control_client_config`]), the server
//! must present a control plane's identity, `spiffe://<trust-domain>/control`, checked by
//! `hopwise-api`'s one verifier; identities are read by `hopwise-api`'s one reading
//! ([`peer_identity`]). Toward a service outside the mesh, `external.rs` ([`external_client_config`]):
//! roots, or the service's own self-signed certificate as a pin.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::client::ResolvesClientCert;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use hopwise_api::control_port::ClientConfigError;
use hopwise_api::verifier::{Expectation, SpiffeServerVerifier};

mod external;
pub use external::external_client_config;

/// The ALPN of a proxy-to-proxy connection that carries opaque TCP tunnels (HTTP/2 CONNECT
/// streams, [`crate::tcp`]), told apart from HTTP connections on the same mutual-TLS port.
pub const TUNNEL_ALPN: &[u8] = b"hopwise-tunnel/h2";

/// Why certificates could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("the key in {path} cannot be used: {source}")]
    Key {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("the trust bundle {path} is not usable: {reason}")]
    Bundle { path: PathBuf, reason: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Where a proxy's identity lives on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The trust bundle: the CA certificate(s) of the mesh.
    pub ca: PathBuf,
}

impl CertFiles {
    /// The layout `hopwise certs` writes: `<dir>/<service>.pem`, `<service>-key.pem`, `ca.pem`.
    pub fn in_dir(dir: &Path, service: &str) -> Self {
        CertFiles {
            cert: dir.join(format!("{service}.pem")),
            key: dir.join(format!("{service}-key.pem")),
            ca: dir.join("ca.pem"),
        }
    }

    fn modified(&self) -> Option<[SystemTime; 3]> {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some([m(&self.cert)?, m(&self.key)?, m(&self.ca)?])
    }
}

struct Material {
    key: Arc<CertifiedKey>,
    roots: Arc<RootCertStore>,
    client_verifier: Arc<dyn ClientCertVerifier>,
    stamp: Option<[SystemTime; 3]>,
}

/// The proxy's current certificate, key and trust bundle; swappable at run time.
pub struct CertStore {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<Material>>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("files", &self.files)
            .finish()
    }
}

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file; an empty file is an error naming it.
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn load(files: &CertFiles, provider: &Arc<CryptoProvider>) -> Result<Material, TlsError> {
    let chain = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::Read {
        path: files.key.clone(),
        source,
    })?;
    let key = CertifiedKey::from_der(chain, key, provider).map_err(|source| TlsError::Key {
        path: files.key.clone(),
        source,
    })?;
    let mut roots = RootCertStore::empty();
    for ca in read_certs(&files.ca)? {
        roots.add(ca).map_err(|e| TlsError::Bundle {
            path: files.ca.clone(),
            reason: e.to_string(),
        })?;
    }
    let roots = Arc::new(roots);
    let client_verifier =
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| TlsError::Bundle {
                path: files.ca.clone(),
                reason: e.to_string(),
            })?;
    Ok(Material {
        key: Arc::new(key),
        roots,
        client_verifier,
        stamp: files.modified(),
    })
}

impl CertStore {
    pub fn open(files: CertFiles) -> Result<Arc<Self>, TlsError> {
        let provider = provider();
        let material = load(&files, &provider)?;
        Ok(Arc::new(CertStore {
            files,
            provider,
            current: RwLock::new(Arc::new(material)),
        }))
    }

    fn material(&self) -> Arc<Material> {
        match self.current.read() {
            Ok(m) => m.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reloads from disk if the files changed. On failure the old material stays in use.
    /// Returns `Ok(true)` when new material was loaded.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let stamp = self.files.modified();
        if stamp.is_some() && stamp == self.material().stamp {
            return Ok(false);
        }
        let fresh = load(&self.files, &self.provider)?;
        match self.current.write() {
            Ok(mut m) => *m = Arc::new(fresh),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(fresh),
        }
        Ok(true)
    }

    /// Server side of the mTLS port: requires a client certificate from the trust bundle.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(Arc::new(ReloadingClientVerifier(self.clone())))
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), TUNNEL_ALPN.to_vec()];
        Ok(Arc::new(config))
    }

    /// Client side toward another proxy: presents our certificate and accepts only a server
    /// whose SPIFFE identity is `expected`. `alpn` selects HTTP/2 or HTTP/1.1.
    pub fn client_config(
        self: &Arc<Self>,
        expected: &str,
        alpn: &[u8],
    ) -> Result<Arc<ClientConfig>, TlsError> {
        let peer = Peer {
            store: self.clone(),
            expected: expected.to_owned(),
        };
        let verifier = SpiffeServerVerifier::new(peer, &self.provider);
        let mut config = ClientConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_cert_resolver(self.clone());
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.material().key.clone())
    }
}

impl ResolvesClientCert for CertStore {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.material().key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Verifies client certificates against the store's current trust bundle.
#[derive(Debug)]
struct ReloadingClientVerifier(Arc<CertStore>);

impl ClientCertVerifier for ReloadingClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0
            .material()
            .client_verifier
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs().supported_schemes()
    }
}

impl ReloadingClientVerifier {
    fn algs(&self) -> WebPkiSupportedAlgorithms {
        self.0.provider.signature_verification_algorithms
    }
}

/// A server certificate between proxies (`hopwise-api`'s one verifier): it chains to the trust
/// bundle as it is at the handshake, and carries exactly the expected SPIFFE identity.
#[derive(Debug)]
struct Peer {
    store: Arc<CertStore>,
    expected: String,
}

impl Expectation for Peer {
    fn roots(&self) -> Arc<RootCertStore> {
        self.store.material().roots.clone()
    }

    fn check(&self, id: &str) -> Result<(), String> {
        if id == self.expected {
            Ok(())
        } else {
            Err(format!("the server is {id}, not {}", self.expected))
        }
    }
}

pub use hopwise_api::identity::{IdentityError, peer_identity, spiffe_id};

/// A client config toward the control plane (TLS 1.3, ALPN h2): its certificate must chain to
/// `roots` and carry `spiffe://<trust-domain>/control` (of `trust_domain` once known). `client`:
/// this proxy's certificate and key, presented when given (the join token is what authenticates
/// its calls; the certificate tells the control plane which proxy is on the connection).
pub fn control_client_config(
    roots: Vec<CertificateDer<'static>>,
    trust_domain: Option<String>,
    client: Option<&CertFiles>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let mut store = RootCertStore::empty();
    // A certificate of the bundle that cannot be parsed is skipped; none at all is an error
    // (said before the client's files are read).
    let no_roots = || {
        TlsError::Config(rustls::Error::General(
            ClientConfigError::NoRoots.to_string(),
        ))
    };
    if store.add_parsable_certificates(roots).0 == 0 {
        return Err(no_roots());
    }
    let presented = match client {
        None => None,
        Some(files) => {
            let chain = read_certs(&files.cert)?;
            let key =
                PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::Read {
                    path: files.key.clone(),
                    source,
                })?;
            Some((chain, key))
        }
    };
    hopwise_api::control_port::client_config(store, trust_domain, presented).map_err(|e| match e {
        ClientConfigError::ClientCert(source) => TlsError::Key {
            path: client.map(|f| f.key.clone()).unwrap_or_default(),
            source,
        },
        ClientConfigError::Tls(e) => TlsError::Config(e),
        ClientConfigError::NoRoots => no_roots(),
    })
}
