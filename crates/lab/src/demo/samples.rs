//! The sample services the demos fail on purpose, each with its own counters.
//!
//! - [`Inventory`]: answers gRPC UNAVAILABLE (trailers-only), HTTP 503 at once, or accepts and
//!   never answers; counts the requests it receives. "Down" is a port where nothing listens.
//! - [`Fee`]: the seed's fee service. Its work endpoint serves TLS with the certificate
//!   `write_dev_certs` issues to a service outside the mesh (localhost / 127.0.0.1, signed by
//!   the mesh's development CA); the first two reads answer 503 "temporary"; every payment is
//!   processed (collected += 1) and the first one answers 503 all the same, as if the answer
//!   were lost in transit. A payment carrying an `Idempotency-Key` it has seen is answered
//!   with the stored result and not collected again. Its plain management endpoint reports the
//!   counters (`/count`) and resets them (`/reset`). `hopwise up`'s fee sample runs the same
//!   [`FeeState`] without the seed's scripted failures (its faults come from its knobs).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Serialize;
use serde_json::json;
use tokio::net::{TcpListener, TcpSocket};
use tokio_rustls::TlsAcceptor;

use super::wire::{self, Handler, Server};
use super::{DemoError, io};

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
    pub async fn start(fails: InventoryFails) -> Result<Inventory, DemoError> {
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

/// The fee service's counters.
#[derive(Debug, Default)]
pub struct FeeState {
    /// The seed's script: the first two reads answer 503, the first payment's answer is lost.
    seed: bool,
    read: AtomicU64,
    payment: AtomicU64,
    collected: AtomicU64,
    deduplicated: AtomicU64,
    /// The result stored for each `Idempotency-Key` already processed.
    results: Mutex<HashMap<String, serde_json::Value>>,
}

/// What the management endpoint reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FeeCounters {
    pub read: u64,
    pub payment: u64,
    pub collected: u64,
    pub deduplicated: u64,
}

impl FeeState {
    /// With `seed`, the seed's scripted failures; without, every request succeeds.
    pub fn new(seed: bool) -> FeeState {
        FeeState {
            seed,
            ..FeeState::default()
        }
    }

    fn counters(&self) -> FeeCounters {
        FeeCounters {
            read: self.read.load(Ordering::SeqCst),
            payment: self.payment.load(Ordering::SeqCst),
            collected: self.collected.load(Ordering::SeqCst),
            deduplicated: self.deduplicated.load(Ordering::SeqCst),
        }
    }

    fn reset(&self) {
        for c in [
            &self.read,
            &self.payment,
            &self.collected,
            &self.deduplicated,
        ] {
            c.store(0, Ordering::SeqCst);
        }
        self.results_mut().clear();
    }

    fn results_mut(&self) -> std::sync::MutexGuard<'_, HashMap<String, serde_json::Value>> {
        match self.results.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The seed's fee.mjs, request for request, plus deduplication by `Idempotency-Key`.
    pub fn work(&self, path: &str, key: Option<String>) -> Response<Full<Bytes>> {
        if path == "/penalty/pay" {
            let payment = self.payment.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(k) = &key
                && let Some(stored) = self.results_mut().get(k).cloned()
            {
                // A repeat: the stored result, and nothing collected again.
                self.deduplicated.fetch_add(1, Ordering::SeqCst);
                return wire::json(200, &stored);
            }
            // The record is processed; the first response is treated as lost in transit.
            let collected = self.collected.fetch_add(1, Ordering::SeqCst) + 1;
            let result = json!({ "collected": collected, "amount": 12.5 });
            if let Some(k) = key {
                self.results_mut().insert(k, result.clone());
            }
            let code = if self.seed && payment == 1 { 503 } else { 200 };
            return wire::json(code, &result);
        }
        let read = self.read.fetch_add(1, Ordering::SeqCst) + 1;
        // The first two read requests are temporarily rejected.
        if self.seed && read <= 2 {
            wire::json(503, &json!({ "error": "temporary" }))
        } else {
            wire::json(200, &json!({ "balance": 12.5 }))
        }
    }
}

/// The fee service: its TLS work endpoint and its plain management endpoint.
#[derive(Debug)]
pub struct Fee {
    pub work: SocketAddr,
    pub admin: SocketAddr,
    _servers: [Server; 2],
}

impl Fee {
    /// Serves the work endpoint on `work` with `<certs>/fee.pem` and `<certs>/fee-key.pem`.
    pub async fn start(work: TcpListener, certs: &Path) -> Result<Fee, DemoError> {
        let acceptor = tls_acceptor(certs, "fee")?;
        let state = Arc::new(FeeState::new(true));
        let work_addr = work
            .local_addr()
            .map_err(io("cannot start the fee service"))?;
        let s = state.clone();
        let work_handler: Handler = Arc::new(move |req: Request<Incoming>| {
            let key = req
                .headers()
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let resp = s.work(req.uri().path(), key);
            Box::pin(async move { resp })
        });
        let admin = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io("cannot start the fee service's management endpoint"))?;
        let admin_addr = admin
            .local_addr()
            .map_err(io("cannot start the fee service's management endpoint"))?;
        let admin_handler: Handler = Arc::new(move |req: Request<Incoming>| {
            if req.uri().path() == "/reset" {
                state.reset();
            }
            let c = state.counters();
            Box::pin(async move { wire::json(200, &json!(c)) })
        });
        Ok(Fee {
            work: work_addr,
            admin: admin_addr,
            _servers: [
                wire::serve(work, work_handler, Some(acceptor)),
                wire::serve(admin, admin_handler, None),
            ],
        })
    }

    /// Resets the counters through the management endpoint, as the seed's rig does.
    pub async fn reset(&self) -> Result<(), DemoError> {
        self.ask("/reset").await.map(|_| ())
    }

    /// The counters, through the management endpoint.
    pub async fn counters(&self) -> Result<FeeCounters, DemoError> {
        self.ask("/count").await
    }

    async fn ask(&self, path: &str) -> Result<FeeCounters, DemoError> {
        let r = wire::get(self.admin, path)
            .await
            .map_err(|e| DemoError::Failed(format!("the fee's management endpoint: {e}")))?;
        serde_json::from_slice(&r.body).map_err(|e| {
            DemoError::Failed(format!(
                "the fee's management endpoint answered {}: {e}",
                r.text()
            ))
        })
    }
}

/// TLS with `<certs>/<name>.pem` and `<certs>/<name>-key.pem` (as `hopwise certs` writes them).
pub fn tls_acceptor(certs: &Path, name: &str) -> Result<TlsAcceptor, DemoError> {
    let bad = |what: &str, e: String| DemoError::Failed(format!("the {name}'s {what}: {e}"));
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(certs.join(format!("{name}.pem")))
            .map_err(|e| bad("certificate", e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad("certificate", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_file(certs.join(format!("{name}-key.pem")))
        .map_err(|e| bad("key", e.to_string()))?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("TLS configuration", e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| bad("TLS configuration", e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
