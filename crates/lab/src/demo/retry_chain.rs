//! `hopwise demo retry-chain`: the seed's retry chain and timeout trap, with real proxies.
//!
//! Each row writes one mesh file — frontend with a local port for checkout; checkout and
//! pricing as *relay* copies (each copy's `app` is its own upstream port, so its inbound side
//! feeds its outbound side: the seed's chain has no services between proxies); inventory
//! `external` — starts frontend's, checkout's and pricing's proxies from it as three
//! `hopwise proxy` processes, and sends checkouts into frontend's proxy: gRPC-shaped POSTs over
//! h2c for the gRPC rows, plain HTTP/1.1 GETs for the others. Attempts at inventory are counted
//! twice: by pricing's proxy (`hopwise_tries_total` toward inventory, from its `/metrics`;
//! connection attempts when inventory is down) and by inventory itself. Every row runs under
//! `defaults: { preset: istio }` and under hopwise's defaults, each with the row's own change
//! (503 made retriable, the app retrying), next to what `hopwise check` predicts for the same
//! file.
//!
//! The timeout trap: pricing's proxy alone, a 300 ms per-try timeout and 2 retries, in front of
//! an inventory that accepts requests and never answers: Istio's list, then with `reset` added.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use hopwise_analyze::Failure;
use hopwise_model::Mesh;
use http::{Request, header};
use http_body_util::Full;
use serde::Serialize;

use super::{RetryChainArgs, json_text};
use crate::error::{LabError, io};
use crate::processes::ports::free_ports;
use crate::processes::proxies::{Metrics, PORT_ATTEMPTS, Proxies, port_taken, scrape};
use crate::progress;
use crate::samples::inventory::{Inventory, InventoryFails};
use crate::samples::wire::{self, Reply};

/// Requests per timeout-trap row, as the seed.
const TRAP_REQUESTS: u32 = 5;

/// Istio's retry list (`retry.go`, 1.31), as the mesh file writes it.
const ISTIO_ON: &str =
    "connect-failure, refused-stream, unavailable, cancelled, retriable-status-codes";

/// Whose defaults a run starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Defaults {
    Istio,
    Hopwise,
}

impl Defaults {
    fn name(self) -> &'static str {
        match self {
            Defaults::Istio => "istio",
            Defaults::Hopwise => "hopwise",
        }
    }
}

/// One row of the seed's table.
#[derive(Debug, Clone, Copy)]
struct Spec {
    key: &'static str,
    label: &'static str,
    grpc: bool,
    fails: InventoryFails,
    retriable_503: bool,
    app_retries: u32,
    /// The seed's figure (Istio's defaults).
    seed: u64,
    why_istio: &'static str,
    why_hopwise: &'static str,
}

