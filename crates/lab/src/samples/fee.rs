//! The seed's fee service. Its work endpoint serves TLS with the certificate
//! `write_dev_certs` issues to a service outside the mesh (localhost / 127.0.0.1, signed by the
//! mesh's development CA); the first two reads answer 503 "temporary"; every payment is
//! processed (collected += 1) and the first one answers 503 all the same, as if the answer were
//! lost in transit. A payment carrying an `Idempotency-Key` it has seen is answered with the
//! stored result and not collected again. Its plain management endpoint reports the counters
//! (`/count`) and resets them (`/reset`). `hopwise up`'s fee sample runs the same [`FeeState`]
//! without the seed's scripted failures (its faults come from its knobs).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use serde::Serialize;
use serde_json::json;
use tokio::net::TcpListener;

use super::wire::{self, Handler, Server, tls_acceptor};
use crate::error::{LabError, io};

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
    pub async fn start(work: TcpListener, certs: &Path) -> Result<Fee, LabError> {
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
    pub async fn reset(&self) -> Result<(), LabError> {
        self.ask("/reset").await.map(|_| ())
    }

    /// The counters, through the management endpoint.
    pub async fn counters(&self) -> Result<FeeCounters, LabError> {
        self.ask("/count").await
    }

    async fn ask(&self, path: &str) -> Result<FeeCounters, LabError> {
        let r = wire::get(self.admin, path)
            .await
            .map_err(|e| LabError::Failed(format!("the fee's management endpoint: {e}")))?;
        serde_json::from_slice(&r.body).map_err(|e| {
            LabError::Failed(format!(
                "the fee's management endpoint answered {}: {e}",
                r.text()
            ))
        })
    }
}
