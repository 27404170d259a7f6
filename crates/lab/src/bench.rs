//! `hopwise bench`: the command line of the benchmarks. `hops` measures what one mesh hop
//! costs; `backend` and `client` are the hidden helpers it re-executes as separate processes
//! (so they can be pinned like the proxies). The parts: [`layout`] (the configurations, as
//! text), [`load`] (client and backend), [`hops`] (the interleaved runs), [`stats`] (the
//! arithmetic), [`report`] (table, JSON, SVG). [`control`] is `hopwise control bench`: one
//! control plane against many simulated proxies. Writes only to the writer it is given; the
//! progress bar goes to stderr.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use hopwise_model::Dur;

pub mod control;
pub mod hops;
pub mod layout;
pub mod load;
pub mod report;
pub mod stats;

use crate::error::{LabError, io};

/// `hopwise bench …`
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Per-hop cost: chains of 0..N proxy hops (out ─(mTLS)─▶ in) in front of a minimal backend,
    /// plain and mTLS, in interleaved runs: latency, CPU and memory per proxy.
    Hops(HopsArgs),
    /// The minimal HTTP/1.1 backend (a helper process of `hops`).
    #[command(hide = true)]
    Backend(BackendArgs),
    /// The HTTP/1.1 keep-alive load client (a helper process of `hops`).
    #[command(hide = true)]
    Client(ClientArgs),
}

/// Between proxies: plain HTTP, mutual TLS 1.3, or opaque TCP (the same HTTP load carried as
/// bytes: hopwise's CONNECT tunnels over mutual TLS, nginx's `stream` with TLS between sides).
/// `captured`: the `mtls` chains with the client captured (hopwise only, as root): it runs in a
/// network namespace of its own and calls the first callee by name, and nftables redirect the
/// call to the first proxy's capture listener (docs/performance.md, "Captured").
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Plain,
    Mtls,
    Tcp,
    Captured,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Mtls => "mtls",
            Mode::Tcp => "tcp",
            Mode::Captured => "captured",
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct HopsArgs {
    /// Interleaved runs; the order of configurations rotates each run [default: 5].
    #[arg(long)]
    pub runs: Option<usize>,
    /// Requests per latency measurement, one at a time on one connection [default: 4000].
    #[arg(long)]
    pub requests: Option<u64>,
    /// Requests per second in the CPU measurement.
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Length of the CPU measurement [default: 10s].
    #[arg(long)]
    pub duration: Option<Dur>,
    /// Most connections the client opens in the CPU measurement, as a pooled client would; a
    /// request due while all are busy is counted as a stall, not sent. Peak RSS is measured at
    /// this load.
    #[arg(long, default_value_t = load::RATE_CONNECTIONS)]
    pub connections: usize,
    /// Longest chain, in hops [default: 4].
    #[arg(long)]
    pub max_hops: Option<usize>,
    /// Worker threads (or processes) of every proxy.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Between proxies: plain HTTP, mutual TLS, opaque TCP over mutual TLS (`tcp`: hopwise and
    /// nginx's `stream` only), mutual TLS with the client captured (`captured`: hopwise only,
    /// needs root, `ip` and `nft`), any of them.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "plain,mtls")]
    pub modes: Vec<Mode>,
    /// Pin every process (proxies, client, backend) to CPU 0 with `taskset -c 0`.
    #[arg(long)]
    pub pin: bool,
    /// Also run the chains through nginx, HAProxy and Envoy, where they are installed.
    #[arg(long)]
    pub peers: bool,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Where to write the SVG plot of p50 latency against hops.
    #[arg(long, default_value = "bench-hops.svg")]
    pub svg: PathBuf,
    /// A smoke run: 1 run, 300 requests, a 1 s CPU phase, hops 0..2 (explicit options win).
    #[arg(long)]
    pub quick: bool,
    /// Warm-up requests before each latency measurement [default: a tenth of --requests, at
    /// least 50].
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Also measure hopwise's chains with every proxy writing the access log (JSON) to a file.
    #[arg(long)]
    pub access_log: bool,
    /// Also measure hopwise's chains with tracing at each sampling ratio (`1%`, `100%`, or
    /// 0–1), spans exported over OTLP/gRPC to a collector the bench runs itself.
    #[arg(long, value_delimiter = ',', value_name = "RATIO")]
    pub tracing: Vec<String>,
    /// Where `--modes captured` records the namespaces it makes, so that a crashed bench's are
    /// swept by the next (as `hopwise run --state`; its own directory, so it sweeps only its own).
    #[arg(long, default_value = hops::CAPTURE_STATE)]
    pub state: PathBuf,
    /// Measure each configuration that differs from a baseline by one thing AT THE SAME TIME
    /// as that baseline, so the machine's drift cancels: every recording configuration against
    /// its recording-off twin, `captured` against `mtls` (same hops). Both chains run side by
    /// side and one client alternates requests between them (A, B, then B, A …; for captured also
    /// the baseline's backend directly, for the per-hop base of the percentage). Reported: the
    /// difference of p50 (and p90) per hop — ÷ hops for recording, ÷ 1 for captured (only its
    /// first hop differs), and for captured as a % of the baseline's per-hop p50, (p50(mtls) −
    /// p50(backend)) ÷ hops — median [min–max] over runs and over --blocks blocks of each
    /// run. Against the issues' bars (access log 5 µs, tracing 1 % 2 µs, captured 5 %) it says
    /// "meets" only when the upper end of the spread (the runs' with 3 runs or more, else the
    /// blocks') is under the bar, "over" when its lower end is above, else "cannot judge".
    /// Only the pairs are measured: no solo chains, no CPU or RSS phase, no plot.
    #[arg(long)]
    pub paired: bool,
    /// With --paired: how many blocks each run's alternation is split into.
    #[arg(long, default_value_t = 10, requires = "paired")]
    pub blocks: usize,
}

