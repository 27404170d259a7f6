//! `HOPWISE_BUILD_ID`, shared by the package's two binaries (`src/sidecar.rs`): a new id whenever
//! a source the sidecar is built from changes, so `hopwise` can tell a `hopwise-proxy` of its own
//! build from one an earlier build left beside it.

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
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    println!("cargo:rerun-if-changed=../../Cargo.toml");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    println!(
        "cargo:rustc-env=HOPWISE_BUILD_ID={nanos:x}-{}",
        std::process::id()
    );
}
