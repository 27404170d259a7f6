//! Release builds lay the proxy's code out together, in the order a running proxy uses it
//! (`link/proxy.order`, written by `scripts/perf-instructions --order`). A proxy then maps about
//! a third of the binary's code instead of most of it: the kernel maps file pages 64 KiB around
//! each fault, so code scattered among the control plane's, the lab's and the analyser's costs
//! resident memory in every sidecar (docs/performance.md, "Memory"). Names the order file no
//! longer matches (a dependency's version or features changed: its symbols' hashes did) are
//! skipped by the linker: a stale file costs memory, never correctness; rerun the script.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=link/proxy.order");
    println!("cargo:rerun-if-env-changed=HOPWISE_NO_SYMBOL_ORDER");
    let is = |var: &str, value: &str| env::var(var).is_ok_and(|v| v == value);
    // `--symbol-ordering-file` is lld's, Rust's default linker only on x86_64 Linux with glibc
    // (since 1.90); other targets link with GNU ld, which refuses it. HOPWISE_NO_SYMBOL_ORDER=1
    // builds x86_64 with another linker.
    let lld_target = is("CARGO_CFG_TARGET_ARCH", "x86_64")
        && is("CARGO_CFG_TARGET_OS", "linux")
        && is("CARGO_CFG_TARGET_ENV", "gnu");
    if !(is("PROFILE", "release") && lld_target) || env::var_os("HOPWISE_NO_SYMBOL_ORDER").is_some()
    {
        return;
    }
    let dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let order = dir.join("link").join("proxy.order");
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}
