//! hopwise's lab: the measurements, load generators and sample services that run *around* the
//! mesh rather than in it. Nothing here is on a request's path in production, and nothing in
//! `proxy` or `model` may depend on it (but proxy's tests, for the stand-in OTLP collector:
//! a dev-dependency).
//!
//! Organised by job. Three products — `hopwise bench` ([`bench`]: chains of real
//! `hopwise proxy` processes, and nginx, HAProxy or Envoy for comparison, measured for latency,
//! CPU and memory per hop), `hopwise demo` ([`demo`]: the seeds' scenarios with real proxies,
//! counted) `hopwise up` ([`up`]: a whole mesh file on this machine, with `hopwise fault`) and
//! `hopwise run` ([`capture`]: one copy's command captured in a network namespace) —
//! each built on two shared rooms: [`processes`] (the children and what `/proc` says of them)
//! and [`samples`] (the sample services and their HTTP pieces). The products never use each
//! other. [`error`] is the one error type of them all.

pub mod bench;
pub mod capture;
pub mod demo;
pub mod error;
pub mod processes;
pub mod samples;
pub mod up;

pub use error::LabError;

/// A progress line on stderr (the results go to stdout).
pub(crate) fn progress(line: &str) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}
