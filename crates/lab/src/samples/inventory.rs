//! The inventory sample the retry-chain demo fails on purpose: answers gRPC UNAVAILABLE
//! (trailers-only), HTTP 503 at once, or accepts and never answers; counts the requests it
//! receives. "Down" is a port where nothing listens.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request};
use hyper::body::Incoming;
use serde::Serialize;
use tokio::net::{TcpListener, TcpSocket};

use super::wire::{self, Handler, Server};
use crate::error::{LabError, io};

/// How the inventory fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InventoryFails {
    /// Nothing listens: connections are refused.
    Down,
    /// gRPC UNAVAILABLE at once, trailers-only (HTTP 200, `grpc-status: 14` in the headers).
    Unavailable,
    /// HTTP 503 at once.
    Http503,
    /// Accepts the request and never answers.
    Hang,
}

/// The inventory sample, or the address where it is down.
#[derive(Debug)]
pub struct Inventory {
    pub addr: SocketAddr,
    received: Arc<AtomicU64>,
    server: Option<Server>,
    /// The socket that keeps the port of an inventory that is down.
    _held: Option<TcpSocket>,
}

impl Inventory {
    pub async fn start(fails: InventoryFails) -> Result<Inventory, LabError> {
        let received = Arc::new(AtomicU64::new(0));
        if fails == InventoryFails::Down {
            // A port that is bound but not listening: connections to it are refused, and no
            // outgoing connection can be given it as its own port. (A port merely released
            // can be: connecting to it again and again from 127.0.0.1 eventually connects a
            // socket to itself, and the "down" inventory answers.)
            let held = TcpSocket::new_v4()
                .and_then(|s| s.bind(SocketAddr::from(([127, 0, 0, 1], 0))).map(|()| s))
                .map_err(io("cannot hold a port for the inventory that is down"))?;
            let addr = held
                .local_addr()
                .map_err(io("cannot hold a port for the inventory that is down"))?;
            return Ok(Inventory {
                addr,
                received,
                server: None,
                _held: Some(held),
            });
        }
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io("cannot start the inventory sample"))?;
        let addr = listener
            .local_addr()
            .map_err(io("cannot start the inventory sample"))?;
        let count = received.clone();
        let handler: Handler = Arc::new(move |_req: Request<Incoming>| {
            count.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match fails {
                    InventoryFails::Unavailable => {
                        let mut r = wire::respond(200, "application/grpc", Bytes::new());
                        let h = r.headers_mut();
                        h.insert("grpc-status", HeaderValue::from_static("14"));
                        h.insert(
                            "grpc-message",
                            HeaderValue::from_static("inventory is unavailable"),
                        );
                        r
                    }
                    InventoryFails::Hang => std::future::pending().await,
                    InventoryFails::Http503 | InventoryFails::Down => {
                        wire::respond(503, "text/plain", "inventory is shedding load\n")
                    }
                }
            })
        });
        Ok(Inventory {
            addr,
            received,
            server: Some(wire::serve(listener, handler, None)),
            _held: None,
        })
    }

    /// Requests that reached inventory; `None` when it is down (it cannot count).
    pub fn received(&self) -> Option<u64> {
        self.server
            .as_ref()
            .map(|_| self.received.load(Ordering::SeqCst))
    }
}
