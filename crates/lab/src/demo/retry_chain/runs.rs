//! The retry-chain demo's runs: each row's proxies started bottom up from its mesh file, the
//! checkouts (and the app's retries) sent into frontend's proxy, what pricing's proxy and
//! inventory counted after each one, and what each proxy's `/metrics` says; the timeout trap's
//! requests. Each run is set up again with new ports when one it picked was taken meanwhile.

use hopwise_api::names::metric;
use std::fmt::Write as _;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::Full;

use super::mesh::{Ports, chain_mesh, failure_of, trap_mesh, write_mesh};
use super::rows::Spec;
use super::{Ctx, Defaults, HopTries, ProxyCount, Run, TRAP_REQUESTS, TrapRow};
use crate::error::LabError;
use crate::processes::ports::hold;
use crate::processes::proxies::{Metrics, PORT_ATTEMPTS, Proxies, port_taken, scrape};
use crate::samples::inventory::{Inventory, InventoryFails};
use crate::samples::wire::{self, Reply};

/// One checkout call from the app into frontend's proxy.
async fn checkout_call(grpc: bool, frontend: SocketAddr) -> (bool, String) {
    let result = if grpc {
        let req = Request::builder()
            .method("POST")
            .uri("http://checkout/demo.Inventory/Reserve")
            .header(header::CONTENT_TYPE, "application/grpc")
            .header(header::TE, "trailers")
            // A protobuf message with field 1 = "sku-42".
            .body(Full::new(wire::grpc_frame(b"\x0a\x06sku-42")))
            .map_err(|e| e.to_string());
        match req {
            Ok(req) => wire::send_h2c(frontend, req).await,
            Err(e) => Err(e),
        }
    } else {
        let req = Request::builder()
            .method("GET")
            .uri("/stock/sku-42")
            .header(header::HOST, "checkout")
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string());
        match req {
            Ok(req) => wire::send_h1(frontend, req).await,
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(r) => (answered_ok(&r, grpc), describe(&r, grpc)),
        Err(e) => (false, format!("no answer: {e}")),
    }
}

fn answered_ok(r: &Reply, grpc: bool) -> bool {
    if grpc {
        r.status == 200 && r.header("grpc-status") == Some("0")
    } else {
        r.status < 500
    }
}

pub(super) fn describe(r: &Reply, grpc: bool) -> String {
    let mut s = if grpc {
        match r.header("grpc-status") {
            Some(code) => format!("gRPC {} ({code})", grpc_name(code)),
            None => format!("HTTP {} without grpc-status", r.status),
        }
    } else {
        format!("HTTP {}", r.status)
    };
    if let Some(e) = r.header(hopwise_api::names::ERROR) {
        let _ = write!(s, ", x-hopwise-error: {e}");
    }
    if let Some(n) = r.header(hopwise_api::names::RETRIES_EXHAUSTED) {
        let _ = write!(s, ", x-hopwise-retries-exhausted: {n}");
    }
    s
}

fn grpc_name(code: &str) -> &'static str {
    match code {
        "0" => "OK",
        "1" => "CANCELLED",
        "4" => "DEADLINE_EXCEEDED",
        "8" => "RESOURCE_EXHAUSTED",
        "13" => "INTERNAL",
        "14" => "UNAVAILABLE",
        _ => "status",
    }
}

const TRIES: &str = metric::TRIES;

pub(super) fn tries_toward(m: &Metrics, service: &str) -> u64 {
    m.sum(TRIES, &[("direction", "outbound"), ("service", service)])
}

/// What one run's checkouts showed.
struct Measured {
    proxy_counts: Vec<u64>,
    inventory_counts: Option<Vec<u64>>,
    per_call: Vec<u64>,
    tries_per_hop: Vec<HopTries>,
    skipped: Vec<ProxyCount>,
    local_replies: Vec<ProxyCount>,
    client_got: String,
}

