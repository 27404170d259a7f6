//! A proxy's two lifecycles served on the test's own runtime, on loopback, without TLS: its
//! timers are the test's, so a test on a paused clock (`start_paused = true`) runs the proxy's
//! deadlines, per-try timeouts, back-offs and ejections in virtual time while every byte still
//! goes through real sockets. (`hopwise_proxy::start` runs workers on threads of their own,
//! whose clocks a test cannot pause.)

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hopwise_proxy::ProxyConfig;
use hopwise_proxy::config::Target;
use hopwise_proxy::inbound::Caller;
use hopwise_proxy::live::Live;
use hopwise_proxy::metrics::Metrics;
use hopwise_proxy::outbound::{Entry, Outbound};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use indexmap::IndexMap;
use tokio::net::TcpListener;

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
            let live = live.clone();
            async move { live.worker(0).outbound.handle(dispatch, req).await }
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
