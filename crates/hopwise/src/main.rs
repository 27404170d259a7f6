//! The `hopwise` binary: subcommands over one mesh file. The only place that reads files,
//! prints, uses `anyhow` or chooses an exit status.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args as _, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use hopwise_analyze::chain::{self, ChainFailure};
use hopwise_analyze::{Options, render};
use hopwise_model::{Mesh, Protocol};

mod control;
mod import;
mod kube;

/// Exit status for a mesh file that cannot be read or is not valid.
pub(crate) const EXIT_BAD_INPUT: u8 = 2;
/// Exit status when `check` finds an error.
pub(crate) const EXIT_FINDINGS: u8 = 1;

#[derive(Debug, Parser)]
#[command(
    name = "hopwise",
    version,
    about = "A service mesh that counts before it chooses"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Analyse a mesh file — or an existing Istio, Linkerd or Gateway API configuration
    /// (`--from`, with `--calls`): timeout budgets, retry fan-out, unsafe retries, unbounded
    /// queues.
    Check {
        /// The mesh file (YAML).
        #[arg(required_unless_present = "from", conflicts_with = "from")]
        file: Option<PathBuf>,
        #[command(flatten)]
        import: import::ImportArgs,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Attempts at one service per request above which fan-out is an error.
        #[arg(long, default_value_t = 10)]
        max_fanout: u64,
        /// Instead of the analysis, say which route, rule and backends a request takes:
        /// `'GET pricing/quote?id=7 -H version:two'` (the host names the service; docs/check.md).
        #[arg(
            long,
            conflicts_with = "from",
            value_name = "'METHOD TARGET [-H name:value]...'"
        )]
        request: Option<String>,
    },
    /// Write the hopwise mesh file equivalent to an existing Istio, Linkerd or Gateway API
    /// configuration (`--from`, with `--calls`): what `check --from` counts; with `--out`, also
    /// the same file with check's fixes applied beside it (`mesh.yaml` → `mesh.fixed.yaml`).
    Convert {
        #[command(flatten)]
        import: import::ImportArgs,
        /// Where to write it (default: standard output); the fixed file goes beside it.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// The seed's retry fan-out calculator: attempts at the bottom of a chain of proxies.
    Fanout(FanoutArgs),
    /// Print the JSON Schema of the mesh file.
    Schema,
    /// Run the sidecar proxy of one copy of a service, from the mesh file alone.
    Proxy(hopwise::sidecar::ProxyArgs),
    /// Run a gateway (`services.<name>.gateway`, docs/routes.md): the front door for clients
    /// outside the mesh, the same proxy as `hopwise proxy --service <name>`.
    Gateway(hopwise::sidecar::ProxyArgs),
    /// Create a development CA and a certificate per service with its SPIFFE identity.
    Certs {
        /// The mesh file.
        #[arg(long)]
        config: PathBuf,
        /// Where to write the PEM files (default: the mesh file's `mesh.certs`). The CA's key
        /// goes apart, into `OUT/ca/`.
        #[arg(long)]
        out: Option<PathBuf>,
        /// How long each service's certificate is valid (`24h`, `30m`).
        #[arg(long, default_value = "24h")]
        validity: hopwise_model::Dur,
        /// How long the development CA is valid; no certificate outlives it.
        #[arg(long, default_value = "168h")]
        ca_validity: hopwise_model::Dur,
    },
    /// Benchmarks: `hopwise bench hops` measures what one mesh hop costs.
    Bench(hopwise_lab::bench::Args),
    /// The seeds' scenarios with real proxies: `hopwise demo retry-chain`, `hopwise demo loan-fee`,
    /// `hopwise demo registry`.
    Demo(hopwise_lab::demo::Args),
    /// Run a mesh file on this machine: the control plane, a sample app with fault knobs per
    /// copy (`sample:` in the file), a proxy per copy, optional load, until Ctrl-C.
    Up(hopwise_lab::up::UpArgs),
    /// Change the fault knobs of a running `hopwise up`'s sample copies.
    Fault(hopwise_lab::up::FaultArgs),
    /// A live stream of the requests through a service's proxies (method, path, status, tries,
    /// latency, the caller's identity), from each copy's admin endpoint.
    Tap(hopwise_lab::up::TapArgs),
    /// Run a command as one copy of a service, captured: in its own network namespace, all of
    /// its TCP through the copy's proxy, services reached by name (docs/capture.md; root).
    Run(hopwise_lab::capture::RunArgs),
    /// Load the capture rules in a Kubernetes pod's network namespace (the injected
    /// `hopwise-init` container runs it; docs/kubernetes.md).
    CaptureInit(hopwise_lab::capture::init::CaptureInitArgs),
    /// One copy of a sample app (started by `hopwise up`).
    #[command(hide = true)]
    Sample(hopwise_lab::samples::apps::SampleArgs),
    /// A service's own command (`run:`), started by `hopwise up`: tied to `up`, then replaced
    /// by the command.
    #[command(hide = true)]
    Exec(hopwise_lab::up::command::ExecArgs),
    /// Print the manifests that install hopwise in a Kubernetes cluster (a JSON `List`):
    /// `hopwise install | kubectl apply --server-side -f -` (docs/kubernetes.md).
    Install(kube::InstallArgs),
    /// Serve the sidecar injection webhook (Kubernetes; the control plane's pod runs it).
    Webhook(kube::WebhookArgs),
    /// `hopwise control` (the control plane) and `hopwise status`.
    #[command(flatten)]
    Control(hopwise_control::cli::Command),
}

