//! hopwise's control plane. It is not on the per-request path; it decides what happens when
//! things change: a new copy, a dead copy, new configuration, a certificate about to expire.
//!
//! [`registry`] is the pure state machine of copies, leases and health (time is passed in, so
//! it is tested on any clock). The CA, the store and the streaming API build on it.

pub mod registry;
