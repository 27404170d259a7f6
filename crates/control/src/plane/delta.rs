//! Incremental snapshots (proto `Snapshot.base_version`): `diff` is what a stream sends after
//! its first, whole, snapshot — only what changed since the last one it sent — and `apply` is
//! what the receiver does with it (the benchmark's simulated proxies use it). Both are
//! `hopwise_model::snapshot_delta`'s, instantiated on this crate's generated types; `hopwise
//! proxy` instantiates the same on its own. Pure: no I/O, no clock.

use crate::pb;

hopwise_model::snapshot_delta!(pb);

#[cfg(test)]
mod tests;
