//! b's apps and the steady load into a's proxy. Each app answers its copy's name and counts
//! the requests that reach it from a (named by the identity header b's proxy sets); the load sends GETs at a fixed rate (a fresh connection each, as a small
//! app would) and tallies every answer by the copy that gave it, and every failure by what
//! came back. Both run on the demo's runtime, in this process.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hopwise_api::names::PEER_IDENTITY;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::error::{LabError, io};
use crate::samples::wire::{self, Server};

/// How long one request of the load may take before it counts as failed (a's route timeout is
/// 2 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Requests of the load in flight at once; a tick that finds this many waits for the next.
const IN_FLIGHT: usize = 64;

/// b's apps, one per copy: `b0`, `b1`, … answer their name.
#[derive(Debug)]
pub(super) struct Apps {
    servers: Vec<Server>,
    hits: Vec<Arc<AtomicU64>>,
}

impl Apps {
    pub(super) async fn start(copies: usize) -> Result<Apps, LabError> {
        let mut apps = Apps {
            servers: Vec::new(),
            hits: Vec::new(),
        };
        for i in 0..copies {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(io("cannot listen on 127.0.0.1"))?;
            let hits = Arc::new(AtomicU64::new(0));
            let counted = hits.clone();
            let name = format!("b{i}");
            let handler: wire::Handler = Arc::new(move |req| {
                // a's requests only: the copy's proxy also probes the app's health (registry
                // layout), without the identity header an inbound proxy sets.
                let from_a = req
                    .headers()
                    .get(PEER_IDENTITY)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.ends_with("/service/a"));
                if from_a {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                let name = name.clone();
                Box::pin(async move { wire::respond(200, "text/plain", name) })
            });
            apps.servers.push(wire::serve(listener, handler, None));
            apps.hits.push(hits);
        }
        Ok(apps)
    }

    pub(super) fn addrs(&self) -> Vec<SocketAddr> {
        self.servers.iter().map(|s| s.addr).collect()
    }

    /// Requests from a (through its proxy and the copy's) every app has received.
    pub(super) fn hits(&self) -> u64 {
        self.hits.iter().map(|h| h.load(Ordering::SeqCst)).sum()
    }
}

/// What the load saw in one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
    /// Answers by the copy that gave them.
    pub by_copy: BTreeMap<String, u64>,
    /// Failures by what came back: `503 connect-refused` (status and `x-hopwise-error`), or
    /// `no answer` (the connection refused or cut, or no answer in time).
    pub failures: BTreeMap<String, u64>,
}

/// The load while it runs.
#[derive(Debug)]
pub(super) struct Load {
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    task: JoinHandle<()>,
}

fn lock(t: &Mutex<Tally>) -> MutexGuard<'_, Tally> {
    match t.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Load {
    /// `rate` GETs a second into `target`, until [`Load::finish`].
    pub(super) fn start(target: SocketAddr, rate: u32) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let (stopped, counts) = (stop.clone(), tally.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut flying = JoinSet::new();
            while !stopped.load(Ordering::SeqCst) {
                tick.tick().await;
                while flying.try_join_next().is_some() {}
                if flying.len() >= IN_FLIGHT {
                    continue;
                }
                lock(&counts).sent += 1;
                flying.spawn(one(target, counts.clone()));
            }
            while flying.join_next().await.is_some() {}
        });
        Load { stop, tally, task }
    }

    /// Answers `copy` has given so far.
    pub(super) fn served(&self, copy: &str) -> u64 {
        lock(&self.tally).by_copy.get(copy).copied().unwrap_or(0)
    }

    /// Stops sending, waits for every request in flight, and returns the tally.
    pub(super) async fn finish(self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        lock(&self.tally).clone()
    }
}

async fn one(target: SocketAddr, tally: Arc<Mutex<Tally>>) {
    let got = tokio::time::timeout(REQUEST_TIMEOUT, wire::get(target, "/")).await;
    let mut t = lock(&tally);
    match got {
        Ok(Ok(r)) if r.status == 200 => {
            t.ok += 1;
            *t.by_copy.entry(r.text()).or_default() += 1;
        }
        Ok(Ok(r)) => {
            t.failed += 1;
            let why = format!(
                "{} {}",
                r.status,
                r.header("x-hopwise-error").unwrap_or("-")
            );
            *t.failures.entry(why).or_default() += 1;
        }
        Ok(Err(_)) | Err(_) => {
            t.failed += 1;
            *t.failures.entry("no answer".into()).or_default() += 1;
        }
    }
}
