//! `hopwise-proxy`: the sidecar alone, what `hopwise proxy` runs (`hopwise::sidecar`). Its own
//! binary so that a running proxy maps only the proxy's code.

use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "hopwise proxy",
    version,
    about = "Run the sidecar proxy of one copy of a service"
)]
struct Cli {
    #[command(flatten)]
    args: hopwise::sidecar::ProxyArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match hopwise::sidecar::same_build_or_back().and_then(|()| hopwise::sidecar::run(cli.args)) {
        Ok(code) => code,
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("hopwise: {e:#}");
            }
            ExitCode::from(2)
        }
    }
}
