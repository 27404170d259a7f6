//! The simulated proxies' side: each one's snapshot stream (merged and acknowledged as
//! `hopwise proxy` does), what they report having seen, waiting until every one of them has
//! seen a change, and batches of calls with a bound on those in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopwise_control::client::Client;
use hopwise_control::pb;
use hopwise_control::plane::delta;
use prost::Message;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use super::PHASE_LIMIT;
use super::mesh::{PROBE, SHARED, service_name};
use super::server::start_err;
use crate::error::LabError;

/// A simulated proxy.
#[derive(Clone)]
pub(super) struct Sim {
    pub(super) service: String,
    pub(super) token: String,
    pub(super) name: String,
    pub(super) client: Client,
}

/// What a subscriber saw.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    pub(super) proxy: usize,
    pub(super) at: Instant,
    pub(super) config_version: u64,
    /// Endpoints of `shared` in the snapshot.
    pub(super) shared: usize,
    /// Endpoints of the flipping service (`svc-001`) in the snapshot.
    pub(super) probe: usize,
    pub(super) bytes: usize,
}

/// What the subscribers report: each snapshot seen, or why a stream ended.
pub(super) type Reports = mpsc::UnboundedReceiver<Result<Seen, String>>;

/// A refused call, as the bench's error.
pub(super) fn call(what: &'static str) -> impl Fn(tonic::Status) -> LabError {
    move |s| LabError::Call {
        what,
        message: format!("{:?}: {}", s.code(), s.message()),
    }
}

/// A stream that ended with `message`, as the bench's error.
pub(super) fn stream_failed(message: String) -> LabError {
    LabError::Call {
        what: "a snapshot stream",
        message,
    }
}

/// Opens `sim`'s stream (asking for deltas unless `whole`); every snapshot is merged onto the
/// last one received, as `hopwise proxy` does, reported on `seen` and acknowledged.
pub(super) fn subscribe(
    idx: usize,
    sim: Sim,
    whole: bool,
    seen: mpsc::UnboundedSender<Result<Seen, String>>,
) {
    tokio::spawn(async move {
        if let Err(e) = follow(idx, &sim, whole, &seen).await {
            let _ = seen.send(Err(format!("{}: {e}", sim.name)));
        }
    });
}

/// The stream of one subscriber until it ends (`Ok`) or fails (why).
async fn follow(
    idx: usize,
    sim: &Sim,
    whole: bool,
    seen: &mpsc::UnboundedSender<Result<Seen, String>>,
) -> Result<(), String> {
    let mut client = sim.client.clone();
    let mut stream = client
        .subscribe(pb::SubscribeRequest {
            service: sim.service.clone(),
            token: sim.token.clone(),
            proxy: sim.name.clone(),
            admin_addr: String::new(),
            deltas: !whole,
        })
        .await
        .map_err(|e| e.message().to_owned())?
        .into_inner();
    let mut received: Option<pb::Snapshot> = None;
    while let Some(message) = stream.message().await.map_err(|e| e.message().to_owned())? {
        let at = Instant::now();
        let bytes = message.encoded_len();
        let snapshot = merge(received.as_ref(), message)?;
        if seen.send(Ok(seen_in(&snapshot, idx, at, bytes))).is_err() {
            return Ok(());
        }
        // As `hopwise proxy` does: acknowledge every snapshot.
        let _ = client
            .ack(pb::AckRequest {
                service: sim.service.clone(),
                version: snapshot.version,
                accepted: true,
                token: sim.token.clone(),
                proxy: sim.name.clone(),
                cert_ca_generation: snapshot.ca_generation,
                trust_bundle_applied: true,
                ..Default::default()
            })
            .await;
        received = Some(snapshot);
    }
    Ok(())
}

/// `message` as a whole snapshot: itself, or a delta applied to the last one received.
fn merge(base: Option<&pb::Snapshot>, message: pb::Snapshot) -> Result<pb::Snapshot, String> {
    match (base, message.base_version) {
        (_, 0) => Ok(message),
        (Some(base), v) if base.version == v => {
            delta::apply(base, message).map_err(|e| format!("a delta that does not apply: {e}"))
        }
        (base, v) => {
            let have = base.map_or(0, |b| b.version);
            Err(format!(
                "a delta on version {v}, but the last received is {have}"
            ))
        }
    }
}

