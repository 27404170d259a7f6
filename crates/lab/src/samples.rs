//! The sample services, whoever runs them: [`inventory`] and [`fee`] (the seeds' services that
//! fail on purpose, with counters; the fee's [`fee::FeeState`] is also `up`'s fee sample),
//! [`apps`] (`hopwise sample`: one copy of a sample app, as `up` runs it) with its fault
//! [`knobs`] and how it reaches its callees ([`callee`]), and [`wire`] (the small HTTP/1.1, h2c
//! and TLS servers and clients they and the lab's clients share). [`collector`] stands in for an
//! OTLP collector. The sample gRPC service is [`pb`].

pub mod apps;
pub mod callee;
pub mod collector;
pub mod fee;
pub mod inventory;
pub mod knobs;
pub mod wire;

pub mod pb {
    //! The sample apps' gRPC service, generated from `proto/sample.proto` by `build.rs`.
    #![allow(missing_debug_implementations, clippy::all, clippy::unwrap_used)]
    tonic::include_proto!("hopwise.sample.v1");
}
