//! `HOPWISE_BUILD_ID`, shared by the package's two binaries (`src/sidecar.rs`): a new id whenever
//! a source the sidecar is built from changes, so `hopwise` can tell a `hopwise-proxy` of its own
//! build from one an earlier build left beside it. And, for release builds of `hopwise-proxy`,
//! the linker script that lays its hot path out first (`hot-path.ld`, written by
//! `scripts/hot-path`): a proxy then maps that code, not pages scattered through all of it.

use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    for dir in [
        "src",
        "../proxy/src",
        "../model/src",
        "../api/src",
        "../api/proto",
    ] {
        println!("cargo:rerun-if-changed={dir}");
    }
    for file in [
        "Cargo.toml",
        "../proxy/Cargo.toml",
        "../model/Cargo.toml",
        "../api/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed=hot-path.ld");
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    println!("cargo:rerun-if-changed=../../Cargo.toml");
    hot_path();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    println!(
        "cargo:rustc-env=HOPWISE_BUILD_ID={nanos:x}-{}",
        std::process::id()
    );
}

/// Release builds on Linux only: the script is an `INSERT BEFORE .text` addition to the default
/// layout (lld and GNU ld both read it); debug builds keep the plain layout and link faster.
fn hot_path() {
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if release && linux {
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
        println!("cargo:rustc-link-arg-bin=hopwise-proxy=-Wl,-T,{dir}/hot-path.ld");
    }
}
