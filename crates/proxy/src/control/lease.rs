//! This copy in the registry: registered once with its inbound and admin addresses, its lease
//! renewed, and the app's health (a GET on its health path) reported when it changes. A lease
//! granted through one replica is renewed through any other; only `unknown-lease` (NotFound)
//! makes the copy register again.

use std::net::SocketAddr;
use std::time::Duration;

use super::{Client, ControlError, ControlOptions, pb};
use crate::server::State;

/// Registers this copy (once) with its inbound and admin addresses, renews its lease, and
/// reports the app's health when it changes.
pub(super) async fn keep_lease(
    opts: &ControlOptions,
    client: &mut Client,
    (inbound, admin): (SocketAddr, Option<SocketAddr>),
    lease: &mut Option<u64>,
    healthy: &mut Option<bool>,
    state: &State,
) -> Result<(), ControlError> {
    let refused = |s: tonic::Status| ControlError::Refused(s.message().to_owned());
    // Listening on every address: the one others reach it at is the advertised one.
    let reachable = |mut addr: SocketAddr| {
        if let Some(ip) = opts.advertise.filter(|_| addr.ip().is_unspecified()) {
            addr.set_ip(ip);
        }
        addr
    };
    let (inbound, admin) = (reachable(inbound), admin.map(reachable));
    if let Some(id) = *lease {
        match client
            .renew(pb::LeaseRequest {
                lease_id: id,
                token: opts.token.current(),
            })
            .await
        {
            Ok(_) => {}
            // Expired meanwhile (a long pause, an embedded control plane that restarted):
            // register again, now.
            Err(s) if s.code() == tonic::Code::NotFound => {
                tracing::info!("lease {id:x}: {}; registering again", s.message());
                *lease = None;
                *healthy = None;
            }
            // The replica (or its store) did not answer: the lease may be alive; another
            // replica is tried.
            Err(s) => return Err(refused(s)),
        }
    }
    let id = match *lease {
        Some(id) => id,
        None => {
            let id = client
                .register(pb::RegisterRequest {
                    token: opts.token.current(),
                    inbound_addr: inbound.to_string(),
                    ttl_ms: opts.lease_ttl.as_millis() as u64,
                    admin_addr: admin.map(|a| a.to_string()).unwrap_or_default(),
                    labels: opts.labels.clone(),
                })
                .await
                .map_err(refused)?
                .into_inner()
                .lease_id;
            *lease = Some(id);
            id
        }
    };
    let now_healthy = state.ready() && probe(state.config().app, &opts.health_path).await;
    if *healthy != Some(now_healthy) {
        client
            .set_health(pb::SetHealthRequest {
                lease_id: id,
                healthy: now_healthy,
                token: opts.token.current(),
            })
            .await
            .map_err(refused)?;
        *healthy = Some(now_healthy);
    }
    Ok(())
}

/// A GET on the app's health path; healthy if it answers below 500 within a second.
async fn probe(app: Option<SocketAddr>, path: &str) -> bool {
    let Some(app) = app else { return true };
    let attempt = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(app).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nhost: {app}\r\nconnection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.ok()?;
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).await.ok()?;
        let code: u16 = std::str::from_utf8(&head[9..12]).ok()?.parse().ok()?;
        Some(code < 500)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), attempt).await,
        Ok(Some(true))
    )
}
