//! `hopwise control …` and `hopwise status`: the control crate's operations run, what they
//! return shown on stdout, the exit status chosen (0 done, 1 refused because of error findings or
//! a CA rotation stage not safe yet, 2 bad input), and logging set up for a running control
//! plane. The operations themselves are `hopwise_control::cli`'s.

use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use hopwise_control::cli::{self, CliError, Command, ControlAction, ControlArgs};
use hopwise_control::client;
use hopwise_control::plane::StartError;

use super::{EXIT_BAD_INPUT, EXIT_FINDINGS};

/// Runs one `control` or `status` command.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Status { server } => {
            let status = cli::status(&server)?;
            show(&client::render_status(&status, now_unix_ms()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Control(ControlArgs {
            action: Some(ControlAction::Apply { file, server }),
            ..
        }) => {
            let response = cli::apply(&file, &server)?;
            show(&client::render_apply(&response))?;
            Ok(if response.applied {
                ExitCode::SUCCESS
            } else if response.diagnostics.is_empty() {
                ExitCode::from(EXIT_FINDINGS)
            } else {
                ExitCode::from(EXIT_BAD_INPUT)
            })
        }
        Command::Control(ControlArgs {
            action:
                Some(ControlAction::RotateCa {
                    stage,
                    server,
                    wait,
                    force,
                }),
            ..
        }) => {
            let response = cli::rotate_ca(stage, &server, wait.map(|w| w.get()), force)?;
            show(&client::render_rotate(&response))?;
            Ok(if response.done {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FINDINGS)
            })
        }
        Command::Control(ControlArgs {
            action: Some(ControlAction::Token { action }),
            ..
        }) => {
            show(&cli::token::run(action)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Control(args) => serve(args),
    }
}

/// Runs the control plane until SIGTERM or Ctrl-C, its log on stderr.
fn serve(args: ControlArgs) -> anyhow::Result<ExitCode> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
    let kubernetes = args.kubernetes;
    let reviewer = if kubernetes {
        Some(crate::kube::token_reviewer()?)
    } else {
        None
    };
    let started = if kubernetes && args.config.is_none() {
        // The `Mesh` resource's file (waited for, its refusals in its status): not the
        // refusal below, which ends the process.
        Ok(crate::kube::mesh::start(args, reviewer)?)
    } else {
        cli::serve::start_with(args, reviewer, None)
    };
    let serving = match started {
        Ok(s) => s,
        Err(CliError::Start(StartError::Refused { name, findings })) => {
            show(&cli::serve::refusal(&name, &findings))?;
            return Ok(ExitCode::from(EXIT_FINDINGS));
        }
        Err(e) => return Err(e.into()),
    };
    if kubernetes {
        serving.spawn(crate::kube::discovery);
        serving.spawn(crate::kube::routes);
        serving.spawn(crate::kube::mesh::watch);
    }
    show(serving.summary())?;
    serving.run_until(hopwise_proxy::server::shutdown_signal())?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` to stdout at once (a running control plane's summary must not wait in a
/// buffer).
fn show(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout();
    out.write_all(text.as_bytes()).map_err(CliError::Output)?;
    out.flush().map_err(CliError::Output)
}

fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
