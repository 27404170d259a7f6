//! A gateway's listeners in a worker ([`crate::gateway`]): the TLS handshake by server name
//! within the header-read allowance, then every request through the front door's admission
//! before the outbound path routes it as [`Dispatch::Gateway`]. Served under the same cap,
//! timers and head size as every listener (`super`).

use std::cell::RefCell;
use std::convert::Infallible;

use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::Conn;
use crate::conn::Guard;
use crate::gateway::Client;
use crate::http_conn::Proto;
use crate::metrics::{Direction, Metrics};
use crate::outbound::Dispatch;

impl Conn {
    /// A gateway's TLS front door: the handshake within the header-read allowance (a server
    /// name no certificate serves ends it), then HTTP by ALPN.
    pub(super) async fn serve_gateway_tls(
        &self,
        tcp: TcpStream,
        guard: Guard,
        drain: watch::Receiver<bool>,
        metrics: &Metrics,
    ) {
        let Some(acceptor) = self.front.as_ref().and_then(|f| f.acceptor.clone()) else {
            return;
        };
        let from = tcp.peer_addr().ok().map(|a| a.ip());
        let handshake = Box::pin(tokio::time::timeout(self.header_read, acceptor.accept(tcp)));
        match handshake.await {
            Ok(Ok(tls)) => {
                metrics.handshake(Direction::Outbound, true);
                let tls = Box::new(tls);
                let proto = Proto::of_alpn(tls.get_ref().1.alpn_protocol());
                let client = Client::new(from, true);
                Box::pin(self.serve_gateway(tls, proto, client, guard, drain)).await;
            }
            Ok(Err(e)) => {
                metrics.handshake(Direction::Outbound, false);
                tracing::debug!("gateway handshake refused: {e}");
            }
            Err(_) => metrics.handshake(Direction::Outbound, false),
        }
    }

    /// A gateway's request: through the front door ([`crate::gateway::Front::admit`]: forged
    /// headers gone, the client's address told, switches refused, body size, rate limits), then
    /// routed by the gateway's own routes on the outbound path, with the gateway's identity.
    pub(super) async fn serve_gateway<I>(
        &self,
        io: I,
        proto: Proto,
        client: Client,
        guard: Guard,
        drain: watch::Receiver<bool>,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Some(front) = self.front.clone() else {
            return;
        };
        let live = RefCell::new(self.state.cache());
        let (w, metrics) = (self.worker, self.state.metrics.clone());
        let svc = service_fn(move |mut req: hyper::Request<Incoming>| {
            // Admission is synchronous: decided before the request's future, which then holds
            // no reference to the front door.
            let admitted = front.admit(&mut req, &client, &metrics);
            let live = live.borrow_mut().load().clone();
            async move {
                let outbound = &live.worker(w).outbound;
                if let Err(err) = admitted {
                    return Ok::<_, Infallible>(outbound.refuse(req, err));
                }
                Ok(outbound.handle(&Dispatch::Gateway, req).await)
            }
        });
        let svc = guard.track(svc);
        let servers = &self.servers;
        servers.serve(io, proto, false, svc, guard, drain).await;
    }
}