const ROWS: [Spec; 6] = [
    Spec {
        key: "grpc-down",
        label: "being down, calls over gRPC",
        grpc: true,
        fails: InventoryFails::Down,
        retriable_503: false,
        app_retries: 0,
        seed: 27,
        why_istio: "pricing's proxy makes 3 connection attempts and answers UNAVAILABLE, which is on \
            Istio's list: checkout's proxy retries it, and frontend's proxy retries that (3 × 3 × 3)",
        why_hopwise: "pricing's proxy retried the refused connections (nothing was processed, so \
            even a gRPC POST is safe to retry) and answered UNAVAILABLE, marked retries-exhausted; \
            UNAVAILABLE is not on hopwise's list, so checkout's and frontend's proxies did not retry",
    },
    Spec {
        key: "http-down",
        label: "being down, calls over plain HTTP",
        grpc: false,
        fails: InventoryFails::Down,
        retriable_503: false,
        app_retries: 0,
        seed: 3,
        why_istio: "pricing's proxy makes 3 connection attempts and answers 503; Istio's list has \
            retriable-status-codes but names no code, so nobody above retries a 503",
        why_hopwise: "pricing's proxy retried the refused connections and answered 503, marked \
            retries-exhausted; 503 is not on hopwise's list, so nobody above retried",
    },
    Spec {
        key: "grpc-unavailable",
        label: "answering gRPC UNAVAILABLE",
        grpc: true,
        fails: InventoryFails::Unavailable,
        retriable_503: false,
        app_retries: 0,
        seed: 27,
        why_istio: "UNAVAILABLE is on Istio's list and each proxy passes it up unchanged, so every \
            proxy retries it — a gRPC POST included, since Istio does not ask whether a call is \
            safe to repeat (3 × 3 × 3)",
        why_hopwise: "UNAVAILABLE is not on hopwise's list; and a gRPC call is a POST, not safe to \
            repeat once answered (only_if_safe), so listing `unavailable` would not retry it either",
    },
    Spec {
        key: "http-503",
        label: "answering HTTP 503 at once",
        grpc: false,
        fails: InventoryFails::Http503,
        retriable_503: false,
        app_retries: 0,
        seed: 1,
        why_istio: "Istio's list has retriable-status-codes but names no code: nobody retries a 503",
        why_hopwise: "503 is not on hopwise's list: a fast refusal stays one attempt",
    },
    Spec {
        key: "http-503-retriable",
        label: "answering 503, 503 retriable on every proxy",
        grpc: false,
        fails: InventoryFails::Http503,
        retriable_503: true,
        app_retries: 0,
        seed: 27,
        why_istio: "with 503 named, each proxy retries the 503 it gets from below (3 × 3 × 3)",
        why_hopwise: "pricing's proxy retried (a GET is safe to repeat); it marked its answer \
            retries-exhausted, so checkout's and frontend's did not (single_hop)",
    },
    Spec {
        key: "app-retries",
        label: "the same, and the app retrying twice",
        grpc: false,
        fails: InventoryFails::Http503,
        retriable_503: true,
        app_retries: 2,
        seed: 81,
        why_istio: "the app's 2 retries repeat the whole chain: 3 × 27",
        why_hopwise: "3 per checkout call, as in the row above; the app's own 2 retries repeat the \
            call, and they multiply: 3 × 3 — `hopwise check` counts them from the mesh file's \
            app_retries; retry in one place",
    },
];

/// Everything the demo measured.
#[derive(Debug, Serialize)]
pub struct Report {
    pub checkouts: u32,
    pub rows: Vec<Row>,
    pub timeout_trap: Vec<TrapRow>,
    /// Every `hopwise proxy` process the demo started (all stopped when it ends).
    pub proxy_pids: Vec<u32>,
    /// The directory the mesh files, certificates and proxies' stderr were written into
    /// (removed at the end).
    pub workdir: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub key: &'static str,
    pub failure: &'static str,
    pub protocol: &'static str,
    /// The seed's figure for Istio's defaults.
    pub seed: u64,
    pub istio: Run,
    pub hopwise: Run,
}

/// One row under one set of defaults.
#[derive(Debug, Serialize)]
pub struct Run {
    pub defaults: Defaults,
    /// Attempts at inventory per checkout, counted by pricing's proxy (the mean).
    pub per_checkout: f64,
    /// Per checkout: pricing's proxy's tries toward inventory.
    pub proxy_counts: Vec<u64>,
    /// Per checkout: requests inventory received; `None` when it is down.
    pub inventory_counts: Option<Vec<u64>>,
    /// Per checkout call the app made (more than one per checkout when it retries).
    pub per_call: Vec<u64>,
    pub max_per_call: u64,
    /// What `hopwise check` predicts per checkout for the same mesh file.
    pub check: Option<u64>,
    /// Tries each proxy sent, per checkout, top first.
    pub tries_per_hop: Vec<HopTries>,
    /// Retries a condition allowed but a proxy did not make, by proxy and reason.
    pub skipped: Vec<ProxyCount>,
    /// Answers a proxy made itself instead of passing one on, by proxy, side and reason.
    pub local_replies: Vec<ProxyCount>,
    /// What the app got on its last call.
    pub client_got: String,
    pub why: String,
    /// The mesh file of the run.
    pub mesh: String,
}

#[derive(Debug, Serialize)]
pub struct HopTries {
    pub call: String,
    pub tries: f64,
}

/// A counter of one proxy, by reason.
#[derive(Debug, Serialize)]
pub struct ProxyCount {
    pub proxy: String,
    pub reason: String,
    pub count: u64,
}

#[derive(Debug, Serialize)]
pub struct TrapRow {
    pub retry_on: String,
    pub requests: u32,
    /// Pricing's proxy's tries toward inventory.
    pub proxy_tries: u64,
    /// Requests inventory received.
    pub inventory_received: u64,
    pub tries_per_request: f64,
    pub seed: u64,
    pub client_got: String,
}

/// What the runs share.
struct Ctx<'a> {
    hopwise: &'a Path,
    dir: PathBuf,
    checkouts: u32,
    pids: Vec<u32>,
}

