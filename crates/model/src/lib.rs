//! hopwise's model: the mesh file read into validated types, the policy those types describe,
//! and the arithmetic of timeouts, retries and back-off.
//!
//! Everything here is pure: no I/O, no clock, no threads. The analyser (`hopwise-analyze`) and
//! the proxy call the same functions, so what `hopwise check` predicts is what the proxy does.
//! Reading is two-staged: YAML → [`raw`] (as written) → [`Mesh`] (presets applied, validated),
//! and every problem is reported at once with its path and line.

pub mod app_probe;
pub mod attempt;
pub mod backoff;
pub mod browser_guard;
pub mod capture;
pub mod carries;
pub mod control_port;
pub mod diag;
pub mod duration;
pub mod fault;
pub mod gateway;
pub mod kubernetes;
pub mod labels;
pub mod mesh;
pub mod observe;
pub mod path;
pub mod policy;
pub mod ports;
pub mod preset;
pub mod rate;
pub mod raw;
pub mod read;
pub mod route;
pub mod run;
pub mod tcp;
pub mod timing;
pub mod topology;
pub mod upgrade;
pub mod yaml;

pub use backoff::{Backoff, Strategy};
pub use carries::Carries;
pub use diag::{Diagnostic, Diagnostics, Pos};
pub use duration::Dur;
pub use mesh::{Allow, Call, Entry, Mesh, Service};
pub use policy::{
    Balancer, Budget, Decision, GrpcCode, InboundLimits, Limits, Outcome, Outlier, Policy,
    Protocol, Retry, RetryOn,
};
pub use preset::Preset;
pub use raw::SampleKind;
pub use run::Run;
pub use tcp::{Tcp, TcpPolicy};
pub use topology::{Copy, External, ExternalTls};
pub use upgrade::Upgrade;

/// The JSON Schema of the mesh file, generated from the raw types.
pub fn schema() -> schemars::Schema {
    schemars::schema_for!(raw::RawMesh)
}
