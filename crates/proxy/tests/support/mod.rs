//! Test harness: real backends on real sockets, real proxies started in process from a mesh
//! file, certificates from `hopwise certs`' own code. Ports are chosen by the kernel (port 0)
//! and the configurations are wired together after binding.

#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // a test harness: a failed setup should fail the test loudly

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hopwise_model::Mesh;
use hopwise_proxy::config::Target;
use hopwise_proxy::{ProxyConfig, Running};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub mod chain;
pub mod in_process;
pub mod middle;
pub mod tls_server;

pub type Handler = Arc<
    dyn Fn(
            Request<Incoming>,
        ) -> std::pin::Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send>>
        + Send
        + Sync,
>;

/// A backend (the "app") on 127.0.0.1:0 that counts what reaches it.
pub struct Backend {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
}

/// Starts a backend serving HTTP/1.1 and h2c (auto-detected) with `handler`.
pub async fn backend(handler: Handler) -> Backend {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            // Nagle's wait is real time, which a paused clock would skip past to a timeout
            // (several h2 streams at once on one connection).
            let _ = tcp.set_nodelay(true);
            let handler = handler.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let fut = handler(req);
                    async move { Ok::<_, Infallible>(fut.await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Backend { addr, hits }
}

/// Echoes what it received: method, path, the identity header, and the body's length.
pub fn echo() -> Handler {
    Arc::new(|req: Request<Incoming>| {
        Box::pin(async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_owned();
            let version = format!("{:?}", req.version());
            let peer = req
                .headers()
                .get("x-hopwise-peer-identity")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned();
            let host = req
                .headers()
                .get(http::header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned();
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let text = format!(
                "method={method} path={path} version={version} peer={peer} host={host} bytes={}",
                body.len()
            );
            Response::new(Full::new(Bytes::from(text)))
        })
    })
}

/// Answers `status` at once.
pub fn status(code: u16) -> Handler {
    Arc::new(move |_req| {
        Box::pin(async move {
            let mut r = Response::new(Full::new(Bytes::from_static(b"status")));
            *r.status_mut() = StatusCode::from_u16(code).unwrap();
            r
        })
    })
}

/// Answers after `delay`.
pub fn slow(delay: Duration) -> Handler {
    Arc::new(move |_req| {
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Response::new(Full::new(Bytes::from_static(b"slow")))
        })
    })
}

/// Accepts connections and closes them without a word.
pub async fn resetter() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = tcp.read(&mut buf).await;
            drop(tcp);
        }
    });
    addr
}

/// An address where nothing listens.
pub fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a
}

/// A mesh file on disk with fresh certificates next to it.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub mesh: Mesh,
}

impl Fixture {
    pub fn new(yaml: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mesh = Mesh::from_yaml(yaml).unwrap_or_else(|d| panic!("{}", d.render("test mesh")));
        hopwise_proxy::certs::write_dev_certs(&mesh, &dir.path().join("certs")).unwrap();
        Fixture { dir, mesh }
    }

    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// The configuration of `service`'s proxy, every listener on port 0.
    pub fn config(&self, service: &str) -> ProxyConfig {
        let mut c =
            ProxyConfig::from_mesh(&self.mesh, service, 0, self.dir.path(), Some(&self.certs()))
                .unwrap();
        c.timeouts.drain = Duration::from_secs(5);
        c
    }
}

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A caller's proxy: one local port per upstream, plus the HTTP-proxy port.
pub fn outbound(mut c: ProxyConfig, upstreams: &[(&str, SocketAddr)]) -> ProxyConfig {
    c.outbound = Some(any_port());
    c.admin = Some(any_port());
    c.upstream_ports = c.clusters.keys().map(|k| (k.clone(), any_port())).collect();
    for (name, endpoint) in upstreams {
        if let Some(cluster) = c.clusters.get_mut(*name)
            && let Target::Mesh { endpoints, .. } = &mut cluster.target
        {
            *endpoints = vec![*endpoint];
        }
    }
    c
}

/// A callee's proxy: the mTLS port in front of `app`.
pub fn inbound(mut c: ProxyConfig, app: SocketAddr) -> ProxyConfig {
    c.inbound = Some(any_port());
    c.admin = Some(any_port());
    c.app = Some(app);
    c
}

/// Starts a proxy and waits until `/ready` says so.
pub async fn start(c: ProxyConfig) -> Running {
    let running = hopwise_proxy::start(c).unwrap();
    let admin = running.bound.admin;
    for _ in 0..200 {
        if running.state.ready() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(running.state.ready(), "proxy not ready (admin {admin:?})");
    running
}

/// A one-shot HTTP/1.1 request with a fresh connection; returns status, headers, body.
pub async fn get(
    addr: SocketAddr,
    req: Request<Full<Bytes>>,
) -> (StatusCode, http::HeaderMap, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

pub fn request(method: &str, uri: &str, host: &str, body: &'static [u8]) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::HOST, host)
        .body(Full::new(Bytes::from_static(body)))
        .unwrap()
}

/// Sends raw bytes and reads until the peer closes or `limit` passes.
pub async fn raw(addr: SocketAddr, bytes: &[u8], limit: Duration) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(limit, tcp.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The text of a proxy's `/metrics`.
pub async fn metrics(running: &Running) -> String {
    let admin = running.bound.admin.unwrap();
    get(admin, request("GET", "/metrics", &admin.to_string(), b""))
        .await
        .2
}

pub fn path(p: &Path) -> String {
    p.display().to_string()
}

/// An app that takes every request and never answers.
pub fn hanging() -> Handler {
    Arc::new(|_req| {
        Box::pin(async {
            std::future::pending::<()>().await;
            Response::new(Full::new(Bytes::new()))
        })
    })
}

/// Sends `GET path` (host `b`) to `port` with `extra` header lines, then closes the connection
/// after `after` without reading an answer: a caller that goes away.
pub async fn abandon(port: SocketAddr, path: &str, extra: &str, after: Duration) {
    let mut tcp = TcpStream::connect(port).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nhost: b\r\n{extra}\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(after).await;
    drop(tcp);
}
