//! `hopwise control bench`: one control plane against many simulated proxies (issue #5's scale
//! benchmark). Every simulated proxy lives in this process with its own gRPC connection and does
//! what a real proxy does, in order: `Issue` (a CSR made beforehand, so the figure is the
//! control plane's signing rate, not this process's key generation), `Subscribe` (and `Ack`s
//! every snapshot, as `hopwise proxy` does), `Register` its share of the copies, `SetHealth`.
//! Then it measures, over several rounds, how long a configuration change (`Apply`) and a
//! registry change (a new copy of a service every other service calls turns healthy) take to
//! reach every subscriber: from the call to each subscriber's receipt of the snapshot that
//! carries it (p50, p99, max — the max being the last subscriber). Last, the sustainable rate
//! of health changes: the copies of `svc-001` (called by `svc-000` only) turn unhealthy and
//! healthy again, `--rounds` times, as fast as the calls go; the time runs until every caller
//! has the final state, and the control plane's CPU time is divided by the changes.
//!
//! Subscribers ask for deltas, as `hopwise proxy` does, and merge them (`hopwise_control::plane::delta`); with
//! `--whole` they ask for whole snapshots every time, the protocol before deltas. Each change
//! reports the bytes of the snapshots subscribers received (protobuf, as sent) and the control
//! plane's CPU time.
//!
//! The control plane is, by default, a child process — the real `hopwise control` (this same
//! executable) — so its memory is its own: VmRSS and VmHWM from `/proc/<pid>/status`. With
//! `--in-process` it runs on its own runtime inside this process and the memory figures are
//! this process's, simulated proxies included.
//!
//! The mesh: `--services` services `svc-000`, `svc-001`, … each calling `shared` (so a copy of
//! `shared` joining changes every subscriber's snapshot), and each even-numbered service also
//! calling the next one (so the registered copies appear in snapshots too). Proxy `i` belongs to
//! service `i mod services`.

//!
//! The parts: [`mesh`] (the mesh file, pure), [`server`] (the control plane under test),
//! [`sim`] (the simulated proxies' streams and waits), [`load`] (the phases before the
//! measured changes), [`changes`] (the measured changes and the health flips), [`report`]
//! (the figures and the text).

use std::io::Write;
use std::time::Duration;

use hopwise_control::client;

use crate::error::{LabError, io};

pub mod changes;
pub mod load;
pub mod mesh;
pub mod report;
pub mod server;
pub mod sim;

pub use mesh::mesh_text;
pub use report::{Flips, Machine, Memory, Percentiles, Rate, Report, Spread, render};

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;
/// Leases long enough that no renewal is needed while the benchmark runs.
const TTL_MS: u64 = 600_000;
/// Simulated proxies on one connection at most: each holds a snapshot stream and makes calls,
/// within the control port's 100 streams a connection.
const MAX_PER_CONNECTION: usize = 32;
/// How long any phase may take before the benchmark gives up.
const PHASE_LIMIT: Duration = Duration::from_secs(600);

/// `hopwise control bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Simulated proxies, each with its own connection, certificate and snapshot stream.
    #[arg(long, default_value_t = 1000)]
    pub proxies: usize,
    /// Copies registered in total, spread evenly over the proxies (and so over the services).
    #[arg(long, default_value_t = 10_000)]
    pub copies: usize,
    /// Services the proxies belong to (at most --proxies: every service has a proxy).
    #[arg(long, default_value_t = 100)]
    pub services: usize,
    /// Changes of each kind measured.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Calls in flight at once while issuing, registering and reporting health.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Run the control plane inside this process instead of as a child `hopwise control`
    /// (memory is then this process's, simulated proxies included).
    #[arg(long)]
    pub in_process: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Subscribers ask for whole snapshots every time, as proxies did before deltas (to compare
    /// the bytes sent).
    #[arg(long)]
    pub whole: bool,
    /// Simulated proxies sharing one TLS connection (their streams and calls multiplexed on
    /// it), for when file descriptors run out: at most 32, so that their snapshot streams and
    /// calls fit the 100 streams a connection may carry.
    #[arg(long, default_value_t = 1)]
    pub per_connection: usize,
}

