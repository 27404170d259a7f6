//! A captured connection (capture's listener, with its original destination mapped to a
//! service): a port the service declared opaque (or a whole-TCP service) goes into a tunnel at
//! once; any other port is detected ([`crate::tcp::detect`]): HTTP goes to `http`, the
//! caller's HTTP path over the same `TcpStream` (detection only peeked), and anything else
//! into a tunnel. This is the whole contract with capture: it calls
//! [`serve`] once per accepted connection, with the worker's configuration in force.

use bytes::Bytes;
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
    let declared = state
        .and_then(|s| s.cluster.tcp.as_ref())
        .is_some_and(|t| t.whole() || t.ports.contains(&to.port));
    if declared {
        return outbound::serve(state, tcp, Bytes::new(), Some(to.port), metrics).await;
    }
    match detect::detect(tcp).await {
        Ok(Detected::Http(tcp, proto)) => http(tcp, proto).await,
        Ok(Detected::Opaque(tcp)) => {
            outbound::serve(state, tcp, Bytes::new(), Some(to.port), metrics).await;
        }
        Err(e) => tracing::debug!("captured connection to {}: {e}", to.service),
    }
}
