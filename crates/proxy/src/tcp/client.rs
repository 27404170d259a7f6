//! The caller's side of a tunnel: one worker's HTTP/2 connections over mutual TLS to the copies
//! of one TCP upstream (ALPN [`super::TUNNEL_ALPN`], the callee's identity checked by the
//! handshake, once per connection), each carrying many CONNECT streams; a stream opened on a
//! copy chosen as HTTP tries choose ([`crate::balance`]: p2c, ejection), within the connect
//! timeout, on the next copy after a connect failure when the policy allows. Never after a
//! byte was sent: a tunnel that opened is never opened again.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use bytes::Bytes;
use h2::client::SendRequest;
use hopwise_model::TcpPolicy;
use http::{Method, Request, StatusCode};
use tower_service::Service;

use super::splice::Stream;
use crate::balance::connect::Failures;
use crate::balance::{Endpoint, Endpoints, InFlight};
use crate::upstream::Connector;

/// h2 settings of a tunnel connection, both sides: a stream's window bounds what one tunnel
/// holds unread, the connection's what all of them hold together.
pub const STREAM_WINDOW: u32 = 256 * 1024;
pub const CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;

/// Why a tunnel could not be opened; `reason` is the metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no copy of the service")]
    NoEndpoint,
    #[error("cannot reach the callee's proxy: {0}")]
    Connect(String),
    #[error("the callee's proxy did not answer within the connect timeout")]
    Timeout,
    #[error("the callee's proxy refused the tunnel: {0}")]
    Refused(StatusCode),
}

impl Refusal {
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NoEndpoint => "no-endpoint",
            Refusal::Connect(_) => "connect",
            Refusal::Timeout => "connect-timeout",
            Refusal::Refused(StatusCode::FORBIDDEN) => "forbidden",
            Refusal::Refused(StatusCode::NOT_FOUND) => "not-opaque",
            Refusal::Refused(StatusCode::SERVICE_UNAVAILABLE) => "overflow",
            Refusal::Refused(_) => "app-unreachable",
        }
    }

    /// A failure before anything was sent that another copy may not have: the callee's
    /// proxy unreachable, or its app (502, 504). A refusal by rule (403, 404, 503) is final.
    fn connect_failure(&self) -> bool {
        match self {
            Refusal::Connect(_) | Refusal::Timeout => true,
            Refusal::Refused(s) => {
                matches!(*s, StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT)
            }
            Refusal::NoEndpoint => false,
        }
    }
}

/// One worker's tunnel connections to one upstream's copies.
pub struct Tunnels {
    connector: Connector,
    /// The authority every CONNECT names: `<service>:<port>`.
    service: String,
    conns: Mutex<HashMap<SocketAddr, SendRequest<Bytes>>>,
}

impl std::fmt::Debug for Tunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnels")
            .field("service", &self.service)
            .finish()
    }
}

/// An open tunnel: its stream, and the copy's place in the balancer while it lives.
#[derive(Debug)]
pub struct Opened {
    pub stream: Stream,
    pub copy: SocketAddr,
    _in_flight: InFlight,
}

impl Tunnels {
    pub fn new(connector: Connector, service: &str) -> Tunnels {
        Tunnels {
            connector,
            service: service.to_owned(),
            conns: Mutex::new(HashMap::new()),
        }
    }

    /// A tunnel to `port` of the service, on the copies `endpoints` picks, tried as `policy`
    /// says. Each copy's result is recorded for ejection as a gateway failure or not.
    pub async fn open(
        &self,
        endpoints: &Endpoints,
        port: u16,
        policy: &TcpPolicy,
    ) -> Result<Opened, Refusal> {
        let failures = Failures {
            timed_out: || Refusal::Timeout,
            connect_failure: Refusal::connect_failure,
        };
        let what = ("tcp", self.service.as_str());
        let on = endpoints
            .connect_each(
                policy,
                what,
                failures,
                Refusal::NoEndpoint,
                |copy| async move { self.try_open(&copy, port).await },
            )
            .await?;
        Ok(Opened {
            stream: on.conn,
            copy: on.copy.addr,
            _in_flight: on.in_flight,
        })
    }

    async fn try_open(&self, copy: &Endpoint, port: u16) -> Result<Stream, Refusal> {
        let mut send = self.connection(copy.addr).await?;
        let req = Request::builder()
            .method(Method::CONNECT)
            .uri(format!("{}:{port}", self.service))
            .body(())
            .map_err(|e| Refusal::Connect(e.to_string()))?;
        let (answer, send_stream) = send
            .send_request(req, false)
            .map_err(|e| Refusal::Connect(e.to_string()))?;
        let resp = answer.await.map_err(|e| Refusal::Connect(e.to_string()))?;
        if resp.status() != StatusCode::OK {
            return Err(Refusal::Refused(resp.status()));
        }
        Ok(Stream {
            send: send_stream,
            recv: resp.into_body(),
        })
    }

    /// A ready connection to `copy`: the one kept, or a new one (handshake included) when it
    /// is gone or broken.
    async fn connection(&self, copy: SocketAddr) -> Result<SendRequest<Bytes>, Refusal> {
        let kept = lock(&self.conns).get(&copy).cloned();
        if let Some(send) = kept
            && let Ok(ready) = send.ready().await
        {
            return Ok(ready);
        }
        let mut connector = self.connector.clone();
        let uri = format!("http://{copy}")
            .parse()
            .map_err(|e: http::uri::InvalidUri| Refusal::Connect(e.to_string()))?;
        let io = connector
            .call(uri)
            .await
            .map_err(|e| Refusal::Connect(e.to_string()))?
            .into_inner();
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(16 * 1024)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| Refusal::Connect(e.to_string()))?;
        let service = self.service.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("tcp {service}: tunnel connection to {copy} ended: {e}");
            }
        });
        lock(&self.conns).insert(copy, send.clone());
        send.ready()
            .await
            .map_err(|e| Refusal::Connect(e.to_string()))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
