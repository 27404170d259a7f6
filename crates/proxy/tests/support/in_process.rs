//! A proxy's two lifecycles served on the test's own runtime, on loopback, without TLS: its
//! timers are the test's, so a test on a paused clock (`start_paused = true`) runs the proxy's
//! deadlines, per-try timeouts, back-offs and ejections in virtual time while every byte still
//! goes through real sockets. (`hopwise_proxy::start` runs workers on threads of their own,
//! whose clocks a test cannot pause.)

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use hopwise_proxy::ProxyConfig;
use hopwise_proxy::config::Target;
use hopwise_proxy::inbound::Caller;
use hopwise_proxy::live::Live;
use hopwise_proxy::metrics::Metrics;
use hopwise_proxy::outbound::{Entry, Outbound};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use indexmap::IndexMap;
use tokio::net::{TcpListener, TcpStream};

use super::{Backend, Fixture, backend, echo, inbound};

/// A proxy served in process: where its listeners are, and its metrics.
pub struct InProcess {
    /// A local port per upstream (outbound).
    pub upstreams: IndexMap<String, SocketAddr>,
    /// The inbound port (plain HTTP), if the configuration has an app.
    pub inbound: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
}

impl InProcess {
    /// The metrics text, as `/metrics` serves it.
    pub fn metrics(&self) -> String {
        self.metrics.encode()
    }
}

/// Serves `config`'s outbound (a port per upstream) and, when it has an app, its inbound side,
/// one worker, in plain text.
pub async fn serve(mut config: ProxyConfig) -> InProcess {
    config.plaintext = true;
    config.certs = None;
    let metrics = Metrics::new();
    let ports: Vec<String> = config.clusters.keys().cloned().collect();
    let has_app = config.app.is_some();
    let live = Arc::new(Live::build(config, None, &metrics, 1, &ports, None).unwrap());
    let mut upstreams = IndexMap::new();
    for name in &ports {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        upstreams.insert(name.clone(), listener.local_addr().unwrap());
        let dispatch = Outbound::dispatch(&Entry::Upstream(name.clone()), &ports);
        let live = live.clone();
        accept(listener, move |req| {
            let (live, dispatch) = (live.clone(), dispatch.clone());
            async move { live.worker(0).outbound.handle(&dispatch, req).await }
        });
    }
    let inbound = if has_app {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let live = live.clone();
        accept(listener, move |req| {
            let live = live.clone();
            async move {
                live.worker(0)
                    .inbound
                    .handle(&Caller::Plaintext, None, req)
                    .await
            }
        });
        Some(addr)
    } else {
        None
    };
    InProcess {
        upstreams,
        inbound,
        metrics,
    }
}

/// Accepts connections on `listener` for ever, each served (HTTP/1.1 or h2c) by `handle`.
fn accept<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(hyper::Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = hyper::Response<hopwise_proxy::body::Body>> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // As the proxy's own listeners do (and Nagle's wait is real time, which a paused
            // clock would skip past to a timeout).
            let _ = tcp.set_nodelay(true);
            let handle = handle.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let fut = handle(req);
                    async move { Ok::<_, Infallible>(fut.await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
}

/// `config` with the copies of `cluster` at `endpoints`.
pub fn with_endpoints(
    mut config: ProxyConfig,
    cluster: &str,
    endpoints: Vec<SocketAddr>,
) -> ProxyConfig {
    if let Some(Target::Mesh { endpoints: e, .. }) =
        config.clusters.get_mut(cluster).map(|c| &mut c.target)
    {
        *e = endpoints;
    }
    config
}

/// One kept-alive HTTP/1.1 connection: after the first request nothing in the path waits on a
/// timer (no connect timeout pending), so the paused clock moves only when the test says.
pub struct Client {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
}

impl Client {
    /// A connection to `addr`, whose requests name `host`.
    pub async fn to(addr: SocketAddr, host: &str) -> Client {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(conn);
        Client {
            send,
            host: host.to_owned(),
        }
    }

    pub async fn send(&mut self, method: &str, path: &str) -> (StatusCode, http::HeaderMap) {
        self.send_with(method, path, &[]).await
    }

    /// A request with these extra headers; its answer read to the end.
    pub async fn send_with(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, http::HeaderMap) {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self
            .send
            .send_request(req.body(Full::new(Bytes::new())).unwrap())
            .await
            .unwrap();
        let (parts, body) = resp.into_parts();
        body.collect().await.unwrap();
        (parts.status, parts.headers)
    }
}

/// A caller's proxy in front of a callee's proxy in front of an echoing app, both in process
/// (on the test's clock), and a client on the caller's local port for the callee.
pub struct Pair {
    pub app: Backend,
    pub callee: InProcess,
    pub caller: InProcess,
    pub client: Client,
}

pub async fn pair(mesh: &str, caller: &str, callee: &str) -> Pair {
    let app = backend(echo()).await;
    let f = Fixture::new(mesh);
    let callee_proxy = serve(inbound(f.config(callee), app.addr)).await;
    let config = with_endpoints(
        f.config(caller),
        callee,
        vec![callee_proxy.inbound.unwrap()],
    );
    let caller_proxy = serve(config).await;
    let client = Client::to(caller_proxy.upstreams[callee], callee).await;
    Pair {
        app,
        callee: callee_proxy,
        caller: caller_proxy,
        client,
    }
}
