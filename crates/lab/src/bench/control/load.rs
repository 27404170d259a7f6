//! The load before the measured changes, phase by phase, each one timed: the simulated
//! proxies connect, `Issue` their CSRs (made beforehand, so the figure is the control plane's
//! signing rate, not this process's key generation), `Subscribe`, `Register` their share of
//! the copies, turn them healthy (`SetHealth`) and `Renew` every lease once.

use std::time::{Duration, Instant};

use hopwise_control::client::{self, Client};
use hopwise_control::pb;
use tokio::sync::mpsc;

use super::mesh::{copy_addr, service_name};
use super::report::Rate;
use super::server::{Server, Tokens, start_err};
use super::sim::{Reports, Sim, batch, call, subscribe, until_all};
use super::{BenchArgs, TTL_MS};
use crate::error::LabError;

/// The proxies with their streams open and their copies registered and healthy.
pub(super) struct Loaded {
    pub(super) issue: Rate,
    pub(super) subscribe: Rate,
    pub(super) register: Rate,
    pub(super) set_health: Rate,
    pub(super) renew: Rate,
    /// Bytes of the smallest and the largest first snapshot.
    pub(super) snapshot_bytes: [usize; 2],
    /// Every registered copy: its proxy and its lease.
    pub(super) leases: Vec<(Sim, u64)>,
    /// What the subscribers see from now on.
    pub(super) seen: Reports,
}

/// `service`'s join token (empty when there is none).
pub(super) fn token_of(tokens: &Tokens, service: &str) -> String {
    tokens
        .iter()
        .find(|(s, _)| s == service)
        .map(|(_, t)| t.clone())
        .unwrap_or_default()
}

/// Runs every phase of the load, in order.
pub(super) async fn load(
    args: &BenchArgs,
    server: &Server,
    access: &client::Server,
    tokens: &Tokens,
) -> Result<Loaded, LabError> {
    let sims = connect(args, access, tokens).await?;
    // Each phase with the control plane's CPU time over it.
    let mut cpu0 = server.cpu_ticks();
    let mut cpu = || {
        let now = server.cpu_ticks();
        now.saturating_sub(std::mem::replace(&mut cpu0, now))
    };
    let issue = issue(args, &sims).await?.with_cpu(cpu());
    let (subscribe, snapshot_bytes, seen) = open_streams(args, &sims).await?;
    let subscribe = subscribe.with_cpu(cpu());
    let (leases, register) = register(args, &sims).await?;
    let register = register.with_cpu(cpu());
    let set_health = set_health(args, &leases).await?.with_cpu(cpu());
    let renew = renew(args, &leases).await?.with_cpu(cpu());
    Ok(Loaded {
        issue,
        subscribe,
        register,
        set_health,
        renew,
        snapshot_bytes,
        leases,
        seen,
    })
}

/// One connection per `--per-connection` simulated proxies (one each by default), their
/// streams and calls multiplexed on it; proxy `i` belongs to service `i mod services`.
async fn connect(
    args: &BenchArgs,
    access: &client::Server,
    tokens: &Tokens,
) -> Result<Vec<Sim>, LabError> {
    let mut sims: Vec<Sim> = Vec::with_capacity(args.proxies);
    for i in 0..args.proxies {
        let service = service_name(i % args.services);
        let client = match sims.last() {
            Some(last) if i % args.per_connection != 0 => last.client.clone(),
            _ => client::connect(access).await?,
        };
        sims.push(Sim {
            token: token_of(tokens, &service),
            name: format!("{service}-{}", i / args.services),
            service,
            client,
        });
    }
    Ok(sims)
}

/// `Issue`: CSRs made beforehand; the time is the control plane's.
async fn issue(args: &BenchArgs, sims: &[Sim]) -> Result<Rate, LabError> {
    let mut csrs = Vec::with_capacity(args.proxies);
    for _ in 0..args.proxies {
        let key = rcgen::KeyPair::generate().map_err(|e| start_err(&e))?;
        let csr = rcgen::CertificateParams::default()
            .serialize_request(&key)
            .and_then(|c| c.pem())
            .map_err(|e| start_err(&e))?;
        csrs.push(csr);
    }
    let items: Vec<(Sim, String)> = sims.iter().cloned().zip(csrs).collect();
    let (_, lat, wall) = batch(items, args.concurrency, |(sim, csr)| async move {
        let mut c = sim.client.clone();
        c.issue(pb::IssueRequest {
            csr_pem: csr,
            token: sim.token.clone(),
            proxy: sim.name.clone(),
        })
        .await
        .map_err(call("Issue"))?;
        Ok(())
    })
    .await?;
    Ok(Rate::of(args.proxies, wall, args.concurrency, &lat))
}

