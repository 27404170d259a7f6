//! hopwise's lab: the measurements, load generators and sample services that run *around* the
//! mesh rather than in it. Today that is `hopwise bench hops` ([`bench`]): chains of real
//! `hopwise proxy` processes (and nginx, HAProxy or Envoy for comparison) between a minimal
//! compiled client and backend, measured for latency, CPU and memory per hop. Nothing here is
//! on a request's path in production, and nothing in `proxy` or `model` may depend on it.
//! `hopwise demo` ([`demo`]) runs the seeds' scenarios — the retry chain, the timeout trap,
//! the loan and fee services — with real proxies, and counts what happened. `hopwise up`
//! ([`up`]) runs a whole mesh file on this machine: sample apps with fault knobs, a proxy per
//! copy, the control plane, load.

pub mod bench;
pub mod demo;
pub mod up;
