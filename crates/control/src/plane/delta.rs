//! Incremental snapshots (proto `Snapshot.base_version`): `diff` is what a stream sends after
//! its first, whole, snapshot — only what changed since the last one it sent — and `apply` is
//! what the receiver does with it (the benchmark's simulated proxies use it). Both are
//! `hopwise-api`'s, the same functions `hopwise proxy` applies deltas with.

pub use hopwise_api::delta::{DeltaError, apply, diff};
