//! The rate client (`hopwise bench client --rate R --duration D`): requests started on a fixed
//! schedule (open loop) on as many kept-alive connections as keep it, up to a cap past which a
//! due request is counted as a stall; `start` on stdout when the measured phase begins.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::{ClientResult, Sender, Target, connect, emit, histogram, request_or_reconnect, result};
use crate::error::LabError;

#[derive(Default)]
struct RateState {
    idle: Mutex<Vec<Sender>>,
    hist: Mutex<Option<Histogram<u64>>>,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    opened: AtomicU64,
    missed: AtomicU64,
    reconnects: AtomicU64,
    max_connections: usize,
}

impl RateState {
    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(s) = idle.pop() {
            if !s.is_closed() {
                return Some(s);
            }
        }
        None
    }

    fn fail(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = self.first_error.lock()
            && f.is_none()
        {
            *f = Some(e);
        }
    }
}

/// Requests started on a fixed schedule (open loop), on as many kept-alive connections as are
/// needed to keep it.
pub(super) async fn at_rate(
    target: Target,
    rate: u64,
    connections: usize,
    warmup: Duration,
    duration: Duration,
    out: &mut dyn Write,
) -> Result<ClientResult, LabError> {
    let state = Arc::new(RateState {
        max_connections: connections,
        ..RateState::default()
    });
    let period = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    if !warmup.is_zero() {
        phase(&state, target, period, warmup, false).await;
    }
    if let Ok(mut h) = state.hist.lock() {
        *h = Some(histogram()?);
    }
    state.errors.store(0, Ordering::Relaxed);
    state.missed.store(0, Ordering::Relaxed);
    state.reconnects.store(0, Ordering::Relaxed);
    emit(out, "start")?;
    let start = Instant::now();
    phase(&state, target, period, duration, true).await;
    let elapsed = start.elapsed();
    let h = state
        .hist
        .lock()
        .ok()
        .and_then(|mut h| h.take())
        .map_or_else(histogram, Ok)?;
    let first = state.first_error.lock().ok().and_then(|f| f.clone());
    Ok(ClientResult {
        missed: state.missed.load(Ordering::Relaxed),
        reconnects: state.reconnects.load(Ordering::Relaxed),
        ..result(
            &h,
            state.errors.load(Ordering::Relaxed),
            first,
            elapsed,
            state.opened.load(Ordering::Relaxed) as usize,
        )
    })
}

async fn phase(
    state: &Arc<RateState>,
    target: Target,
    period: Duration,
    length: Duration,
    record: bool,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + length;
    let mut inflight = tokio::task::JoinSet::new();
    loop {
        tick.tick().await;
        if Instant::now() >= end {
            break;
        }
        while inflight.try_join_next().is_some() {}
        let send = match state.take_idle() {
            Some(s) => s,
            None if state.opened.load(Ordering::Relaxed) as usize >= state.max_connections => {
                // Every connection is waiting on the chain: not a failed request, a stall.
                if record {
                    state.missed.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            None => match connect(target).await {
                Ok(s) => {
                    state.opened.fetch_add(1, Ordering::Relaxed);
                    s
                }
                Err(e) => {
                    state.fail(e);
                    continue;
                }
            },
        };
        let state = state.clone();
        inflight.spawn(async move {
            let mut send = send;
            let t = Instant::now();
            match request_or_reconnect(&mut send, target).await {
                Ok(reconnected) => {
                    if reconnected {
                        state.reconnects.fetch_add(1, Ordering::Relaxed);
                        state.opened.fetch_add(1, Ordering::Relaxed);
                    }
                    if record {
                        let ns = t.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
                        if let Ok(mut h) = state.hist.lock()
                            && let Some(h) = h.as_mut()
                        {
                            let _ = h.record(ns.max(1));
                        }
                    }
                    if let Ok(mut idle) = state.idle.lock() {
                        idle.push(send);
                    }
                }
                Err(e) => state.fail(e),
            }
        });
    }
    while inflight.join_next().await.is_some() {}
}