/// Sends the checkouts (and the app's retries) and counts, after each call, the tries pricing's
/// proxy made toward inventory and the requests inventory received.
async fn measure(
    checkouts: u32,
    spec: &Spec,
    ports: &Ports,
    inventory: &Inventory,
) -> Result<Measured, LabError> {
    let pricing_tries = |m: Metrics| tries_toward(&m, "inventory");
    let mut seen = pricing_tries(scrape(ports.pricing_admin).await?);
    let mut proxy_counts = Vec::new();
    let mut inventory_counts = inventory.received().map(|_| Vec::new());
    let mut per_call = Vec::new();
    let mut client_got = String::new();
    for _ in 0..checkouts {
        let (tries_before, received_before) = (seen, inventory.received());
        for _ in 0..=spec.app_retries {
            let (ok, got) = checkout_call(spec.grpc, ports.frontend_checkout).await;
            let now = pricing_tries(scrape(ports.pricing_admin).await?);
            per_call.push(now.saturating_sub(seen));
            seen = now;
            client_got = got;
            if ok {
                break;
            }
        }
        proxy_counts.push(seen.saturating_sub(tries_before));
        if let (Some(v), Some(after), Some(before)) = (
            inventory_counts.as_mut(),
            inventory.received(),
            received_before,
        ) {
            v.push(after.saturating_sub(before));
        }
    }

    // Where the tries were made, the retries each proxy chose not to make, and the answers
    // each proxy made itself.
    let n = f64::from(checkouts.max(1));
    let mut tries_per_hop = Vec::new();
    let mut skipped = Vec::new();
    let mut local_replies = Vec::new();
    for (proxy, admin, upstream) in [
        ("frontend", ports.frontend_admin, "checkout"),
        ("checkout", ports.checkout_admin, "pricing"),
        ("pricing", ports.pricing_admin, "inventory"),
    ] {
        let m = scrape(admin).await?;
        tries_per_hop.push(HopTries {
            call: format!("{proxy} → {upstream}"),
            tries: tries_toward(&m, upstream) as f64 / n,
        });
        for (labels, count) in m.series(metric::RETRIES_SKIPPED) {
            if count > 0
                && let Some(reason) = Metrics::label(labels, "reason")
            {
                skipped.push(ProxyCount {
                    proxy: format!("{proxy}'s proxy"),
                    reason: reason.to_owned(),
                    count,
                });
            }
        }
        for (labels, count) in m.series(metric::LOCAL_REPLIES) {
            if count > 0
                && let (Some(side), Some(reason)) = (
                    Metrics::label(labels, "direction"),
                    Metrics::label(labels, "reason"),
                )
            {
                local_replies.push(ProxyCount {
                    proxy: format!("{proxy}'s proxy"),
                    reason: format!("{side} {reason}"),
                    count,
                });
            }
        }
    }
    Ok(Measured {
        proxy_counts,
        inventory_counts,
        per_call,
        tries_per_hop,
        skipped,
        local_replies,
        client_got,
    })
}

/// Runs one row under one set of defaults.
pub(super) async fn run_one(
    ctx: &mut Ctx<'_>,
    spec: &Spec,
    defaults: Defaults,
) -> Result<Run, LabError> {
    let mut attempt = 1;
    loop {
        match run_once(ctx, spec, defaults).await {
            Err(e) if port_taken(&e) && attempt < PORT_ATTEMPTS => attempt += 1,
            result => return result,
        }
    }
}

