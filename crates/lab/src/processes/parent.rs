//! Children that go when their parent goes. A process the lab starts and wants tied to it
//! (`hopwise up`'s control plane, apps and proxies) is started with [`PARENT_ENV`] set to the
//! parent's pid ([`tie_to_parent`]); the binary reads that variable first thing and only then
//! asks the kernel for SIGTERM when the parent dies ([`die_with_parent`]), so even a SIGKILLed
//! parent leaves nothing behind. Every other start of the binary (`hopwise proxy` run by hand,
//! the bench's and the demos' children) never asks.

use std::process::Command;

/// The environment variable that tells a child which process is its parent (`up`).
pub const PARENT_ENV: &str = "HOPWISE_UP_PARENT";

/// Starts `cmd` tied to this process: it receives SIGTERM when this process dies.
pub fn tie_to_parent(cmd: &mut Command) -> &mut Command {
    cmd.env(PARENT_ENV, std::process::id().to_string())
}

/// The parent this process was started tied to ([`PARENT_ENV`]), if any.
pub fn tied_parent() -> Option<i32> {
    std::env::var(PARENT_ENV).ok()?.parse().ok()
}

/// Asks for SIGTERM when `parent` dies. Returns `false` when it is already gone (the caller
/// should exit at once).
pub fn die_with_parent(parent: i32) -> bool {
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
    // The parent may have died before the request was made: then nobody will signal us.
    nix::unistd::getppid().as_raw() == parent
}
