//! hopwise's sidecar proxy.
//!
//! Outbound (app → mesh): a local port per upstream and one HTTP-proxy port that routes by
//! `Host`; inbound (mesh → app): one mutual-TLS port that verifies the caller's SPIFFE identity
//! and hands it to the app. HTTP/1.1, HTTP/2 and gRPC; pooled, kept-alive connections between
//! proxies; timeouts from the mesh file; Prometheus metrics by route name; an admin endpoint.
//!
//! Map: [`config`] (what to run, from the mesh file) → [`server`] and [`worker`] (listeners,
//! workers, drain) → [`outbound`] and [`inbound`] (the request lifecycles) → [`attempts`] (the
//! tries) → [`cluster`] and [`upstream`] (pools and connectors) and [`tls`]; [`error`] is the
//! one place failures become responses. Opaque TCP: [`tcp`] (detection, splice, tunnel
//! client) under [`opaque`] (an app's connection into a tunnel, a tunnel into the app). Imports go one way, down this map (ARCHITECTURE.md).
//! Policy arithmetic is `hopwise-model`'s.

pub mod access_log;
pub mod admin;
pub mod app_probe;
pub mod attempts;
pub mod balance;
pub mod body;
pub mod budget;
pub mod capture;
pub mod certs;
pub mod cluster;
pub mod config;
pub mod conn;
pub mod control;
pub mod deadline;
pub mod error;
pub mod gateway;
pub mod headers;
pub mod http_conn;
pub mod inbound;
pub mod limits;
pub mod link;
pub mod listeners;
pub mod live;
pub mod metrics;
pub mod mirror;
pub mod opaque;
pub mod otlp;
pub mod outbound;
pub mod recorded;
pub mod replay;
pub mod route;
pub mod server;
pub mod state;
pub mod tap;
pub mod tcp;
pub mod tls;
pub mod trace;
pub mod upgrade;
pub mod upstream;
pub mod worker;

pub use config::ProxyConfig;
pub use server::{Bound, Running, ServerError, start};
