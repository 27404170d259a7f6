//! The measured changes. Over `--rounds` rounds, a registry change (a new copy of `shared`,
//! which every service calls, turns healthy) and a configuration change (`Apply` of a mesh
//! file that changes every call to `shared`), each timed from the call to each subscriber's
//! receipt of the snapshot that carries it. Then the sustainable rate of health changes: the
//! copies of `svc-001` (called by `svc-000` only) turn unhealthy and healthy again, `--rounds`
//! times, as fast as the calls go, until every caller has the final state.

use std::time::{Duration, Instant};

use hopwise_control::client::{self, Client};
use hopwise_control::pb;

use super::load::{register_copy, set_health_of, token_of};
use super::mesh::{PROBE, SHARED, mesh_text, service_name};
use super::report::{Flips, Percentiles, Spread, round3};
use super::server::{Server, Tokens};
use super::sim::{Received, Reports, Sim, call, drain, stream_failed, until_all, until_these};
use super::{BenchArgs, USER_HZ};
use crate::error::LabError;

/// How the controlplane's time is let settle around a change (acknowledgements included).
const SETTLE: Duration = Duration::from_millis(200);

/// What one kind of change took, over the rounds.
#[derive(Debug, Default)]
struct Rounds {
    times: Vec<Duration>,
    last: Vec<Duration>,
    bytes: usize,
    /// The plane's CPU ticks from each call until the acknowledgements settled.
    ticks: u64,
}

impl Rounds {
    fn add(&mut self, times: Vec<Duration>, received: &Received) {
        self.bytes += received.bytes;
        self.last
            .push(times.iter().max().copied().unwrap_or_default());
        self.times.extend(times);
    }

    fn spread(&self, change: &str, args: &BenchArgs) -> Spread {
        let per_change = (self.bytes as f64 / args.rounds as f64).round();
        Spread {
            change: change.into(),
            rounds: args.rounds,
            subscribers: args.proxies,
            latency_ms: Percentiles::of(&self.times),
            last_receipt_ms: self
                .last
                .iter()
                .map(|d| round3(d.as_secs_f64() * 1e3))
                .collect(),
            bytes_per_change: per_change,
            bytes_per_subscriber: per_change / args.proxies as f64,
            cpu_ms_per_change: round3(self.ticks as f64 / USER_HZ * 1e3 / args.rounds as f64),
        }
    }
}

/// The registry and the configuration changes, `--rounds` of each: (configuration, registry).
pub(super) async fn measure(
    args: &BenchArgs,
    server: &Server,
    access: &client::Server,
    tokens: &Tokens,
    seen: &mut Reports,
) -> Result<(Spread, Spread), LabError> {
    let mut admin = client::connect(access).await?;
    let shared_token = token_of(tokens, SHARED);
    let (mut config, mut registry) = (Rounds::default(), Rounds::default());
    for round in 1..=args.rounds {
        registry_round(
            args,
            server,
            &mut admin,
            &shared_token,
            round,
            seen,
            &mut registry,
        )
        .await?;
        config_round(args, server, &mut admin, round, seen, &mut config).await?;
    }
    Ok((
        config.spread(
            "Apply of a mesh file that changes every call to `shared`; from the call",
            args,
        ),
        registry.spread(
            "SetHealth(true) of a new copy of `shared`, which every service calls; \
             from the call",
            args,
        ),
    ))
}

/// A registry change: a new copy of `shared` turns healthy; every subscriber calls it.
async fn registry_round(
    args: &BenchArgs,
    server: &Server,
    admin: &mut Client,
    token: &str,
    round: usize,
    seen: &mut Reports,
    rounds: &mut Rounds,
) -> Result<(), LabError> {
    let addr = format!("192.168.{}.{}:7001", round >> 8, round & 255);
    let lease = register_copy(admin, token, addr).await?;
    tokio::time::sleep(SETTLE).await;
    drain(seen)?;
    let cpu0 = server.cpu_ticks();
    let t0 = Instant::now();
    admin
        .set_health(pb::SetHealthRequest {
            lease_id: lease,
            healthy: true,
            token: token.to_owned(),
        })
        .await
        .map_err(call("SetHealth"))?;
    let (times, _, r) = until_all(seen, args.proxies, t0, "the new copy", |s| {
        s.shared >= round
    })
    .await?;
    rounds.add(times, &r);
    tokio::time::sleep(SETTLE).await;
    rounds.ticks += server.cpu_ticks().saturating_sub(cpu0);
    Ok(())
}