/// `Subscribe`: every stream until its first snapshot; the sizes of those snapshots.
async fn open_streams(
    args: &BenchArgs,
    sims: &[Sim],
) -> Result<(Rate, [usize; 2], Reports), LabError> {
    let (tx, mut seen) = mpsc::unbounded_channel();
    let t0 = Instant::now();
    for (i, sim) in sims.iter().enumerate() {
        subscribe(i, sim.clone(), args.whole, tx.clone());
    }
    drop(tx);
    let (lat, firsts, _) =
        until_all(&mut seen, args.proxies, t0, "a first snapshot", |_| true).await?;
    let wall = t0.elapsed();
    let rate = Rate::of(args.proxies, wall, args.proxies, &lat);
    let bytes = [
        firsts.iter().map(|s| s.bytes).min().unwrap_or(0),
        firsts.iter().map(|s| s.bytes).max().unwrap_or(0),
    ];
    Ok((rate, bytes, seen))
}

/// `Register`: the copies, spread evenly over the proxies.
async fn register(args: &BenchArgs, sims: &[Sim]) -> Result<(Vec<(Sim, u64)>, Rate), LabError> {
    let items: Vec<(Sim, String)> = (0..args.copies)
        .map(|c| (sims[c % args.proxies].clone(), copy_addr(c)))
        .collect();
    let (leases, lat, wall) = batch(items, args.concurrency, |(sim, addr)| async move {
        let mut c = sim.client.clone();
        let lease = register_copy(&mut c, &sim.token, addr).await?;
        Ok((sim, lease))
    })
    .await?;
    Ok((leases, Rate::of(args.copies, wall, args.concurrency, &lat)))
}

/// `Register` of a copy at `addr` with `token`; its lease.
pub(super) async fn register_copy(
    client: &mut Client,
    token: &str,
    addr: String,
) -> Result<u64, LabError> {
    Ok(client
        .register(pb::RegisterRequest {
            token: token.to_owned(),
            inbound_addr: addr,
            ttl_ms: TTL_MS,
            admin_addr: String::new(),
            labels: Default::default(),
        })
        .await
        .map_err(call("Register"))?
        .into_inner()
        .lease_id)
}

/// `SetHealth(healthy)` of every copy in `leases`, at most `in_flight` at once; the latencies
/// and the wall time.
pub(super) async fn set_health_of(
    leases: Vec<(Sim, u64)>,
    healthy: bool,
    in_flight: usize,
) -> Result<(Vec<Duration>, Duration), LabError> {
    let (_, lat, wall) = batch(leases, in_flight, move |(sim, lease)| async move {
        let mut c = sim.client.clone();
        c.set_health(pb::SetHealthRequest {
            lease_id: lease,
            healthy,
            token: sim.token.clone(),
        })
        .await
        .map_err(call("SetHealth"))?;
        Ok(())
    })
    .await?;
    Ok((lat, wall))
}

/// `SetHealth`: every copy healthy (each one changes an endpoint set).
async fn set_health(args: &BenchArgs, leases: &[(Sim, u64)]) -> Result<Rate, LabError> {
    let (lat, wall) = set_health_of(leases.to_vec(), true, args.concurrency).await?;
    Ok(Rate::of(args.copies, wall, args.concurrency, &lat))
}

/// `Renew`: what keeping every lease alive costs, once round.
async fn renew(args: &BenchArgs, leases: &[(Sim, u64)]) -> Result<Rate, LabError> {
    let (_, lat, wall) = batch(
        leases.to_vec(),
        args.concurrency,
        |(sim, lease)| async move {
            let mut c = sim.client.clone();
            c.renew(pb::LeaseRequest {
                lease_id: lease,
                token: sim.token.clone(),
            })
            .await
            .map_err(call("Renew"))?;
            Ok(())
        },
    )
    .await?;
    Ok(Rate::of(args.copies, wall, args.concurrency, &lat))
}
