//! `hopwise capture-init` (docs/kubernetes.md): the injected `hopwise-init` container's
//! command. Loads `plan/pod.rs`'s rules with `nft -f -` in the namespace it runs in — the
//! pod's — and exits; `--print` prints them instead. Root with NET_ADMIN (the injected
//! container's security context gives it that and NET_RAW, nothing else).

use std::io::Write;
use std::process::Command;

use super::netns::run;
use super::plan::pod::{self, Pod};
use crate::error::{LabError, io};
use crate::processes::supervisor::find_program;

/// `hopwise capture-init …`
#[derive(Debug, Clone, clap::Args)]
pub struct CaptureInitArgs {
    /// The proxy's uid: its own connections are let through.
    #[arg(long)]
    pub proxy_uid: u32,
    /// Where inbound TCP goes: the proxy's mutual-TLS listener.
    #[arg(long, default_value_t = 4143)]
    pub inbound_port: u16,
    /// The proxy's admin port, never redirected (the kubelet probes it).
    #[arg(long, default_value_t = 4191)]
    pub admin_port: u16,
    /// Outbound ports never captured (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub skip_ports: Vec<u16>,
    /// Print the nftables script instead of loading it.
    #[arg(long)]
    pub print: bool,
}

/// Loads (or prints, to `out`) the pod's rules.
pub fn init(args: &CaptureInitArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let script = pod::rules(&Pod {
        proxy_uid: args.proxy_uid,
        inbound_port: args.inbound_port,
        admin_port: args.admin_port,
        skip_ports: args.skip_ports.clone(),
    });
    if args.print {
        return out
            .write_all(script.as_bytes())
            .map_err(io("cannot print the rules".to_owned()));
    }
    let nft = find_program("nft").ok_or_else(|| {
        LabError::Failed("capture-init needs `nft` (Debian: apt-get install nftables)".to_owned())
    })?;
    run(Command::new(nft).args(["-f", "-"]), Some(&script))
}
