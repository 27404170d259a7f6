//! `hopwise up --load RATE`: steady requests into the entry service, and a one-line summary
//! every few seconds. The load client is outside the mesh (as a browser would be): the entry's
//! proxy has no plain-HTTP port for outsiders, so it calls the entry service's app directly,
//! HTTP/1.1 keep-alive (or gRPC when the entry speaks gRPC), one copy after another.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::samples::pb;

/// How long one request may take before it counts as `timeout`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the summary line is printed.
const EVERY: Duration = Duration::from_secs(3);

/// Where the load goes.
#[derive(Debug, Clone)]
pub struct LoadTarget {
    pub service: String,
    /// Requests per second.
    pub rate: f64,
    pub grpc: bool,
    /// The entry's copies' apps, called in turn; or the gateway's listener alone.
    pub apps: Vec<SocketAddr>,
    /// The gateway the load goes through, if any (`apps` is then its listener).
    pub via: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    pub ok: u64,
    /// By HTTP status, gRPC code (`grpc Unavailable`), `timeout` or `connection`.
    pub errors: BTreeMap<String, u64>,
}

/// The counts so far, shared by the requests in flight.
#[derive(Debug, Default)]
pub struct Stats(Mutex<Counts>);

impl Stats {
    pub fn new() -> Arc<Stats> {
        Arc::new(Stats::default())
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn counts(&self) -> Counts {
        self.lock().clone()
    }

    fn done(&self, outcome: Result<(), String>) {
        let mut c = self.lock();
        match outcome {
            Ok(()) => c.ok += 1,
            Err(e) => *c.errors.entry(e).or_default() += 1,
        }
    }

    /// `load: sent 300 · ok 295 · errors 502×5 · in flight 0`
    pub fn summary(&self, label: &str) -> String {
        let c = self.counts();
        let done = c.ok + c.errors.values().sum::<u64>();
        let errors = if c.errors.is_empty() {
            "none".to_owned()
        } else {
            c.errors
                .iter()
                .map(|(k, v)| format!("{k}×{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "{label}: sent {} · ok {} · errors {errors} · in flight {}",
            c.sent,
            c.ok,
            c.sent.saturating_sub(done)
        )
    }
}

/// Sends until dropped, printing a summary line to `out` every few seconds.
pub async fn run(t: &LoadTarget, stats: &Arc<Stats>, out: &mut dyn Write) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let http: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(connector);
    let grpc: Vec<_> = t
        .apps
        .iter()
        .filter_map(|a| {
            tonic::transport::Channel::from_shared(format!("http://{a}"))
                .ok()
                .map(|c| pb::sample_client::SampleClient::new(c.connect_lazy()))
        })
        .collect();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / t.rate));
    let mut report = tokio::time::interval(EVERY);
    report.tick().await;
    let mut n: usize = 0;
    let label = match &t.via {
        Some(g) => format!("load → {g} → {}", t.service),
        None => format!("load → {}", t.service),
    };
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if t.apps.is_empty() {
                    continue;
                }
                let i = n % t.apps.len();
                n += 1;
                stats.lock().sent += 1;
                let stats = stats.clone();
                if t.grpc {
                    let Some(mut client) = grpc.get(i).cloned() else { continue };
                    tokio::spawn(async move {
                        let call = client.call(pb::CallRequest { from: "load".to_owned() });
                        let outcome = match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
                            Ok(Ok(_)) => Ok(()),
                            Ok(Err(s)) => Err(format!("grpc {:?}", s.code())),
                            Err(_) => Err("timeout".to_owned()),
                        };
                        stats.done(outcome);
                    });
                } else {
                    let app = t.apps[i];
                    let http = http.clone();
                    tokio::spawn(async move {
                        let outcome = match tokio::time::timeout(REQUEST_TIMEOUT, get(&http, app)).await {
                            Ok(r) => r,
                            Err(_) => Err("timeout".to_owned()),
                        };
                        stats.done(outcome);
                    });
                }
            }
            _ = report.tick() => {
                let _ = writeln!(out, "{}", stats.summary(&label));
                let _ = out.flush();
            }
        }
    }
}

async fn get(http: &Client<HttpConnector, Full<Bytes>>, app: SocketAddr) -> Result<(), String> {
    let req = Request::builder()
        .uri(format!("http://{app}/"))
        .header(header::HOST, app.to_string())
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = http
        .request(req)
        .await
        .map_err(|_| "connection".to_owned())?;
    let status = resp.status();
    let _ = resp.into_body().collect().await;
    if status.is_success() {
        Ok(())
    } else {
        Err(status.as_u16().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_errors_by_kind() {
        let s = Stats::new();
        s.lock().sent = 4;
        s.done(Ok(()));
        s.done(Err("502".into()));
        s.done(Err("502".into()));
        assert_eq!(
            s.summary("load"),
            "load: sent 4 · ok 1 · errors 502×2 · in flight 1"
        );
    }
}
