//! `hopwise demo`: the seeds' scenarios run for real. [`retry_chain`] puts frontend's,
//! checkout's and pricing's proxies in a row (real `hopwise proxy` processes) in front of an
//! inventory that fails each way, under Istio's defaults and under hopwise's; [`loan_fee`] runs
//! the seed "Service Mesh" measurement (a fee service over TLS, a thick loan service that does
//! its own networking, a thin one behind a `hopwise proxy` sidecar); [`registry`] its next step
//! (fixed addresses against the control plane's registry when a copy comes and one dies).
//!
//! The parts: [`loan_thick`] and [`loan_thin`] (the two loan services, whose marked lines are
//! counted); the proxy processes are [`crate::processes::proxies`]', inventory and fee
//! [`crate::samples`]'.
//! Everything but the proxies runs in this process, on one runtime. Results go to the writer
//! it is given; progress lines go to stderr. Every process a demo starts is stopped when it
//! ends, fails or is interrupted (Ctrl-C, SIGTERM).

use std::io::Write;
use std::path::Path;

pub mod loan_fee;
pub mod loan_thick;
pub mod loan_thin;
pub mod registry;
pub mod retry_chain;

use crate::error::{LabError, io};

/// `hopwise demo …`
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// The seed's retry chain: three proxies in a row in front of a failing inventory, under
    /// Istio's defaults and hopwise's, counted by the proxies and by inventory; and the
    /// timeout trap.
    RetryChain(RetryChainArgs),
    /// The seed's "Service Mesh" measurement: a thick loan service against a thin one behind a
    /// hopwise sidecar, calling a fee service over TLS; three sidecar policies.
    LoanFee(LoanFeeArgs),
    /// The seed's next step: a copy added and a copy SIGKILLed under steady load, with fixed
    /// addresses in the mesh file and through the control plane's registry.
    Registry(RegistryArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct RetryChainArgs {
    /// Checkouts per row.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub checkouts: u32,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct LoanFeeArgs {
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RegistryArgs {
    /// Requests per second into a's proxy.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rate: u32,
    /// How long the load runs after the SIGKILL.
    #[arg(long, default_value = "6s")]
    pub after_kill: hopwise_model::Dur,
    /// The copies' lease in the registry layout (at least 1s).
    #[arg(long, default_value = "2s")]
    pub lease_ttl: hopwise_model::Dur,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Runs `hopwise demo …`, starting proxies from this executable (`hopwise` itself).
pub fn run(args: Args, out: &mut dyn Write) -> Result<(), LabError> {
    let exe = std::env::current_exe().map_err(io("cannot find the hopwise executable"))?;
    run_with(args, &exe, out)
}

/// Runs `hopwise demo …` with `hopwise` as the program that runs `hopwise proxy`.
pub fn run_with(args: Args, hopwise: &Path, out: &mut dyn Write) -> Result<(), LabError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("cannot start the demo's runtime"))?;
    let text = rt.block_on(async {
        let work = async {
            match args.command {
                Command::RetryChain(a) => retry_chain::run(&a, hopwise).await,
                Command::LoanFee(a) => loan_fee::run(&a, hopwise).await,
                Command::Registry(a) => registry::run(&a, hopwise).await,
            }
        };
        // Dropping `work` drops the processes it owns, which kills them.
        tokio::select! {
            r = work => r,
            () = hopwise_proxy::server::shutdown_signal() => Err(LabError::Interrupted { who: "the demo" }),
        }
    })?;
    // The servers' tasks end with the runtime.
    drop(rt);
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(io("cannot write the results"))
}

/// Renders `value` as pretty JSON with a final newline.
pub(crate) fn json_text<T: serde::Serialize>(value: &T) -> Result<String, LabError> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| LabError::Failed(format!("cannot render the JSON: {e}")))
}