#[derive(Debug, Clone, clap::Args)]
pub struct BackendArgs {
    /// Where to listen.
    #[arg(long)]
    pub listen: SocketAddr,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Where to send requests (the first proxy of a chain, or the backend): `IP:PORT`, or
    /// `NAME:PORT` resolved once at the start (as a captured app resolves a service's name).
    #[arg(long)]
    pub target: String,
    /// The `Host` header of every request (a captured call's names the service).
    #[arg(long, default_value = "backend")]
    pub host: String,
    /// Latency mode: this many requests, one at a time on one connection.
    #[arg(long, conflicts_with = "rate")]
    pub requests: Option<u64>,
    /// Requests before the measured ones (latency mode).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Rate mode: requests per second, started on schedule whatever the latency.
    #[arg(long, requires = "duration")]
    pub rate: Option<u64>,
    /// Rate mode: how long the measured phase lasts.
    #[arg(long)]
    pub duration: Option<Dur>,
    /// Rate mode: how long to run at the rate before the measured phase.
    #[arg(long)]
    pub warmup_time: Option<Dur>,
    /// Rate mode: most connections to open; a tick with all of them busy is a stall.
    #[arg(long, default_value_t = load::RATE_CONNECTIONS)]
    pub connections: usize,
    /// Paired latency mode: more targets, alternated with --target one request at a time
    /// (each on its own kept-alive connection), each measured into its own histogram.
    #[arg(long, requires = "requests")]
    pub also: Vec<SocketAddr>,
    /// The network namespace (`/run/netns/NAME`) the --target connection is made in (root):
    /// a captured call, beside --also targets in this process's namespace.
    #[arg(long, requires = "also")]
    pub target_netns: Option<PathBuf>,
    /// Paired latency mode: the measured requests split into this many blocks, each block's
    /// percentiles per target reported too.
    #[arg(long, default_value_t = 10, requires = "also")]
    pub blocks: usize,
}

/// Runs `hopwise bench …`. Results (the table or JSON; the helpers' protocol lines) go to `out`.
pub fn run(args: Args, out: &mut dyn Write) -> Result<(), LabError> {
    match args.command {
        Command::Hops(a) => {
            let report = hops::run(&a)?;
            if !a.paired {
                report::write_svg(&report, &a.svg)?;
            }
            let text = if a.json {
                serde_json::to_string_pretty(&report)
                    .map_err(|e| LabError::Failed(format!("cannot render the JSON: {e}")))?
                    + "\n"
            } else {
                let mut t = report::text(&report);
                if !a.paired {
                    t.push_str(&format!("plot: {}\n", a.svg.display()));
                }
                t
            };
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(io("cannot write the results"))
        }
        Command::Backend(a) => load::backend(&a, out),
        Command::Client(a) => load::client(&a, out),
    }
}
