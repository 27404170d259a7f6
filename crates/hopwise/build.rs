//! Release builds lay the proxy's code out together, in the order a running proxy uses it
//! (`link/proxy.order`, written by `scripts/symbol-order`). A proxy then maps about a fifth of
//! the binary's code instead of most of it: the kernel maps file pages 64 KiB around each fault,
//! so code scattered among the control plane's, the lab's and the analyser's costs resident
//! memory in every sidecar (docs/performance.md, "Memory"). Names the order file no longer
//! matches are skipped by the linker: a stale file costs memory, never correctness.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=link/proxy.order");
    println!("cargo:rerun-if-env-changed=HOPWISE_NO_SYMBOL_ORDER");
    let release = env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    // `--symbol-ordering-file` is lld's (Rust's default linker on x86_64 Linux since 1.90);
    // HOPWISE_NO_SYMBOL_ORDER=1 builds with another linker.
    if !(release && linux) || env::var_os("HOPWISE_NO_SYMBOL_ORDER").is_some() {
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
