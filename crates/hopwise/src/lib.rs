//! What the two binaries of this package share: `hopwise` (every subcommand) and
//! `hopwise-proxy` (the sidecar alone, which `hopwise proxy` runs; see [`sidecar`]). Like the
//! binaries, and unlike the library crates, this code reads files, prints and uses `anyhow`.

pub mod mesh_file;
pub mod sidecar;
