//! The admission webhooks' HTTPS server: `POST /inject` with an `AdmissionReview`, answered by
//! `inject::answer`, and, when given a judge, `POST /validate-mesh` by
//! `mesh_resource::admission::answer`. Bounded like every hopwise listener: open connections (past the cap a new
//! one is closed at accept), the TLS handshake's time, a request head's time, a body's size
//! and time, and a connection's life (then closed gracefully: the request in flight finishes).
//! TLS 1.2 or 1.3 (the API server's Go client offers both), HTTP/1.1 only. A body that is not a
//! review gets a 400 with the reason; anything else but `POST /inject` with JSON a 404, 405 or
//! 415. Knows nothing of pods or meshes: `inject` and the judge decide.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::inject::{self, Inject};
use crate::mesh_resource::admission::{self, Judge};
use crate::registration::PATH;

/// What the server answers: pods to inject, and `Mesh`es to judge when a judge is given.
#[derive(Clone)]
pub struct Handlers {
    pub inject: Arc<Inject>,
    pub mesh: Option<Arc<Judge>>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("inject", &self.inject)
            .field("mesh", &self.mesh.is_some())
            .finish()
    }
}

/// What one server allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections in all (the API server keeps a few alive per webhook).
    pub connections: usize,
    /// The TLS handshake.
    pub handshake: Duration,
    /// A request's head, from the connection's start or the previous answer.
    pub head: Duration,
    /// A request's body, read whole, and its answer.
    pub request: Duration,
    /// The largest body: a review carries one pod (etcd keeps at most 1.5 MiB per object).
    pub body: usize,
    /// How long one connection is served before it is closed gracefully.
    pub connection_life: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 64,
            handshake: Duration::from_secs(5),
            head: Duration::from_secs(30),
            request: Duration::from_secs(10),
            body: 3 << 20,
            connection_life: Duration::from_secs(300),
        }
    }
}

/// What can go wrong starting the server.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("the serving certificate: {0}")]
    Certificate(String),
    #[error("the serving key: {0}")]
    Key(String),
    #[error("the TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("the listener: {0}")]
    Listener(#[from] std::io::Error),
}

/// The server's TLS from a PEM chain (leaf first) and its PEM key.
pub fn tls(cert_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>, WebhookError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| WebhookError::Certificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(WebhookError::Certificate("no certificate in it".to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| WebhookError::Key(e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A running server; dropping it stops accepting (connections in flight finish on their own).
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Running {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the injection webhook on `listener` (needs a Tokio runtime).
pub fn spawn(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    inject: Inject,
    limits: Limits,
) -> Result<Running, WebhookError> {
    let handlers = Handlers {
        inject: Arc::new(inject),
        mesh: None,
    };
    spawn_with(listener, tls, handlers, limits)
}

/// Serves `handlers` on `listener` (needs a Tokio runtime).
pub fn spawn_with(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    handlers: Handlers,
    limits: Limits,
) -> Result<Running, WebhookError> {
    let addr = listener.local_addr()?;
    let acceptor = TlsAcceptor::from(tls);
    let open = Arc::new(Semaphore::new(limits.connections));
    let task = tokio::spawn(async move {
        loop {
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!("webhook: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = open.clone().try_acquire_owned() else {
                tracing::warn!(
                    "webhook: {} connections open, closing a new one",
                    limits.connections
                );
                continue;
            };
            let (acceptor, handlers) = (acceptor.clone(), handlers.clone());
            tokio::spawn(async move {
                serve(tcp, acceptor, handlers, limits).await;
                drop(slot);
            });
        }
    });
    Ok(Running { addr, task })
}

/// One connection: the handshake, then HTTP/1.1 until the peer closes it or its life ends.
async fn serve(tcp: TcpStream, acceptor: TlsAcceptor, handlers: Handlers, limits: Limits) {
    let _ = tcp.set_nodelay(true);
    let tls = match tokio::time::timeout(limits.handshake, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return tracing::info!("webhook: TLS handshake failed: {e}"),
        Err(_) => return tracing::info!("webhook: TLS handshake took too long"),
    };
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let handlers = handlers.clone();
        async move { Ok::<_, Infallible>(handle(req, &handlers, limits).await) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.head)
        .max_buf_size(64 << 10);
    let conn = http.serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = tokio::time::sleep(limits.connection_life) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(limits.request, conn).await;
}

async fn handle(
    req: Request<Incoming>,
    handlers: &Handlers,
    limits: Limits,
) -> Response<Full<Bytes>> {
    let judge = match (req.uri().path(), &handlers.mesh) {
        (PATH, _) => None,
        (admission::PATH, Some(judge)) => Some(judge.clone()),
        _ => {
            let served = match handlers.mesh {
                Some(_) => format!("only {PATH} and {} are served here", admission::PATH),
                None => format!("only {PATH} is served here"),
            };
            return plain(StatusCode::NOT_FOUND, served);
        }
    };
    if req.method() != Method::POST {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST an AdmissionReview".to_owned(),
        );
    }
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json {
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "an AdmissionReview as application/json".to_owned(),
        );
    }
    let started = Instant::now();
    let body = Limited::new(req.into_body(), limits.body).collect();
    let body = match tokio::time::timeout(limits.request, body).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            let what = format!("a review of at most {} bytes", limits.body);
            return plain(StatusCode::PAYLOAD_TOO_LARGE, what);
        }
        Ok(Err(e)) => return plain(StatusCode::BAD_REQUEST, format!("reading the body: {e}")),
        Err(_) => {
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                "the body came too slowly".to_owned(),
            );
        }
    };
    let answered = match judge {
        None => inject::answer(&body, &handlers.inject),
        Some(judge) => admission::answer(&body, &*judge),
    };
    match answered {
        Ok(review) => {
            tracing::debug!("webhook: answered a review in {:?}", started.elapsed());
            let mut resp = Response::new(Full::new(Bytes::from(review)));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(bad) => {
            tracing::info!("webhook: refused a body: {bad}");
            plain(StatusCode::BAD_REQUEST, bad.to_string())
        }
    }
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(text + "\n")));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
