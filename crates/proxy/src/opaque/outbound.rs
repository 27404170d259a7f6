//! An app's TCP connection to a TCP upstream, read top to bottom: the upstream (a local port's,
//! or a captured destination's) → tunnels need mutual TLS → `limits.max_connections` (over it:
//! refused at once, never queued) → a tunnel on a copy ([`crate::tcp::client`]: balancing,
//! ejection, the connect timeout, the next copy after a connect failure) → splice until both
//! ways end. A refused connection is reset, so the app sees a failure, not an empty answer.

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::cluster::ClusterState;
use crate::metrics::{Direction, Metrics};
use crate::tcp::splice::{self, Counts};

/// Carries `tcp` (whose first bytes `first` were read already, when detected) to `port` of
/// `state`'s upstream; `port` `None`: the upstream's default (a local port names no port).
pub async fn serve(
    state: Option<&ClusterState>,
    mut tcp: TcpStream,
    first: Bytes,
    port: Option<u16>,
    metrics: &Metrics,
) {
    let Some(state) = state else {
        metrics.tcp.refused(Direction::Outbound, "", "no-route");
        return splice::reset(&tcp);
    };
    let service = state.cluster.service.as_str();
    let refuse = |tcp: &TcpStream, reason| {
        metrics.tcp.refused(Direction::Outbound, service, reason);
        splice::reset(tcp);
    };
    let Some((tunnels, policy)) = &state.tunnels else {
        // An HTTP upstream's bytes that are not HTTP, or a proxy without certificates.
        let reason = if state.cluster.tcp.is_none() {
            "not-opaque"
        } else {
            "no-tls"
        };
        return refuse(&tcp, reason);
    };
    let Some(_slot) = state.shared.connections.try_take() else {
        metrics.limit_tripped(service, "max_connections");
        return refuse(&tcp, "overflow");
    };
    let declared = state.cluster.tcp.as_ref();
    let port = port.unwrap_or_else(|| declared.map_or(0, |t| t.default_port()));
    // A port the callee did not declare opaque is refused here: its proxy would refuse it too.
    if declared.is_none_or(|t| t.target_port(port, port).is_none()) {
        return refuse(&tcp, "not-opaque");
    }
    let opened = match tunnels.open(&state.shared.endpoints, port, policy).await {
        Ok(o) => o,
        Err(e) => {
            tracing::debug!("tcp {service}: {e}");
            return refuse(&tcp, e.reason());
        }
    };
    let handles = metrics.tcp.opened(Direction::Outbound, service);
    let start = Instant::now();
    let counts = Counts {
        from_tcp: &handles.to_callee,
        to_tcp: &handles.to_caller,
    };
    let end = splice::splice(&mut tcp, opened.stream, first, policy.idle_timeout, counts).await;
    tracing::debug!("tcp {service} via {}: {end:?}", opened.copy);
    handles.closed(start.elapsed());
}