/// Runs the benchmark and returns its report.
pub fn measure(args: &BenchArgs) -> Result<Report, LabError> {
    if args.proxies == 0 || args.services == 0 || args.rounds == 0 {
        return Err(LabError::Failed(
            "--proxies, --services and --rounds must be at least 1".into(),
        ));
    }
    if !(1..=MAX_PER_CONNECTION).contains(&args.per_connection) {
        return Err(LabError::Failed(format!(
            "--per-connection must be 1 to {MAX_PER_CONNECTION}"
        )));
    }
    if args.copies > 1 << 24 || args.rounds > 1000 {
        return Err(LabError::Failed(
            "at most 16,777,216 copies and 1,000 rounds".into(),
        ));
    }
    let mut args = args.clone();
    let mut notes = Vec::new();
    if args.services > args.proxies {
        notes.push(format!(
            "--services {} capped at --proxies {}: every service has a proxy",
            args.services, args.proxies
        ));
        args.services = args.proxies;
    }
    let mesh = mesh_text(args.services, 0);
    let (mut server, access, tokens) = server::start(&args, &mesh)?;
    let result = drive(&args, &server, &access, &tokens, notes);
    // A child that stopped mid-run is the cause of whatever failed: its own words first.
    let result = result.map_err(|e| match server.exited() {
        Some(why) => LabError::Failed(format!("{why}\n(the benchmark then failed: {e})")),
        None => e,
    });
    server.stop();
    result
}

/// The memory readings of the control plane, in KiB: serving, loaded, at the end.
struct Readings {
    before: u64,
    loaded: u64,
    end: u64,
}

fn drive(
    args: &BenchArgs,
    server: &server::Server,
    access: &client::Server,
    tokens: &server::Tokens,
    notes: Vec<String>,
) -> Result<Report, LabError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("simulated-proxies")
        .build()
        .map_err(io("cannot start the runtime"))?;
    let before = server.rss();
    runtime.block_on(async move {
        let mut loaded = load::load(args, server, access, tokens).await?;
        // Let the snapshots the health changes caused settle before the memory is read.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss_loaded = server.rss();
        let (config, registry) =
            changes::measure(args, server, access, tokens, &mut loaded.seen).await?;
        let leases = std::mem::take(&mut loaded.leases);
        let flips = changes::flips(args, server, leases, &mut loaded.seen).await?;
        let memory = Readings {
            before,
            loaded: rss_loaded,
            end: server.rss(),
        };
        Ok(report(
            args,
            server,
            loaded,
            memory,
            [config, registry],
            flips,
            notes,
        ))
    })
}

/// Everything measured, with the notes on how.
fn report(
    args: &BenchArgs,
    server: &server::Server,
    loaded: load::Loaded,
    memory: Readings,
    [config_change, registry_change]: [Spread; 2],
    health_flips: Option<Flips>,
    mut notes: Vec<String>,
) -> Report {
    let in_process = server.in_process();
    if in_process {
        notes.push(
            "memory and CPU time are this process's: the control plane and the simulated \
             proxies together"
                .into(),
        );
    }
    if cfg!(debug_assertions) {
        notes.push("a debug build: run `cargo run --release` for figures".into());
    }
    Report {
        command: command_line(args, in_process),
        machine: server::machine(),
        control_plane: if in_process {
            "in-process".into()
        } else {
            "child process".into()
        },
        proxies: args.proxies,
        services: args.services,
        copies: args.copies,
        snapshot_bytes: loaded.snapshot_bytes,
        snapshots: if args.whole { "whole" } else { "deltas" },
        issue: loaded.issue,
        subscribe: loaded.subscribe,
        register: loaded.register,
        set_health: loaded.set_health,
        renew: loaded.renew,
        memory: Memory {
            method: if in_process {
                "VmRSS/VmHWM of /proc/self/status (this process)".into()
            } else {
                "VmRSS/VmHWM of /proc/<pid>/status of the child `hopwise control`".into()
            },
            rss_before_kib: memory.before,
            rss_loaded_kib: memory.loaded,
            rss_end_kib: memory.end,
            hwm_kib: server.hwm(),
        },
        config_change,
        registry_change,
        health_flips,
        notes,
    }
}

