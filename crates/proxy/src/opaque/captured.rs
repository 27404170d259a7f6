//! A captured connection (capture's listener, with its original destination mapped to a
//! service): a port the service declared opaque (or a whole-TCP service) goes into a tunnel at
//! once (the port a tunnel names is the app port the service's `ports` map the dialed one
//! to); any other port is detected ([`crate::tcp::detect`]): HTTP goes to `http`, the
//! caller's HTTP path over the same `TcpStream` (detection only peeked), and anything else
//! into a tunnel. This is the whole contract with capture: it calls
//! [`serve`] once per accepted connection, with the worker's configuration in force.

use bytes::Bytes;
use hopwise_model::ports::Target;
use tokio::net::TcpStream;

use super::outbound;
use crate::http_conn::Proto;
use crate::live::Live;
use crate::metrics::Metrics;
use crate::tcp::detect::{self, Detected};

/// Where a captured connection was going, as capture mapped it.
#[derive(Debug, Clone, Copy)]
pub struct Destination<'a> {
    /// The service its original destination's address belongs to.
    pub service: &'a str,
    /// The original destination's port.
    pub port: u16,
    /// Where that port goes on the callee's side (its service's `ports`).
    pub target: Target,
}

impl Destination<'_> {
    /// The app port a tunnel names: the listed target, else the port dialed (which a
    /// whole-TCP callee takes to its app, and any other only if it declared it).
    pub fn tunnel_port(&self) -> u16 {
        match self.target {
            Target::Port(p) => p,
            Target::App => self.port,
        }
    }
}

/// Serves one captured connection on worker `worker`'s state under `live`.
pub async fn serve<F, Fut>(
    live: &Live,
    worker: usize,
    metrics: &Metrics,
    tcp: TcpStream,
    to: Destination<'_>,
    http: F,
) where
    F: FnOnce(TcpStream, Proto) -> Fut,
    Fut: Future<Output = ()>,
{
    let state = live.worker(worker).outbound.cluster_named(to.service);
    let port = to.tunnel_port();
    let declared = state
        .and_then(|s| s.cluster.tcp.as_ref())
        .is_some_and(|t| t.whole() || t.ports.contains(&port));
    if declared {
        return outbound::serve(state, tcp, Bytes::new(), Some(port), metrics).await;
    }
    match detect::detect(tcp).await {
        Ok(Detected::Http(tcp, proto)) => http(tcp, proto).await,
        Ok(Detected::Opaque(tcp)) => {
            outbound::serve(state, tcp, Bytes::new(), Some(port), metrics).await;
        }
        Err(e) => tracing::debug!("captured connection to {}: {e}", to.service),
    }
}
