//! What the proxy and the control plane share, so that neither depends on the other and
//! nothing is written twice: the control protocol ([`pb`], compiled once from
//! `proto/control.proto`), incremental snapshots over it ([`delta`]), SPIFFE identities
//! ([`spiffe`]: the one strict parser; [`identity`]: the one reading of a peer certificate),
//! the one server-certificate verifier ([`verifier`]), the control port as its clients see it
//! ([`control_port`]: its address, its identity, its verifier's expectation and the one
//! connector), the header and metric names several crates use
//! ([`names`]), the one reading and writing of trace headers, W3C and B3 ([`trace_context`]),
//! and the one wait for a shutdown signal ([`shutdown`]).
//!
//! Graph: `hopwise-model` ← `hopwise-api` ← {`hopwise-proxy`, `hopwise-control`}. `model` knows
//! nothing of the wire; this crate knows nothing of a mesh file beyond the control plane's
//! identity name.

pub mod control_port;
pub mod delta;
pub mod identity;
pub mod names;
pub mod shutdown;
pub mod spiffe;
pub mod trace_context;
pub mod verifier;

pub mod pb {
    //! The control protocol's messages, client and server, generated from
    //! `proto/control.proto` by `build.rs` (protox + tonic-prost-build).
    #![allow(
        missing_debug_implementations,
        clippy::all,
        clippy::pedantic,
        clippy::unwrap_used,
        unreachable_pub
    )]
    tonic::include_proto!("hopwise.control.v1");
}
