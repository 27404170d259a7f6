//! The mechanics of opaque TCP through the mesh (docs/tcp.md), under both lifecycles in
//! [`crate::opaque`]: an app's TCP connection is carried whole inside one HTTP/2 CONNECT stream
//! (RFC 9113 §8.5, as Istio's HBONE) over the proxies' mutual TLS, many streams on one
//! connection per copy, the identity checked once by the handshake. Nothing here reads the
//! configuration in force or a clock other than tokio's.
//!
//! [`detect`]: whether an undeclared connection is HTTP (the contract with capture is in its
//! `//!`). [`splice`]: one connection and one stream, both ways, half-close and resets carried,
//! idle timeout. [`client`]: the caller's tunnel connections to one upstream's copies.

pub mod client;
pub mod detect;
pub mod splice;

pub use client::{Opened, Refusal, Tunnels};
pub use splice::{End, Stream, splice};
