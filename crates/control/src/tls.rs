//! TLS 1.3 on the control plane's own port, always (there is no plaintext mode).
//!
//! The control plane makes its own key and has its own CA sign a certificate for
//! `spiffe://<trust-domain>/control` through the same path as a proxy's CSR
//! ([`Ca::issue`]), with the same lifetime. [`ServerTls::refresh`] signs a new one at about 70 %
//! of its life and whenever the CA changes (a rotation's stages), and swaps the whole server
//! configuration: new handshakes get the new certificate and the new client-certificate roots
//! together, and connections already open keep theirs. With replicas sharing etcd, each one
//! signs its own with the shared CA.
//!
//! Client certificates are asked for, not required: a proxy presents its mesh certificate when
//! it has one (its first `Issue` has none), and it must then chain to the trust bundle. The join
//! token still authenticates every proxy call, and the admin token `Apply`, `RotateCa` and
//! `Status` ([`crate::api`]).

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::ca::{Ca, IssueError};
use crate::conn::{Conn, Limits, PerAddress};

/// How long a client has to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once: past this, accepting waits (the kernel's backlog holds
/// the rest), so a flood of connections that never finish their handshake holds a bounded
/// number of tasks and buffers for at most [`HANDSHAKE_TIMEOUT`] each.
const HANDSHAKES_AT_ONCE: usize = 256;
/// The share of its life after which the server's certificate is signed again.
const RENEW_AT: f64 = 0.7;

/// Why the control port's TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make the control plane's key or certificate request: {0}")]
    Key(String),
    #[error("the control plane's CA did not sign its own certificate: {0}")]
    Issue(#[from] IssueError),
    #[error("the control plane's TLS configuration: {0}")]
    Config(String),
}

/// What is in force: the configuration handshakes use, and what it was made from.
struct Current {
    config: Arc<ServerConfig>,
    ca: Arc<Ca>,
    renew_at: SystemTime,
}

/// The server side of the control port: its certificate and the roots client certificates are
/// checked against, swapped while it serves.
pub struct ServerTls {
    provider: Arc<CryptoProvider>,
    identity: String,
    current: RwLock<Current>,
    /// One refresh at a time, each reading the CA after it has this: two callers racing (the
    /// ticker and a rotation stage) could otherwise install a certificate from the CA one of
    /// them read before the other replaced it.
    refreshing: std::sync::Mutex<()>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// A certificate for `identity` signed by `ca` now.
    pub fn new(
        ca: Arc<Ca>,
        identity: String,
        lifetime: Duration,
        now: SystemTime,
    ) -> Result<Arc<ServerTls>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let current = make(&provider, ca, &identity, lifetime, now)?;
        Ok(Arc::new(ServerTls {
            provider,
            identity,
            current: RwLock::new(current),
            refreshing: std::sync::Mutex::new(()),
        }))
    }

    /// Signs a new certificate when `ca` is not the one the current certificate came from, or
    /// the current one is past ~70 % of its life. Returns whether it did; on error the old one
    /// stays in force.
    /// `signer` gives the CA in force and the certificate lifetime; it is read once this
    /// refresh has the lock, so the last refresh always uses the latest CA.
    pub fn refresh(
        &self,
        signer: impl FnOnce() -> (Arc<Ca>, Duration),
        now: SystemTime,
    ) -> Result<bool, TlsError> {
        let _one_at_a_time = match self.refreshing.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (ca, lifetime) = signer();
        {
            let current = self.read();
            if Arc::ptr_eq(&current.0, &ca) && now < current.1 {
                return Ok(false);
            }
        }
        let fresh = make(&self.provider, ca, &self.identity, lifetime, now)?;
        match self.current.write() {
            Ok(mut c) => *c = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        Ok(true)
    }

    /// The configuration new handshakes use.
    pub fn config(&self) -> Arc<ServerConfig> {
        match self.current.read() {
            Ok(c) => c.config.clone(),
            Err(poisoned) => poisoned.into_inner().config.clone(),
        }
    }

    fn read(&self) -> (Arc<Ca>, SystemTime) {
        match self.current.read() {
            Ok(c) => (c.ca.clone(), c.renew_at),
            Err(poisoned) => {
                let c = poisoned.into_inner();
                (c.ca.clone(), c.renew_at)
            }
        }
    }
}

/// A key made here, a CSR for `identity`, signed by `ca` like any proxy's.
fn make(
    provider: &Arc<CryptoProvider>,
    ca: Arc<Ca>,
    identity: &str,
    lifetime: Duration,
    now: SystemTime,
) -> Result<Current, TlsError> {
    let key = rcgen::KeyPair::generate().map_err(|e| TlsError::Key(e.to_string()))?;
    let mut params = rcgen::CertificateParams::default();
    let uri = identity
        .to_owned()
        .try_into()
        .map_err(|e: rcgen::Error| TlsError::Key(e.to_string()))?;
    params.subject_alt_names = vec![rcgen::SanType::URI(uri)];
    let csr = params
        .serialize_request(&key)
        .and_then(|c| c.pem())
        .map_err(|e| TlsError::Key(e.to_string()))?;
    let issued = ca.issue(&csr, identity, lifetime, now)?;
    let chain = pem_certs(&issued.cert_chain_pem)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut roots = RootCertStore::empty();
    for pem in ca.roots_pem() {
        for cert in pem_certs(&pem)? {
            roots
                .add(cert)
                .map_err(|e| TlsError::Config(format!("the trust bundle: {e}")))?;
        }
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let life = issued.not_after.duration_since(now).unwrap_or_default();
    Ok(Current {
        config: Arc::new(config),
        ca,
        renew_at: now + life.mul_f64(RENEW_AT),
    })
}

fn pem_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Config(format!("a certificate of its CA: {e}")))
}

/// The TLS connections accepted on `listener`, for tonic. A connection past the caps of
/// `limits` ([`PerAddress`]) is closed at once, before its handshake; each handshake runs in its
/// own task (bounded by [`HANDSHAKE_TIMEOUT`]) so a slow or plaintext client delays nobody; a
/// failed one is logged and dropped. Ends when the server stops reading.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    limits: Limits,
) -> ReceiverStream<std::io::Result<Conn>> {
    incoming_with(listener, tls, HANDSHAKES_AT_ONCE, limits)
}

fn incoming_with(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    handshakes_at_once: usize,
    limits: Limits,
) -> ReceiverStream<std::io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(tokio::sync::Semaphore::new(handshakes_at_once));
    let open = PerAddress::new(&limits);
    tokio::spawn(async move {
        loop {
            // Never closed, so a permit always comes.
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors, or a connection reset before accept: go on.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = tx.closed() => return,
            };
            // Counted from accept to close; refused before any work (dropping it closes it).
            let place = match open.admit(peer.ip()) {
                Ok(place) => place,
                Err(e) => {
                    tracing::warn!(%peer, "refused a connection: {e}");
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
            let tx = tx.clone();
            tokio::spawn(async move {
                let _slot = slot;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(Conn::new(stream, peer, place, &limits))).await;
                    }
                    Ok(Err(e)) => tracing::info!(%peer, "TLS handshake refused: {e}"),
                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests;