/// A configuration change: every call to `shared` gets another timeout.
async fn config_round(
    args: &BenchArgs,
    server: &Server,
    admin: &mut Client,
    round: usize,
    seen: &mut Reports,
    rounds: &mut Rounds,
) -> Result<(), LabError> {
    drain(seen)?;
    let cpu0 = server.cpu_ticks();
    let t0 = Instant::now();
    let applied = admin
        .apply(pb::ApplyRequest {
            mesh_yaml: mesh_text(args.services, round),
            file_name: format!("bench-{round}.yaml"),
        })
        .await
        .map_err(call("Apply"))?
        .into_inner();
    if !applied.applied || applied.unchanged {
        return Err(LabError::Call {
            what: "Apply",
            message: applied.message,
        });
    }
    let target = applied.config_version;
    let (times, _, r) = until_all(seen, args.proxies, t0, "the new configuration", |s| {
        s.config_version >= target
    })
    .await?;
    rounds.add(times, &r);
    tokio::time::sleep(SETTLE).await;
    rounds.ticks += server.cpu_ticks().saturating_sub(cpu0);
    Ok(())
}

/// The health flips of `svc-001`'s copies; `None` when it holds none (one service, or fewer
/// copies than proxies): nothing flips.
pub(super) async fn flips(
    args: &BenchArgs,
    server: &Server,
    leases: Vec<(Sim, u64)>,
    seen: &mut Reports,
) -> Result<Option<Flips>, LabError> {
    let probe = service_name(PROBE);
    let copies: Vec<(Sim, u64)> = leases
        .into_iter()
        .filter(|(s, _)| s.service == probe)
        .collect();
    if copies.is_empty() {
        return Ok(None);
    }
    let callers: Vec<bool> = (0..args.proxies).map(|i| i % args.services == 0).collect();
    tokio::time::sleep(SETTLE).await;
    drain(seen)?;
    let mut received = Received::default();
    let cpu0 = server.cpu_ticks();
    let t0 = Instant::now();
    for pass in 0..2 * args.rounds {
        let healthy = pass % 2 == 1;
        set_health_of(copies.clone(), healthy, args.concurrency).await?;
        let want = if healthy { copies.len() } else { 0 };
        let (_, _, r) = until_these(seen, &callers, t0, "the flipped copies", |s| {
            s.probe == want
        })
        .await?;
        received.wanted += r.wanted;
        received.others += r.others;
        received.bytes += r.bytes;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = server.cpu_ticks().saturating_sub(cpu0) as f64 / USER_HZ;
    // Whatever else arrived by now (nothing should: no other snapshot changed).
    tokio::time::sleep(SETTLE).await;
    late(seen, &callers, &mut received)?;
    Ok(Some(flips_of(
        args, &copies, &callers, wall, cpu, &received,
    )))
}

/// Counts what arrived after the last wait into `received`.
fn late(seen: &mut Reports, callers: &[bool], received: &mut Received) -> Result<(), LabError> {
    while let Ok(s) = seen.try_recv() {
        let s = s.map_err(stream_failed)?;
        received.bytes += s.bytes;
        if callers.get(s.proxy).copied().unwrap_or(false) {
            received.wanted += 1;
        } else {
            received.others += 1;
        }
    }
    Ok(())
}

/// The figures of the flips: `wall` seconds, `cpu` seconds of the plane.
fn flips_of(
    args: &BenchArgs,
    copies: &[(Sim, u64)],
    callers: &[bool],
    wall: f64,
    cpu: f64,
    received: &Received,
) -> Flips {
    let changes = 2 * args.rounds * copies.len();
    let per = |x: f64| if changes > 0 { x / changes as f64 } else { 0.0 };
    Flips {
        change: format!(
            "SetHealth of the {} copies of `{}` (only `{}` calls it): down, then up, \
             {} times, {} in flight; until every caller has the final state",
            copies.len(),
            service_name(PROBE),
            service_name(0),
            args.rounds,
            args.concurrency.min(copies.len().max(1)),
        ),
        changes,
        callers: callers.iter().filter(|c| **c).count(),
        seconds: round3(wall),
        per_second: if wall > 0.0 {
            (changes as f64 / wall).round()
        } else {
            0.0
        },
        cpu_ms_per_change: round3(per(cpu * 1e3)),
        snapshots_to_callers: received.wanted,
        snapshots_to_others: received.others,
        bytes_per_change: per(received.bytes as f64).round(),
    }
}
