//! What `hopwise control bench` reports: the figures ([`Report`] and its parts, serialised as
//! the `--json` output) and the text table ([`render`]). Pure.

use std::time::Duration;

use serde::Serialize;

/// Milliseconds at three points of a distribution (nearest rank).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub(super) fn of(samples: &[Duration]) -> Percentiles {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| -> f64 {
            if ms.is_empty() {
                return 0.0;
            }
            let rank = ((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len());
            round3(ms[rank - 1])
        };
        Percentiles {
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A batch of calls: how many, how long in all, the rate, and each call's latency.
#[derive(Debug, Clone, Serialize)]
pub struct Rate {
    pub count: usize,
    pub seconds: f64,
    pub per_second: f64,
    pub in_flight: usize,
    pub latency_ms: Percentiles,
    /// The control plane's CPU time (user + system) over the batch, per call, in ms: what a
    /// call costs the plane whatever the machine's load (the rate also counts the callers).
    pub cpu_ms_per_call: f64,
}

impl Rate {
    pub(super) fn of(
        count: usize,
        wall: Duration,
        in_flight: usize,
        latencies: &[Duration],
    ) -> Rate {
        let seconds = wall.as_secs_f64();
        Rate {
            count,
            seconds: round3(seconds),
            per_second: if seconds > 0.0 {
                (count as f64 / seconds).round()
            } else {
                0.0
            },
            in_flight: in_flight.min(count),
            latency_ms: Percentiles::of(latencies),
            cpu_ms_per_call: 0.0,
        }
    }

    /// The same, with the control plane's CPU time over the batch (`ticks` of USER_HZ).
    pub(super) fn with_cpu(mut self, ticks: u64) -> Rate {
        if self.count > 0 {
            self.cpu_ms_per_call = round3(ticks as f64 / super::USER_HZ * 1e3 / self.count as f64);
        }
        self
    }
}

/// How long one kind of change took to reach every subscriber.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    /// What was changed, and from which call the time is counted.
    pub change: String,
    pub rounds: usize,
    pub subscribers: usize,
    /// Every subscriber's receipt in every round, from the call.
    pub latency_ms: Percentiles,
    /// The last subscriber's receipt, per round.
    pub last_receipt_ms: Vec<f64>,
    /// Bytes of snapshots (protobuf, as sent) all subscribers received per change, on average.
    pub bytes_per_change: f64,
    /// The same, per subscriber.
    pub bytes_per_subscriber: f64,
    /// The control plane's CPU time (user + system) per change, from the call until 200 ms
    /// after the last subscriber had it (their acknowledgements included).
    pub cpu_ms_per_change: f64,
}

/// Health flips of one service's copies, as fast as they go: how many the plane sustains.
#[derive(Debug, Clone, Serialize)]
pub struct Flips {
    /// What was changed, and whom it concerns.
    pub change: String,
    /// SetHealth calls, each one changing an endpoint set.
    pub changes: usize,
    /// Subscribers whose snapshot holds the copies (they must see the final state).
    pub callers: usize,
    /// From the first call until every caller had the final state of the last pass.
    pub seconds: f64,
    pub per_second: f64,
    /// The control plane's CPU time (user + system) per change.
    pub cpu_ms_per_change: f64,
    /// Snapshots the callers received meanwhile (intermediate states coalesce).
    pub snapshots_to_callers: usize,
    /// Snapshots every other subscriber received meanwhile (their content never changed).
    pub snapshots_to_others: usize,
    /// Bytes of snapshots (as sent) received meanwhile, by everyone, per change.
    pub bytes_per_change: f64,
}

/// The control plane's memory, in KiB.
#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    /// Whose memory and where it was read.
    pub method: String,
    /// Serving, before any proxy connected.
    pub rss_before_kib: u64,
    /// Every proxy connected and subscribed, every copy registered and healthy.
    pub rss_loaded_kib: u64,
    /// After the measured changes.
    pub rss_end_kib: u64,
    /// The peak (VmHWM).
    pub hwm_kib: u64,
}

/// Where the figures were taken.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    /// `release` or `debug`: figures from a debug build are not figures.
    pub build: &'static str,
}

