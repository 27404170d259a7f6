//! hopwise's control plane. It is not on the per-request path; it decides what happens when
//! things change: a new copy, a dead copy, new configuration, a certificate about to expire.
//!
//! [`registry`] is the pure state machine of copies, leases and health (time is passed in, so
//! it is tested on any clock). [`ca`] signs proxies' CSRs with their SPIFFE identity, [`store`]
//! keeps the CA, the join tokens ([`token`]) and the mesh file across restarts (in `state.json`,
//! or in etcd shared by several replicas: [`store::etcd`], with the cargo feature `etcd`, whose
//! client needs `protoc` to build), [`plane`] holds all of it and offers every operation of the
//! API without a clock or a socket, [`api`] serves it over gRPC on TLS 1.3 ([`tls`]: its own
//! `/control` certificate; [`conn`]: what bounds its connections), and [`client`] and [`cli`] are
//! the command line's side (`hopwise-lab` measures it at scale: `hopwise control bench`);
//! [`dashboard`] serves a web page over the running plane (`hopwise control --dashboard`), with
//! the recent traces its OTLP receiver ([`otlp_receiver`]) was sent. See
//! docs/control.md and docs/dashboard.md.

pub mod api;
pub mod ca;
pub mod cli;
pub mod client;
pub mod conn;
pub mod dashboard;
pub mod otlp_receiver;
pub mod plane;
pub mod registry;
pub mod review;
pub mod store;
pub mod tls;
pub mod token;

/// The API's messages, client and server: `hopwise-api`'s, compiled once for the proxy and
/// the control plane.
pub use hopwise_api::pb;