/// The command that gives this report again.
fn command_line(args: &BenchArgs, in_process: bool) -> String {
    format!(
        "hopwise control bench --proxies {} --copies {} --services {} --rounds {} --concurrency {}{}{}{}",
        args.proxies,
        args.copies,
        args.services,
        args.rounds,
        args.concurrency,
        if in_process { " --in-process" } else { "" },
        if args.whole { " --whole" } else { "" },
        if args.per_connection > 1 {
            format!(" --per-connection {}", args.per_connection)
        } else {
            String::new()
        }
    )
}

/// `hopwise control bench`: runs it and writes the report (text or JSON) to `out`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let report = measure(args)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&report)
            .map_err(|e| io("cannot write the output")(std::io::Error::other(e)))?;
        s.push('\n');
        s
    } else {
        render(&report)
    };
    out.write_all(text.as_bytes())
        .map_err(io("cannot write the output"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole benchmark, small, with the control plane in this process (a test binary
    /// cannot start `hopwise control`; crates/hopwise/tests runs the child-process form).
    #[test]
    fn a_small_run_in_process_reports_every_figure() {
        let args = BenchArgs {
            proxies: 6,
            copies: 12,
            services: 3,
            rounds: 2,
            concurrency: 4,
            in_process: true,
            json: true,
            whole: false,
            per_connection: 1,
        };
        let r = measure(&args).unwrap();
        assert_eq!(r.issue.count, 6);
        assert_eq!(r.register.count, 12);
        assert_eq!(r.config_change.last_receipt_ms.len(), 2);
        assert_eq!(r.registry_change.subscribers, 6);
        assert!(r.memory.hwm_kib > 0);
        assert!(r.snapshot_bytes[0] > 0);
        let flips = r.health_flips.as_ref().unwrap();
        // 12 copies over 6 proxies of 3 services: `svc-001` holds 4, flipped down and up twice.
        assert_eq!(flips.changes, 16);
        assert_eq!(flips.callers, 2);
        let text = render(&r);
        assert!(text.contains("registry change"), "{text}");
        assert!(text.contains("health flips"), "{text}");
        // Whole snapshots, as before deltas: a copy joining costs every subscriber more bytes.
        let whole = measure(&BenchArgs {
            whole: true,
            ..args
        })
        .unwrap();
        assert_eq!(whole.snapshots, "whole");
        assert!(r.registry_change.bytes_per_subscriber > 0.0);
        assert!(
            r.registry_change.bytes_per_subscriber < whole.registry_change.bytes_per_subscriber,
            "{} vs {}",
            r.registry_change.bytes_per_subscriber,
            whole.registry_change.bytes_per_subscriber
        );
        assert!(r.config_change.bytes_per_change < whole.config_change.bytes_per_change);
        // Three proxies to a connection: every subscriber still gets every change.
        let shared = measure(&BenchArgs {
            per_connection: 3,
            ..args
        })
        .unwrap();
        assert_eq!(shared.registry_change.subscribers, 6);
        assert_eq!(shared.config_change.last_receipt_ms.len(), 2);
        assert_eq!(shared.health_flips.unwrap().changes, 16);
        assert!(
            shared.command.contains("--per-connection 3"),
            "{}",
            shared.command
        );
        assert!(
            measure(&BenchArgs {
                per_connection: 0,
                ..args
            })
            .is_err()
        );
    }
}