/// The listeners of one chain.
#[derive(Debug, Clone, Copy)]
struct Ports {
    frontend_checkout: SocketAddr,
    frontend_admin: SocketAddr,
    checkout_inbound: SocketAddr,
    checkout_relay: SocketAddr,
    checkout_admin: SocketAddr,
    pricing_inbound: SocketAddr,
    pricing_relay: SocketAddr,
    pricing_admin: SocketAddr,
}

impl Ports {
    fn free() -> Result<Ports, LabError> {
        let p = free_ports(8)?;
        let at = |i: usize| {
            p.get(i)
                .copied()
                .ok_or_else(|| LabError::Failed("not enough free ports".into()))
        };
        Ok(Ports {
            frontend_checkout: at(0)?,
            frontend_admin: at(1)?,
            checkout_inbound: at(2)?,
            checkout_relay: at(3)?,
            checkout_admin: at(4)?,
            pricing_inbound: at(5)?,
            pricing_relay: at(6)?,
            pricing_admin: at(7)?,
        })
    }
}

/// The mesh file of one row under one set of defaults.
fn chain_mesh(spec: &Spec, defaults: Defaults, p: &Ports, inventory: SocketAddr) -> String {
    let protocol = if spec.grpc { "grpc" } else { "http" };
    let defaults_block = match (defaults, spec.retriable_503) {
        (Defaults::Istio, false) => "defaults: { preset: istio }\n".to_owned(),
        (Defaults::Istio, true) => {
            "defaults: { preset: istio, retries: { status_codes: [503] } }\n".to_owned()
        }
        // hopwise's defaults are the built-in preset: nothing to write.
        (Defaults::Hopwise, false) => String::new(),
        // Lists replace the inherited list: hopwise's three conditions, plus the status codes.
        (Defaults::Hopwise, true) => "defaults:\n  retries:\n    on: [connect-failure, \
             refused-stream, reset-before-request, retriable-status-codes]\n    status_codes: \
             [503]\n"
            .to_owned(),
    };
    let frontend_call = if spec.app_retries > 0 {
        format!("{{ app_retries: {} }}", spec.app_retries)
    } else {
        "{}".to_owned()
    };
    format!(
        "# hopwise demo retry-chain: inventory {label}; {defaults} defaults
mesh: {{ name: retry-chain, trust_domain: demo.local, certs: certs }}
{defaults_block}services:
  frontend:
    entry: {{}}
    calls:
      checkout: {frontend_call}
    copies:
      - {{ upstreams: {{ checkout: \"{fc}\" }}, admin: \"{fa}\" }}
  checkout:
    protocol: {protocol}
    calls: {{ pricing: {{}} }}
    copies:
      # a relay: its inbound side feeds its own outbound side
      - {{ inbound: \"{ci}\", app: \"{cr_app}\", upstreams: {{ pricing: \"{cr}\" }}, admin: \"{ca}\" }}
  pricing:
    protocol: {protocol}
    calls: {{ inventory: {{}} }}
    copies:
      # a relay too
      - {{ inbound: \"{pi}\", app: \"{pr_app}\", upstreams: {{ inventory: \"{pr}\" }}, admin: \"{pa}\" }}
  inventory:
    protocol: {protocol}
    external: {{ address: \"{inventory}\" }}
",
        label = spec.label,
        defaults = defaults.name(),
        fc = p.frontend_checkout,
        fa = p.frontend_admin,
        ci = p.checkout_inbound,
        cr_app = p.checkout_relay,
        cr = p.checkout_relay,
        ca = p.checkout_admin,
        pi = p.pricing_inbound,
        pr_app = p.pricing_relay,
        pr = p.pricing_relay,
        pa = p.pricing_admin,
    )
}

/// The analysis' name for the row's failure.
fn failure_of(fails: InventoryFails) -> Failure {
    match fails {
        InventoryFails::Down => Failure::Down,
        InventoryFails::Unavailable => Failure::Unavailable,
        InventoryFails::Http503 => Failure::Http503,
        InventoryFails::Hang => Failure::Hang,
    }
}

/// Writes `yaml` as `<dir>/mesh.yaml` with certificates beside it; returns the mesh and path.
fn write_mesh(dir: &Path, yaml: &str) -> Result<(Mesh, PathBuf), LabError> {
    let mesh = Mesh::from_yaml(yaml).map_err(|d| LabError::Mesh(d.render("mesh.yaml")))?;
    std::fs::create_dir_all(dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let path = dir.join("mesh.yaml");
    std::fs::write(&path, yaml).map_err(io(format!("cannot write {}", path.display())))?;
    hopwise_proxy::certs::write_dev_certs(&mesh, &dir.join("certs"))
        .map_err(|e| LabError::Failed(format!("cannot write the certificates: {e}")))?;
    Ok((mesh, path))
}

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

fn describe(r: &Reply, grpc: bool) -> String {
    let mut s = if grpc {
        match r.header("grpc-status") {
            Some(code) => format!("gRPC {} ({code})", grpc_name(code)),
            None => format!("HTTP {} without grpc-status", r.status),
        }
    } else {
        format!("HTTP {}", r.status)
    };
    if let Some(e) = r.header("x-hopwise-error") {
        let _ = write!(s, ", x-hopwise-error: {e}");
    }
    if let Some(n) = r.header("x-hopwise-retries-exhausted") {
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

const TRIES: &str = "hopwise_tries_total";

fn tries_toward(m: &Metrics, service: &str) -> u64 {
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
        for (labels, count) in m.series("hopwise_retries_skipped_total") {
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
        for (labels, count) in m.series("hopwise_local_replies_total") {
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
async fn run_one(ctx: &mut Ctx<'_>, spec: &Spec, defaults: Defaults) -> Result<Run, LabError> {
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
    let ports = Ports::free()?;
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

/// The timeout trap's mesh: pricing's proxy alone in front of inventory.
fn trap_mesh(on: &str, upstream: SocketAddr, admin: SocketAddr, inventory: SocketAddr) -> String {
    format!(
        "# hopwise demo retry-chain: the timeout trap
mesh: {{ name: timeout-trap, trust_domain: demo.local }}
defaults: {{ preset: istio }}
services:
  pricing:
    calls:
      inventory:
        per_try_timeout: 300ms
        retries: {{ count: 2, on: [{on}] }}
    copies:
      - {{ upstreams: {{ inventory: \"{upstream}\" }}, admin: \"{admin}\" }}
  inventory:
    external: {{ address: \"{inventory}\" }}
"
    )
}

async fn run_trap(ctx: &mut Ctx<'_>, on: &str, seed: u64, key: &str) -> Result<TrapRow, LabError> {
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
    let ports = free_ports(2)?;
    let (upstream, admin) = match ports.as_slice() {
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

/// Runs the demo and renders its report (text or JSON).
pub async fn run(args: &RetryChainArgs, hopwise: &Path) -> Result<String, LabError> {
    let tmp = tempfile::Builder::new()
        .prefix("hopwise-demo-retry-chain-")
        .tempdir()
        .map_err(io("cannot create a temporary directory"))?;
    let mut ctx = Ctx {
        hopwise,
        dir: tmp.path().to_owned(),
        checkouts: args.checkouts,
        pids: Vec::new(),
    };
    let mut rows = Vec::new();
    for (i, spec) in ROWS.iter().enumerate() {
        let mut runs = Vec::new();
        for defaults in [Defaults::Istio, Defaults::Hopwise] {
            progress(&format!(
                "retry-chain: row {}/{} (inventory {}), {} defaults, {} checkouts",
                i + 1,
                ROWS.len(),
                spec.label,
                defaults.name(),
                args.checkouts
            ));
            runs.push(run_one(&mut ctx, spec, defaults).await?);
        }
        let (Some(hopwise_run), Some(istio_run)) = (runs.pop(), runs.pop()) else {
            return Err(LabError::Failed("a row did not run".into()));
        };
        rows.push(Row {
            key: spec.key,
            failure: spec.label,
            protocol: if spec.grpc { "grpc" } else { "http" },
            seed: spec.seed,
            istio: istio_run,
            hopwise: hopwise_run,
        });
    }
    progress("retry-chain: the timeout trap");
    let with_reset = format!("{ISTIO_ON}, reset");
    let timeout_trap = vec![
        run_trap(&mut ctx, ISTIO_ON, 1, "istio").await?,
        run_trap(&mut ctx, &with_reset, 3, "reset").await?,
    ];
    let report = Report {
        checkouts: args.checkouts,
        rows,
        timeout_trap,
        proxy_pids: ctx.pids,
        workdir: tmp.path().to_owned(),
    };
    if args.json {
        json_text(&report)
    } else {
        Ok(text(&report))
    }
}

/// "27" when every checkout saw the same; else the mean and the range.
fn figure(counts: &[u64]) -> String {
    let (Some(min), Some(max)) = (counts.iter().min(), counts.iter().max()) else {
        return "-".to_owned();
    };
    if min == max {
        min.to_string()
    } else {
        let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        format!("{mean:.2} ({min}–{max})")
    }
}

/// The width of each column of `rows`.
fn widths(rows: &[Vec<String>]) -> Vec<usize> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// A line over `rows`' columns with a title across columns `from..=to` for each span, drawn
/// as `── title ──`.
fn spans(rows: &[Vec<String>], gap: &[usize], titles: &[(usize, usize, &str)]) -> String {
    let w = widths(rows);
    // Where each column starts.
    let mut start = Vec::with_capacity(w.len());
    let mut at = 0;
    for (i, width) in w.iter().enumerate() {
        if i > 0 {
            at += gap.get(i - 1).copied().unwrap_or(2);
        }
        start.push(at);
        at += width;
    }
    let mut line = String::new();
    for &(from, to, title) in titles {
        let (Some(&a), Some(&b), Some(&wb)) = (start.get(from), start.get(to), w.get(to)) else {
            continue;
        };
        let text = format!(" {title} ");
        let fill = (b + wb - a).saturating_sub(text.chars().count());
        let pad = a.saturating_sub(line.chars().count());
        let _ = write!(
            line,
            "{:pad$}{}{text}{}",
            "",
            "─".repeat(fill / 2),
            "─".repeat(fill - fill / 2)
        );
    }
    line
}

/// Lays out `rows` in columns: those listed in `left` left-aligned, the others right-aligned;
/// `gap[i]` spaces before column i + 1.
fn columns(rows: &[Vec<String>], gap: &[usize], left: &[usize]) -> Vec<String> {
    let widths = widths(rows);
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (i, cell) in r.iter().enumerate() {
                let w = widths[i];
                if i > 0 {
                    let g = gap.get(i - 1).copied().unwrap_or(2);
                    let _ = write!(line, "{:g$}", "");
                }
                if left.contains(&i) {
                    let _ = write!(line, "{cell:<w$}");
                } else {
                    let _ = write!(line, "{cell:>w$}");
                }
            }
            line.trim_end().to_owned()
        })
        .collect()
}

/// The report as the seed prints it: a table, then the reasons.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Retry chain: frontend's, checkout's and pricing's proxies in a row (three `hopwise proxy` \
         processes from one mesh file per row) in front of inventory; checkouts per row: {}.",
        r.checkouts
    );
    let _ = writeln!(
        out,
        "Attempts at inventory per checkout, counted by pricing's proxy (its tries toward \
         inventory, from /metrics: connection attempts when inventory is down) and by inventory \
         itself (requests received; - when it is down), and what `hopwise check` predicts from \
         the same mesh file."
    );
    let _ = writeln!(out);
    let cells = |run: &Run| {
        [
            figure(&run.proxy_counts),
            run.inventory_counts
                .as_deref()
                .map_or("-".to_owned(), figure),
            run.check.map_or("-".to_owned(), |c| c.to_string()),
        ]
    };
    let mut rows: Vec<Vec<String>> = vec![
        [
            "inventory fails by",
            "proxy",
            "inventory",
            "check",
            "proxy",
            "inventory",
            "check",
            "most per call",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for row in &r.rows {
        let mut cols = vec![row.failure.to_owned()];
        cols.extend(cells(&row.istio));
        cols.extend(cells(&row.hopwise));
        cols.push(row.hopwise.max_per_call.to_string());
        rows.push(cols);
    }
    let gaps = [2, 2, 2, 4, 2, 2, 4];
    let titles = [(1, 3, "Istio's defaults"), (4, 7, "hopwise's defaults")];
    let _ = writeln!(out, "{}", spans(&rows, &gaps, &titles));
    for line in columns(&rows, &gaps, &[0]) {
        let _ = writeln!(out, "{line}");
    }
    let seed: Vec<String> = r.rows.iter().map(|row| row.seed.to_string()).collect();
    let _ = writeln!(
        out,
        "the seed's table (Istio's defaults): {}",
        seed.join(", ")
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "Why, row by row:");
    for (k, row) in r.rows.iter().enumerate() {
        let _ = writeln!(out, "{}. {}", k + 1, row.failure);
        for run in [&row.istio, &row.hopwise] {
            let who = match run.defaults {
                Defaults::Istio => "Istio  ",
                Defaults::Hopwise => "hopwise",
            };
            let _ = writeln!(out, "   {who}: {}.", run.why);
            let hops: Vec<String> = run
                .tries_per_hop
                .iter()
                .map(|h| format!("{} {}", h.call, trim_float(h.tries)))
                .collect();
            let pad = "            ";
            let _ = writeln!(out, "{pad}tries per checkout: {}", hops.join(", "));
            let counted = |c: &[ProxyCount]| {
                c.iter()
                    .map(|s| format!("{} {} ×{}", s.proxy, s.reason, s.count))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if !run.skipped.is_empty() {
                let _ = writeln!(out, "{pad}retries not made: {}", counted(&run.skipped));
            }
            if !run.local_replies.is_empty() {
                let _ = writeln!(
                    out,
                    "{pad}answers the proxies made themselves: {}",
                    counted(&run.local_replies)
                );
            }
            let _ = writeln!(out, "{pad}the app got: {}", run.client_got);
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Timeout trap: pricing's proxy alone, per-try timeout 300 ms, 2 retries, in front of an \
         inventory that accepts requests and never answers; {} requests each.",
        r.timeout_trap.first().map_or(TRAP_REQUESTS, |t| t.requests)
    );
    let mut rows: Vec<Vec<String>> = vec![
        [
            "retry list (retries.on)",
            "tries per request",
            "proxy tries",
            "inventory received",
            "the app got",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for t in &r.timeout_trap {
        rows.push(vec![
            t.retry_on.clone(),
            trim_float(t.tries_per_request),
            t.proxy_tries.to_string(),
            t.inventory_received.to_string(),
            t.client_got.clone(),
        ]);
    }
    for line in columns(&rows, &[2, 2, 2, 2], &[0, 4]) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(
        out,
        "A timed-out try is retried only under reset, gateway-error or 5xx (as Envoy does); \
         Istio's list names none of them, so \"2 retries\" make 1 try."
    );
    out
}

/// 27 rather than 27.0; two decimals otherwise.
fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Ports {
        let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        Ports {
            frontend_checkout: a(9001),
            frontend_admin: a(9002),
            checkout_inbound: a(9003),
            checkout_relay: a(9004),
            checkout_admin: a(9005),
            pricing_inbound: a(9006),
            pricing_relay: a(9007),
            pricing_admin: a(9008),
        }
    }

    #[test]
    fn every_rows_mesh_file_is_valid_and_check_predicts_the_seeds_table_under_istio() {
        let inventory = SocketAddr::from(([127, 0, 0, 1], 9009));
        for spec in &ROWS {
            for defaults in [Defaults::Istio, Defaults::Hopwise] {
                let yaml = chain_mesh(spec, defaults, &ports(), inventory);
                let mesh = Mesh::from_yaml(&yaml)
                    .unwrap_or_else(|d| panic!("{}\n{yaml}", d.render("mesh.yaml")));
                let predicted = hopwise_analyze::fanout::row(
                    &mesh,
                    "frontend",
                    "inventory",
                    failure_of(spec.fails),
                )
                .map(|r| r.attempts);
                match defaults {
                    Defaults::Istio => assert_eq!(predicted, Some(spec.seed), "{}", spec.key),
                    Defaults::Hopwise => {
                        let per_call = predicted.unwrap_or(0) / u64::from(spec.app_retries + 1);
                        assert!(per_call <= 3, "{}: {predicted:?}", spec.key);
                    }
                }
            }
        }
    }

    #[test]
    fn the_trap_mesh_is_valid() {
        let a = SocketAddr::from(([127, 0, 0, 1], 9001));
        for on in [ISTIO_ON.to_owned(), format!("{ISTIO_ON}, reset")] {
            let yaml = trap_mesh(&on, a, SocketAddr::from(([127, 0, 0, 1], 9002)), a);
            assert!(Mesh::from_yaml(&yaml).is_ok(), "{yaml}");
        }
    }

    #[test]
    fn figures_are_exact_when_every_checkout_agrees() {
        assert_eq!(figure(&[27, 27, 27]), "27");
        assert_eq!(figure(&[9, 9, 8]), "8.67 (8–9)");
        assert_eq!(figure(&[]), "-");
        assert_eq!(trim_float(3.0), "3");
    }
}
