//! The `hopwise` binary: subcommands over one mesh file. The only place that reads files,
//! prints, uses `anyhow` or chooses an exit status.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use hopwise_analyze::chain::{self, ChainFailure};
use hopwise_analyze::{Options, render};
use hopwise_model::{Mesh, Protocol};

/// Exit status for a mesh file that cannot be read or is not valid.
const EXIT_BAD_INPUT: u8 = 2;
/// Exit status when `check` finds an error.
const EXIT_FINDINGS: u8 = 1;

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
    /// Analyse a mesh file: timeout budgets, retry fan-out, unsafe retries, unbounded queues.
    Check {
        /// The mesh file (YAML).
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Attempts at one service per request above which fan-out is an error.
        #[arg(long, default_value_t = 10)]
        max_fanout: u64,
    },
    /// The seed's retry fan-out calculator: attempts at the bottom of a chain of proxies.
    Fanout(FanoutArgs),
    /// Print the JSON Schema of the mesh file.
    Schema,
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
enum Format {
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
    let cli = Cli::parse();
    match run(cli) {
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

#[allow(clippy::print_stdout, clippy::print_stderr)]
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check {
            file,
            format,
            max_fanout,
        } => {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read the mesh file {name}"))?;
            let mesh = match Mesh::from_yaml(&text) {
                Ok(m) => m,
                Err(diags) => {
                    eprintln!("{}", diags.render(&name));
                    eprintln!(
                        "hopwise: {name}: {} problem(s); nothing was checked",
                        diags.0.len()
                    );
                    return Ok(ExitCode::from(EXIT_BAD_INPUT));
                }
            };
            let opts = Options {
                max_fanout,
                ..Options::default()
            };
            let report = hopwise_analyze::check(&mesh, &opts);
            match format {
                Format::Text => print!("{}", render::text(&report)),
                Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
            Ok(if report.has_errors() {
                ExitCode::from(EXIT_FINDINGS)
            } else {
                ExitCode::SUCCESS
            })
        }
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
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&hopwise_model::schema())?
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