/// What subscriber `proxy` reports of `snapshot`.
fn seen_in(snapshot: &pb::Snapshot, proxy: usize, at: Instant, bytes: usize) -> Seen {
    let endpoints = |service: &str| {
        snapshot
            .upstreams
            .iter()
            .find(|u| u.service == service)
            .map_or(0, |u| u.endpoints.len())
    };
    Seen {
        proxy,
        at,
        config_version: snapshot.config_version,
        shared: endpoints(SHARED),
        probe: endpoints(&service_name(PROBE)),
        bytes,
    }
}

/// Snapshots received while waiting: by the subscribers waited for, and by the others.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Received {
    pub(super) wanted: usize,
    pub(super) others: usize,
    /// Bytes of all of them.
    pub(super) bytes: usize,
}

/// Waits until every one of `proxies` subscribers has seen a snapshot for which `reached`
/// holds; returns each one's time from `t0`, and what they received meanwhile.
pub(super) async fn until_all(
    seen: &mut Reports,
    proxies: usize,
    t0: Instant,
    what: &str,
    reached: impl Fn(&Seen) -> bool,
) -> Result<(Vec<Duration>, Vec<Seen>, Received), LabError> {
    let wanted = vec![true; proxies];
    until_these(seen, &wanted, t0, what, reached).await
}

/// Waits until every subscriber `i` with `wanted[i]` has seen a snapshot for which `reached`
/// holds; returns each one's time from `t0`, and what every subscriber received meanwhile.
pub(super) async fn until_these(
    seen: &mut Reports,
    wanted: &[bool],
    t0: Instant,
    what: &str,
    reached: impl Fn(&Seen) -> bool,
) -> Result<(Vec<Duration>, Vec<Seen>, Received), LabError> {
    let proxies = wanted.iter().filter(|w| **w).count();
    let mut first: Vec<Option<Seen>> = vec![None; wanted.len()];
    let mut received = Received::default();
    let mut missing = proxies;
    let deadline = tokio::time::Instant::now() + PHASE_LIMIT;
    while missing > 0 {
        let next = tokio::time::timeout_at(deadline, seen.recv()).await;
        let s = match next {
            Ok(Some(Ok(s))) => s,
            Ok(Some(Err(e))) => return Err(stream_failed(e)),
            Ok(None) => {
                return Err(LabError::Failed(format!(
                    "every snapshot stream ended before {what}"
                )));
            }
            Err(_) => {
                return Err(LabError::Failed(format!(
                    "{missing} of {proxies} subscribers never saw {what} within {PHASE_LIMIT:?}"
                )));
            }
        };
        received.bytes += s.bytes;
        if !wanted.get(s.proxy).copied().unwrap_or(false) {
            received.others += 1;
            continue;
        }
        received.wanted += 1;
        if let Some(slot) = first.get_mut(s.proxy)
            && slot.is_none()
            && reached(&s)
        {
            *slot = Some(s);
            missing -= 1;
        }
    }
    let firsts: Vec<Seen> = first.into_iter().flatten().collect();
    let times = firsts
        .iter()
        .map(|s| s.at.saturating_duration_since(t0))
        .collect();
    Ok((times, firsts, received))
}

/// Drops what subscribers reported so far (before a measured change).
pub(super) fn drain(seen: &mut Reports) -> Result<(), LabError> {
    while let Ok(s) = seen.try_recv() {
        s.map_err(stream_failed)?;
    }
    Ok(())
}

/// Runs `f` on every item with at most `in_flight` at once. Returns each result (in the
/// items' order) with its latency, and the wall time of the whole batch.
pub(super) async fn batch<T, O, F, Fut>(
    items: Vec<T>,
    in_flight: usize,
    f: F,
) -> Result<(Vec<O>, Vec<Duration>, Duration), LabError>
where
    T: Send + 'static,
    O: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<O, LabError>> + Send + 'static,
{
    let limit = Arc::new(Semaphore::new(in_flight.max(1)));
    let f = Arc::new(f);
    let started = Instant::now();
    let mut set = JoinSet::new();
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let permit = limit
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| start_err(&e))?;
        let f = f.clone();
        set.spawn(async move {
            let t = Instant::now();
            let out = f(item).await;
            drop(permit);
            out.map(|o| (i, o, t.elapsed()))
        });
    }
    let mut results: Vec<Option<(O, Duration)>> = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (i, o, d) = joined.map_err(|e| start_err(&e))??;
        results[i] = Some((o, d));
    }
    let wall = started.elapsed();
    let mut outs = Vec::with_capacity(n);
    let mut latencies = Vec::with_capacity(n);
    for (o, d) in results.into_iter().flatten() {
        outs.push(o);
        latencies.push(d);
    }
    Ok((outs, latencies, wall))
}