#[derive(Debug, clap::Args)]
struct FanoutArgs {
    /// Calls in the chain (3: frontend → checkout → pricing → inventory).
    #[arg(long, default_value_t = 3)]
    depth: u32,
    /// Retries each proxy makes.
    #[arg(long, default_value_t = 2)]
    proxy_retries: u32,
    /// Retries each service's own code makes around its call.
    #[arg(long, default_value_t = 0)]
    code_retries: u32,
    /// How the bottom service fails.
    #[arg(long, value_enum, default_value_t = ChainFailureArg::Down)]
    failure: ChainFailureArg,
    /// Protocol of the calls.
    #[arg(long, value_enum, default_value_t = ProtocolArg::Grpc)]
    protocol: ProtocolArg,
    /// Status codes every proxy retries (added to Istio's list).
    #[arg(long, value_delimiter = ',')]
    retriable_status_codes: Vec<u16>,
    /// A retry budget on every proxy, as a share (0.2 = 20 %).
    #[arg(long)]
    budget: Option<f64>,
    /// Only the top proxy retries.
    #[arg(long)]
    top_only: bool,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ChainFailureArg {
    /// Connections are refused.
    Down,
    /// Answers gRPC UNAVAILABLE (over gRPC) or HTTP 503 (over HTTP) at once.
    Error,
    /// Never answers.
    Hang,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ProtocolArg {
    Http,
    Grpc,
}

fn main() -> ExitCode {
    // Started by the lab tied to its parent (`hopwise up`'s children): go when it goes, even
    // if it is killed. Any other start never asks.
    if let Some(parent) = hopwise_lab::processes::parent::tied_parent()
        && !hopwise_lab::processes::parent::die_with_parent(parent)
    {
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let result = match parse() {
        Parsed::Cli(cli) => run(*cli),
        Parsed::ControlBench(args) => {
            hopwise_lab::bench::control::run(&args, &mut std::io::stdout())
                .map(|()| ExitCode::SUCCESS)
                .map_err(anyhow::Error::from)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("hopwise: {e:#}");
            }
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// The command line, parsed: `hopwise control bench` (the lab's) or any other command.
enum Parsed {
    Cli(Box<Cli>),
    ControlBench(hopwise_lab::bench::control::BenchArgs),
}

/// The command line: [`Cli`], with `hopwise control bench` added under `hopwise control`. The
/// other actions of `control` are the control crate's; its benchmark is the lab's, which the
/// control crate cannot name (the lab depends on it).
fn command() -> clap::Command {
    Cli::command().mut_subcommand("control", |control| {
        control.subcommand(
            hopwise_lab::bench::control::BenchArgs::augment_args(clap::Command::new("bench"))
                .about(
                    "Measure a control plane at scale: simulated proxies (in this process) issue \
                     CSRs, subscribe, register copies and report health; then the time for a \
                     configuration change and a registry change to reach every subscriber, and \
                     the control plane's memory",
                )
                .long_about(None),
        )
    })
}

fn parse() -> Parsed {
    let matches = command().get_matches();
    if let Some(("control", control)) = matches.subcommand()
        && let Some(("bench", bench)) = control.subcommand()
    {
        let args = hopwise_lab::bench::control::BenchArgs::from_arg_matches(bench)
            .unwrap_or_else(|e| e.exit());
        return Parsed::ControlBench(args);
    }
    Parsed::Cli(Box::new(
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()),
    ))
}

/// `hopwise check FILE --request LINE`: where the request goes (exit 0), that no rule takes it
/// (exit 1), or why it names nothing to route (exit 2).
#[allow(clippy::print_stdout, clippy::print_stderr)]
fn check_request(mesh: &Mesh, line: &str, format: Format) -> anyhow::Result<ExitCode> {
    use hopwise_analyze::routes::{self, Probe, Routing};
    let routing = Probe::parse(line)
        .map_err(anyhow::Error::from)
        .and_then(|p| Ok(routes::take(mesh, &p)?));
    let routing = match routing {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hopwise: --request {line:?}: {e}");
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    match format {
        Format::Text => print!("{}", render::routing(line, &routing)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&routing)?),
    }
    Ok(if matches!(routing, Routing::NoMatch { .. }) {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    })
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check {
            file,
            import,
            format,
            max_fanout,
            request,
        } => {
            let Some(file) = file else {
                return import::check(&import, format, max_fanout);
            };
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read the mesh file {name}"))?;
            let Some(mesh) = read_or_report(&name, &text, "checked") else {
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            };
            if let Some(line) = request {
                return check_request(&mesh, &line, format);
            }
            let opts = Options {
                max_fanout,
                ..Options::default()
            };
            let report = hopwise_analyze::check(&mesh, &opts);
            match format {
                Format::Text => print!("{}", report_text(&name, &mesh, &report)),
                Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
            Ok(if report.has_errors() {
                ExitCode::from(EXIT_FINDINGS)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Convert { import, out } => import::convert(&import, out.as_deref()),
        Command::Fanout(a) => {
            if let Some(b) = a.budget
                && !(0.0..=1.0).contains(&b)
            {
                anyhow::bail!(
                    "--budget {b}: a budget is a share between 0.0 and 1.0 (20 % is 0.2)"
                );
            }
            if a.depth == 0 || a.depth > 20 {
                anyhow::bail!("--depth {}: choose 1 to 20 calls", a.depth);
            }
            let protocol = match a.protocol {
                ProtocolArg::Http => Protocol::Http,
                ProtocolArg::Grpc => Protocol::Grpc,
            };
            let params = chain::Params {
                depth: a.depth,
                proxy_retries: a.proxy_retries,
                code_retries: a.code_retries,
                failure: match a.failure {
                    ChainFailureArg::Down => ChainFailure::Down,
                    ChainFailureArg::Error => ChainFailure::Error,
                    ChainFailureArg::Hang => ChainFailure::Hang,
                },
                protocol,
                retriable_status_codes: a.retriable_status_codes,
                budget: a.budget,
                top_only: a.top_only,
            };
            let result = chain::run(&params);
            match a.format {
                Format::Text => print!("{}", chain::text(&params, &result)),
                Format::Json => println!("{}", serde_json::to_string_pretty(&result)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Proxy(a) => hopwise::sidecar::start(a, "proxy"),
        Command::Gateway(a) => hopwise::sidecar::start(a, "gateway"),
        Command::Bench(a) => {
            hopwise_lab::bench::run(a, &mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo(a) => {
            hopwise_lab::demo::run(a, &mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Up(a) => run_up(&a),
        Command::Run(a) => {
            let (mesh, _) = hopwise::mesh_file::load(&a.config)?;
            let exe = std::env::current_exe().context("cannot find the hopwise binary")?;
            let status = hopwise_lab::capture::run(&a, &mesh, &exe)?;
            // The command's own exit status, as a shell would give it (128 + a signal).
            let code = status.code().unwrap_or_else(|| {
                use std::os::unix::process::ExitStatusExt;
                128 + status.signal().unwrap_or(0)
            });
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        Command::Fault(a) => {
            hopwise_lab::up::fault::run(&a, &mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tap(a) => {
            hopwise_lab::up::tap::run(&a, &mut std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sample(a) => {
            hopwise_lab::samples::apps::run(&a)?;
            Ok(ExitCode::SUCCESS)
        }
        // Returns only if the command could not be started.
        Command::Exec(a) => Err(hopwise_lab::up::command::exec(&a).into()),
        Command::Control(c) => control::run(c),
        Command::Install(a) => kube::install(&a),
        Command::CaptureInit(a) => {
            hopwise_lab::capture::init::init(&a, &mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Webhook(a) => kube::webhook(&a),
        Command::Certs {
            config,
            out,
            validity,
            ca_validity,
        } => {
            let (mesh, base) = hopwise::mesh_file::load(&config)?;
            let dir = match out {
                Some(d) => d,
                None => base.join(mesh.certs.as_deref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: set mesh.certs or pass --out to say where the certificates go",
                        config.display()
                    )
                })?),
            };
            let life = hopwise_proxy::certs::Lifetimes {
                ca: ca_validity.get(),
                leaf: validity.get(),
            };
            let now = std::time::SystemTime::now();
            let written = hopwise_proxy::certs::write_certs(&mesh, &dir, life, now)
                .with_context(|| format!("cannot write certificates into {}", dir.display()))?;
            print_certs(&written, life);
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&hopwise_model::schema())?
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What `hopwise certs` wrote: each file, what it is, until when, and its mode.
#[allow(clippy::print_stdout)]
fn print_certs(w: &hopwise_proxy::certs::Written, life: hopwise_proxy::certs::Lifetimes) {
    let width = w
        .files
        .iter()
        .map(|f| f.path.display().to_string().len())
        .max()
        .unwrap_or(0);
    for f in &w.files {
        let when = match (f.not_after, f.mode) {
            (Some(t), _) => format!("valid until {}", hopwise_proxy::certs::utc(t)),
            (None, Some(m)) => format!("mode {m:04o}"),
            (None, None) => String::new(),
        };
        println!("{:<width$}  {when:<32}  {}", f.path.display(), f.what);
    }
    if let Some(old) = &w.removed {
        println!(
            "removed {} (the key of the CA this replaced)",
            old.display()
        );
    }
    println!(
        "the CA's key is in {} (mode 0700), apart from the services' files; certificates last {}, the CA {}",
        w.ca_dir.display(),
        hopwise_model::Dur(life.leaf),
        hopwise_model::Dur(life.ca)
    );
}

/// The mesh in `text`, or `None` after printing every problem (and that nothing was `done`).
#[allow(clippy::print_stderr)]
fn read_or_report(name: &str, text: &str, done: &str) -> Option<Mesh> {
    match Mesh::from_yaml(text) {
        Ok(m) => Some(m),
        Err(diags) => {
            eprintln!("{}", diags.render(name));
            eprintln!(
                "hopwise: {name}: {} problem(s); nothing was {done}",
                diags.0.len()
            );
            None
        }
    }
}

/// `check`'s report as text, each finding's place as a file's problems are given: the file,
/// then the line and column its path is written at (or its nearest written parent), the path.
fn report_text(name: &str, mesh: &Mesh, report: &hopwise_analyze::Report) -> String {
    let place = |f: &hopwise_analyze::Finding| match mesh.locations.of(&f.path) {
        Some(at) => format!("{name}:{}:{}: {}", at.line, at.column, f.path),
        None => f.path.clone(),
    };
    render::tables(report) + &render::findings(report, place)
}

/// `hopwise up`: the file is read and checked as `check` does (refused with its problems or
/// error findings), then the lab runs it.
#[allow(clippy::print_stdout, clippy::print_stderr)]
fn run_up(a: &hopwise_lab::up::UpArgs) -> anyhow::Result<ExitCode> {
    let name = a.file.display().to_string();
    let file = std::fs::canonicalize(&a.file)
        .with_context(|| format!("cannot read the mesh file {name}"))?;
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read the mesh file {name}"))?;
    let Some(mesh) = read_or_report(&name, &text, "started") else {
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    };
    let report = hopwise_analyze::check(&mesh, &Options::default());
    if report.has_errors() {
        eprint!("{}", report_text(&name, &mesh, &report));
        eprintln!("hopwise: {name}: `hopwise check` finds errors; nothing was started");
        return Ok(ExitCode::from(EXIT_FINDINGS));
    }
    // What a crashed `hopwise run` left (docs/capture.md): its records say what is provably its.
    for id in hopwise_lab::capture::sweep(&a.state) {
        eprintln!("hopwise up: removed what the dead captured run {id} left");
    }
    hopwise_lab::up::run::up(a, &mesh, &file, &mut std::io::stdout())
        .with_context(|| format!("hopwise up {name}"))?;
    Ok(ExitCode::SUCCESS)
}
