//! Small HTTP pieces for the sample services and the lab's clients: a server (HTTP/1.1 and h2c
//! auto-detected, optionally behind TLS) that stops when dropped, its TLS from `hopwise certs`'
//! files, and one-shot clients over HTTP/1.1 and h2c that return the status, headers, body and
//! trailers.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::error::LabError;

/// How long a demo client waits for any one answer before calling it a failure.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a sample service does with a request.
pub type Handler = Arc<dyn Fn(Request<Incoming>) -> BoxFuture<Response<Full<Bytes>>> + Send + Sync>;

/// A running server; dropping it stops it and every connection it has open.
#[derive(Debug)]
pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `handler` on `listener`: HTTP/1.1 or h2c, or whichever of them inside TLS.
pub fn serve(listener: TcpListener, handler: Handler, tls: Option<TlsAcceptor>) -> Server {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
    let task = tokio::spawn(async move {
        // Owned here, so aborting the accept loop aborts every connection too.
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => {
                        let _ = tcp.set_nodelay(true);
                        conns.spawn(connection(tcp, handler.clone(), tls.clone()));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    });
    Server { addr, task }
}

async fn connection(tcp: TcpStream, handler: Handler, tls: Option<TlsAcceptor>) {
    let svc = service_fn(move |req| {
        let fut = handler(req);
        async move { Ok::<_, Infallible>(fut.await) }
    });
    serve_connection(tcp, tls, svc).await;
}

/// Serves one connection with `svc`: HTTP/1.1 or h2c, inside TLS when `tls` is given.
pub async fn serve_connection<S, B>(tcp: TcpStream, tls: Option<TlsAcceptor>, svc: S)
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let builder = auto::Builder::new(TokioExecutor::new());
    match tls {
        Some(acceptor) => {
            // A client that does not trust us gets nothing, and nothing is counted.
            if let Ok(stream) = acceptor.accept(tcp).await {
                let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
            }
        }
        None => {
            let _ = builder.serve_connection(TokioIo::new(tcp), svc).await;
        }
    }
}

/// A response with `code` and a body of `content_type`.
pub fn respond(
    code: u16,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

/// A JSON response.
pub fn json(code: u16, value: &serde_json::Value) -> Response<Full<Bytes>> {
    respond(code, "application/json", value.to_string())
}

/// What came back.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub trailers: Option<HeaderMap>,
}

impl Reply {
    /// A header from the headers, else from the trailers.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .or_else(|| self.trailers.as_ref().and_then(|t| t.get(name)))
            .and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A plain GET over a fresh HTTP/1.1 connection.
pub async fn get(addr: SocketAddr, path: &str) -> Result<Reply, String> {
    let req = Request::builder()
        .method("GET")
        .uri(path)
        .header(header::HOST, addr.to_string())
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    send_h1(addr, req).await
}

/// One request over a fresh HTTP/1.1 connection.
pub async fn send_h1(addr: SocketAddr, req: Request<Full<Bytes>>) -> Result<Reply, String> {
    within_timeout(addr, async {
        let (mut send, conn) = hyper::client::conn::http1::handshake(connect(addr).await?)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        collect(resp).await
    })
    .await
}

/// One request over a fresh h2c (HTTP/2 without TLS) connection, as a gRPC client sends it.
pub async fn send_h2c(addr: SocketAddr, req: Request<Full<Bytes>>) -> Result<Reply, String> {
    within_timeout(addr, async {
        let io = connect(addr).await?;
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        collect(resp).await
    })
    .await
}

async fn connect(addr: SocketAddr) -> Result<TokioIo<TcpStream>, String> {
    TcpStream::connect(addr)
        .await
        .map(TokioIo::new)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))
}

/// `exchange`, or a failure once it has taken [`CLIENT_TIMEOUT`].
async fn within_timeout(
    addr: SocketAddr,
    exchange: impl Future<Output = Result<Reply, String>>,
) -> Result<Reply, String> {
    match tokio::time::timeout(CLIENT_TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer from {addr} within {CLIENT_TIMEOUT:?}")),
    }
}

async fn collect(resp: Response<Incoming>) -> Result<Reply, String> {
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.map_err(|e| e.to_string())?;
    let trailers = collected.trailers().cloned();
    Ok(Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: collected.to_bytes(),
        trailers,
    })
}

/// A gRPC message: the 5-byte prefix (not compressed, big-endian length) and `message`.
pub fn grpc_frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// TLS with `<certs>/<name>.pem` and `<certs>/<name>-key.pem` (as `hopwise certs` writes them).
pub fn tls_acceptor(certs: &Path, name: &str) -> Result<TlsAcceptor, LabError> {
    let bad = |what: &str, e: String| LabError::Failed(format!("the {name}'s {what}: {e}"));
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(certs.join(format!("{name}.pem")))
            .map_err(|e| bad("certificate", e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad("certificate", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_file(certs.join(format!("{name}-key.pem")))
        .map_err(|e| bad("key", e.to_string()))?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("TLS configuration", e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| bad("TLS configuration", e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_frame_is_prefixed_with_its_length() {
        assert_eq!(grpc_frame(b"ab").as_ref(), b"\0\0\0\0\x02ab");
    }
}
