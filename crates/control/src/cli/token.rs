//! `hopwise control token rotate|revoke SERVICE`: a new join token from the running control
//! plane (the admin-only `Token` call); the old one is refused from its next call on.

use std::path::PathBuf;

use super::{CliError, ServerArgs, runtime};
use crate::client;
use crate::store::write_atomic;

/// `hopwise control token …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TokenAction {
    /// A new token for SERVICE, written to the control plane's `<state>/tokens/SERVICE` (and to
    /// --out FILE here, owner-only).
    Rotate {
        service: String,
        /// Also write the new token to this file (owner-only), e.g. for another machine.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// SERVICE's token stops working at once; the new one is not sent over the network (it is
    /// only in the control plane's `<state>/tokens/SERVICE`).
    Revoke {
        service: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// Rotates or revokes; with `--out`, writes the new token there too (owner-only, replacing the
/// file whole, as the control plane writes its own). Returns what to tell the operator.
pub fn run(action: TokenAction) -> Result<String, CliError> {
    let (service, server, revoke, file) = match action {
        TokenAction::Rotate {
            service,
            out,
            server,
        } => (service, server, false, out),
        TokenAction::Revoke { service, server } => (service, server, true, None),
    };
    let server = server.resolve()?;
    let response = runtime()?.block_on(client::token(&server, &service, revoke))?;
    let mut text = format!("{}\n", response.message);
    if let Some(path) = file {
        write_atomic(&path, format!("{}\n", response.token).as_bytes(), 0o600)?;
        text.push_str(&format!("written to {}\n", path.display()));
    }
    Ok(text)
}