/// Everything measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    pub machine: Machine,
    /// `child process` or `in-process`.
    pub control_plane: String,
    pub proxies: usize,
    pub services: usize,
    pub copies: usize,
    /// Bytes of one snapshot as sent (protobuf), smallest and largest first snapshot.
    pub snapshot_bytes: [usize; 2],
    /// `deltas` (after each stream's first, whole, snapshot) or `whole` (`--whole`).
    pub snapshots: &'static str,
    /// CSRs signed.
    pub issue: Rate,
    /// Streams opened until every first snapshot arrived.
    pub subscribe: Rate,
    pub register: Rate,
    pub set_health: Rate,
    pub renew: Rate,
    pub memory: Memory,
    pub config_change: Spread,
    pub registry_change: Spread,
    /// `None` when `svc-001` holds no copy (one service, or fewer copies than proxies).
    pub health_flips: Option<Flips>,
    pub notes: Vec<String>,
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// One batch of calls, as a line.
fn rate_line(what: &str, x: &Rate, unit: &str) -> String {
    format!(
        "{what:<10} {:>6} in {:>7.3} s  {:>7} {unit}/s   latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} in flight), plane CPU {:.3} ms a call\n",
        x.count,
        x.seconds,
        x.per_second,
        x.latency_ms.p50,
        x.latency_ms.p99,
        x.latency_ms.max,
        x.in_flight,
        x.cpu_ms_per_call
    )
}

/// One kind of change, as three lines.
fn spread_lines(what: &str, s: &Spread) -> String {
    format!(
        "{what}: {}\n  to all {} subscribers, {} rounds: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; last subscriber per round: {} ms\n  \
         sent {:.0} bytes a change, {:.0} a subscriber; control plane CPU {:.1} ms a change\n",
        s.change,
        s.subscribers,
        s.rounds,
        s.latency_ms.p50,
        s.latency_ms.p99,
        s.latency_ms.max,
        s.last_receipt_ms
            .iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        s.bytes_per_change,
        s.bytes_per_subscriber,
        s.cpu_ms_per_change,
    )
}

/// The command, the machine and the mesh.
fn header(r: &Report) -> String {
    let m = &r.machine;
    format!(
        "{}\nmachine: {} CPU(s), {}, {} GiB, Linux {}; {} build; control plane: {}\n\
         {} proxies, {} services, {} copies; a first snapshot is {}–{} bytes; then {}\n\n",
        r.command,
        m.cpus,
        m.cpu_model,
        m.memory_gib,
        m.kernel,
        m.build,
        r.control_plane,
        r.proxies,
        r.services,
        r.copies,
        r.snapshot_bytes[0],
        r.snapshot_bytes[1],
        r.snapshots,
    )
}

fn memory_line(m: &Memory) -> String {
    format!(
        "memory     {} serving, {} loaded, {} at the end, peak {} ({})\n\n",
        mib(m.rss_before_kib),
        mib(m.rss_loaded_kib),
        mib(m.rss_end_kib),
        mib(m.hwm_kib),
        m.method
    )
}

fn flips_lines(f: &Flips) -> String {
    format!(
        "health flips: {}\n  {} changes in {:.3} s: {} changes/s; control plane CPU {:.3} ms a change; \
         snapshots: {} to the {} callers, {} to the others; {:.0} bytes a change\n",
        f.change,
        f.changes,
        f.seconds,
        f.per_second,
        f.cpu_ms_per_change,
        f.snapshots_to_callers,
        f.callers,
        f.snapshots_to_others,
        f.bytes_per_change
    )
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let mut out = header(r);
    out.push_str(&rate_line("issue", &r.issue, "CSRs"));
    out.push_str(&rate_line("subscribe", &r.subscribe, "streams"));
    out.push_str(&rate_line("register", &r.register, "copies"));
    out.push_str(&rate_line("set-health", &r.set_health, "copies"));
    out.push_str(&rate_line("renew", &r.renew, "leases"));
    out.push_str(&memory_line(&r.memory));
    out.push_str(&spread_lines("configuration change", &r.config_change));
    out.push_str(&spread_lines("registry change", &r.registry_change));
    if let Some(f) = &r.health_flips {
        out.push_str(&flips_lines(f));
    }
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let ds: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let p = Percentiles::of(&ds);
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        let p = Percentiles::of(&[Duration::from_millis(3)]);
        assert_eq!((p.p50, p.p99, p.max), (3.0, 3.0, 3.0));
        assert_eq!(Percentiles::of(&[]).max, 0.0);
    }
}
