//! The two lifecycles of an opaque TCP connection (docs/tcp.md), on [`crate::tcp`]'s
//! mechanics. [`outbound`]: an app's connection to a TCP upstream (its local port, or a
//! captured connection detected opaque) → the connection cap → a tunnel on a copy → splice.
//! [`inbound`]: a tunnel connection from another proxy (mutual TLS, ALPN
//! [`crate::tls::TUNNEL_ALPN`]) → per stream: CONNECT to an opaque port of this service, the
//! caller in `allow`, the inbound caps → the app → splice. Each refusal is counted by reason;
//! every connection counted open, total, by bytes each way and by duration. [`captured`]: the
//! entry point for a captured connection (declared opaque, or detected).

pub mod captured;
pub mod inbound;
pub mod outbound;