async fn run_once(ctx: &mut Ctx<'_>, spec: &Spec, defaults: Defaults) -> Result<Run, LabError> {
    let dir = ctx.dir.join(format!("{}-{}", spec.key, defaults.name()));
    let inventory = Inventory::start(spec.fails).await?;
    let (ports, _held) = Ports::free()?;
    let yaml = chain_mesh(spec, defaults, &ports, inventory.addr);
    let (mesh, path) = write_mesh(&dir, &yaml)?;
    let check =
        hopwise_analyze::fanout::row(&mesh, "frontend", "inventory", failure_of(spec.fails))
            .map(|r| r.attempts);

    let mut proxies = Proxies::new(ctx.hopwise, &dir);
    // Bottom up: each proxy is ready before anything can call through it.
    let mut started = Ok(());
    for (service, admin) in [
        ("pricing", ports.pricing_admin),
        ("checkout", ports.checkout_admin),
        ("frontend", ports.frontend_admin),
    ] {
        started = proxies.start(&path, service, admin).await;
        if started.is_err() {
            break;
        }
    }
    ctx.pids.extend(proxies.pids());
    started?;

    let m = measure(ctx.checkouts, spec, &ports, &inventory)
        .await
        .map_err(|e| LabError::Failed(format!("{e}\n{}", proxies.stderr_tails())))?;
    proxies.stop();

    let total: u64 = m.proxy_counts.iter().sum();
    Ok(Run {
        defaults,
        per_checkout: total as f64 / f64::from(ctx.checkouts.max(1)),
        max_per_call: m.per_call.iter().copied().max().unwrap_or(0),
        proxy_counts: m.proxy_counts,
        inventory_counts: m.inventory_counts,
        per_call: m.per_call,
        check,
        tries_per_hop: m.tries_per_hop,
        skipped: m.skipped,
        local_replies: m.local_replies,
        client_got: m.client_got,
        why: match defaults {
            Defaults::Istio => spec.why_istio,
            Defaults::Hopwise => spec.why_hopwise,
        }
        .to_owned(),
        mesh: yaml,
    })
}

pub(super) async fn run_trap(
    ctx: &mut Ctx<'_>,
    on: &str,
    seed: u64,
    key: &str,
) -> Result<TrapRow, LabError> {
    let mut attempt = 1;
    loop {
        match run_trap_once(ctx, on, seed, key).await {
            Err(e) if port_taken(&e) && attempt < PORT_ATTEMPTS => attempt += 1,
            result => return result,
        }
    }
}

async fn run_trap_once(
    ctx: &mut Ctx<'_>,
    on: &str,
    seed: u64,
    key: &str,
) -> Result<TrapRow, LabError> {
    let dir = ctx.dir.join(format!("timeout-trap-{key}"));
    let inventory = Inventory::start(InventoryFails::Hang).await?;
    let ports = hold(2)?;
    let (upstream, admin) = match ports.addrs() {
        [u, a] => (*u, *a),
        _ => return Err(LabError::Failed("not enough free ports".into())),
    };
    let yaml = trap_mesh(on, upstream, admin, inventory.addr);
    let (_mesh, path) = write_mesh(&dir, &yaml)?;
    let mut proxies = Proxies::new(ctx.hopwise, &dir);
    let started = proxies.start(&path, "pricing", admin).await;
    ctx.pids.extend(proxies.pids());
    started?;
    let mut client_got = String::new();
    for _ in 0..TRAP_REQUESTS {
        let req = Request::builder()
            .method("GET")
            .uri("/stock/sku-42")
            .header(header::HOST, "inventory")
            .body(Full::new(Bytes::new()))
            .map_err(|e| LabError::Failed(e.to_string()))?;
        client_got = match wire::send_h1(upstream, req).await {
            Ok(r) => describe(&r, false),
            Err(e) => format!("no answer: {e}"),
        };
    }
    let metrics = scrape(admin)
        .await
        .map_err(|e| LabError::Failed(format!("{e}\n{}", proxies.stderr_tails())))?;
    let tries = tries_toward(&metrics, "inventory");
    proxies.stop();
    Ok(TrapRow {
        retry_on: on.to_owned(),
        requests: TRAP_REQUESTS,
        proxy_tries: tries,
        inventory_received: inventory.received().unwrap_or(0),
        tries_per_request: tries as f64 / f64::from(TRAP_REQUESTS),
        seed,
        client_got,
    })
}
