//! `HOPWISE_BUILD_ID`, shared by the package's two binaries (`src/sidecar.rs`): a new id whenever
//! a source the sidecar is built from changes, so `hopwise` can tell a `hopwise-proxy` of its own
//! build from one an earlier build left beside it. And, for release builds of `hopwise-proxy`,
//! the linker script that lays its hot path out first (`hot-path.ld`, written by
//! `scripts/hot-path`): a proxy then maps that code, not pages scattered through all of it; and
//! packed relative relocations where the loader reads them.

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
        if relr_loader() {
            // 10,000 relative relocations as a bitmap of a few KiB instead of 240 KiB of
            // `.rela.dyn`, which the loader reads at every start and each proxy then maps.
            println!("cargo:rustc-link-arg-bin=hopwise-proxy=-Wl,-z,pack-relative-relocs");
        }
    }
}

/// Whether the binary will run on a loader that reads packed relative relocations (`DT_RELR`,
/// glibc 2.36): only when building for this machine, whose glibc `getconf` names.
fn relr_loader() -> bool {
    let native = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
    let gnu = std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    if !native || !gnu {
        return false;
    }
    let Ok(out) = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
    else {
        return false;
    };
    glibc_at_least(&String::from_utf8_lossy(&out.stdout), (2, 36))
}

/// `glibc 2.36` (getconf's form) at or above `want`.
fn glibc_at_least(version: &str, want: (u32, u32)) -> bool {
    let mut parts = version
        .trim()
        .trim_start_matches("glibc ")
        .split('.')
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}
