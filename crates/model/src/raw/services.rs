//! The mesh as written: its services, their copies (or how many), sample apps, services outside
//! the mesh, entries from outside, who may call, and the inbound caps.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use super::{OrNone, RawAccessLog, RawCall, RawCapture, RawPolicy, RawTcp, RawTracing};
use crate::duration::Dur;
use crate::policy::Protocol;

/// Who may call a service.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RawAllow {
    /// `any` or `none`.
    Word(AllowWord),
    /// These services only; on Kubernetes an entry may name a ServiceAccount as
    /// `ns/<namespace>/sa/<name>`, meaning the service that runs as it.
    Services(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AllowWord {
    Any,
    None,
}

/// A whole mesh: its services, the calls between them, and the policy on each call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMesh {
    /// The mesh's name and SPIFFE trust domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mesh: Option<RawMeshInfo>,
    /// Policy for every call in the mesh, under the services' and calls' own settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defaults: Option<RawPolicy>,
    /// The services, by name.
    pub services: IndexMap<String, RawService>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMeshInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// SPIFFE trust domain: identities read `spiffe://<trust_domain>/service/<name>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust_domain: Option<String>,
    /// Directory of the mesh's certificates (`hopwise certs` writes it), relative to the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certs: Option<String>,
    /// How apps run captured (`hopwise run`) reach the mesh: addresses, egress, exceptions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<RawCapture>,
    /// Spans over OTLP and how traces are sampled (docs/observability.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<RawTracing>,
    /// The mesh runs on Kubernetes: services' identities are their ServiceAccounts'.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<super::RawMeshKubernetes>,
}

/// One service. Its policy fields apply to every call it makes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawService {
    /// What the service speaks: `http` (default) or `grpc`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Requests that arrive from outside the mesh: how long that client waits, and how often it
    /// retries. Marks the service as an entry point of the call graph.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<RawEntry>,
    /// The running copies of the service: a list, each with its proxy's addresses, or a
    /// number of copies whose addresses whoever runs them assigns (`hopwise up`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copies: Option<RawCopies>,
    /// A built-in sample app that `hopwise up` runs for each copy: `chain` (calls every
    /// service in `calls`, answers JSON), `leaf` (answers JSON), `fee` (the seed's fee
    /// service: TLS, outside the mesh).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<SampleKind>,
    /// The service's own app, which `hopwise up` starts for each copy: the program and its
    /// arguments (`[node, loan-thin.mjs]`, no shell, run in the mesh file's directory), or
    /// `{ command: [...], env: {...}, health_path: /healthz }`. It learns its port from `PORT`
    /// (and `HOPWISE_APP`), its upstreams from `HOPWISE_UPSTREAM_<NAME>` (docs/up.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<super::RawRun>,
    /// A service outside the mesh (no proxy of its own), reached at this address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<RawExternal>,
    /// The IP address captured apps reach this service at (by its name, which resolves to it
    /// in their namespace); default: the next of mesh.capture.range's first /24, in file order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The ports captured apps call the service's address on, each with the app's port it
    /// reaches (a Kubernetes Service's `port` and `targetPort`). Default: none listed, and a
    /// call on any port reaches the app's port; listed, a call on another port is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<super::RawServicePort>,
    /// On Kubernetes: its pods' namespace and ServiceAccount, whose identity it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<super::RawKubernetes>,
    /// Who may call this service: a list of service names, `any` (every identity of the
    /// mesh; the default) or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<RawAllow>,
    /// Narrower rules for paths, by prefix: only these services (or ServiceAccounts,
    /// `ns/<namespace>/sa/<name>`) may call them.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub allow_paths: IndexMap<String, Vec<String>>,
    /// What the service's inbound proxy lets through to its app: caps on requests in flight
    /// (per proxy and per calling identity) and how long the app may take to answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inbound: Option<RawInbound>,
    /// Faults its inbound proxies inject into a share of its requests: a delay, an abort
    /// (docs/config.md, `fault`). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<super::RawFault>,
    /// The app speaks opaque TCP (a database, a cache) on these ports: carried whole between
    /// proxies over mutual TLS (docs/tcp.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<RawTcp>,
    /// The app accepts HTTP/1.1 protocol switches (WebSocket) or `CONNECT`: the upgraded
    /// connection carried both ways between proxies (docs/tcp.md). Default: both refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<super::RawUpgrade>,
    /// What the service's app carries from an inbound request to the calls it makes while
    /// serving it: `trace-context`, `hopwise-headers`, `grpc-deadline`. Default: nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carries: Option<Vec<super::Carry>>,
    /// This service is a gateway: a front door for clients outside the mesh, routed by its
    /// `routes` to the services it `calls` (docs/routes.md, "Gateway").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<super::RawGateway>,
    /// One line per request through this service's proxies, inbound and outbound (opt-in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<RawAccessLog>,
    #[serde(flatten)]
    pub policy: RawPolicy,
    /// The service's own routes, by name: HTTPRoutes (or GRPCRoutes, for a gRPC service) in
    /// the Gateway API's words — hostnames, rules of matches, filters, weighted backends and
    /// HTTPRoute's `timeouts` and `retry` (docs/routes.md); the callers' proxies route by them.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub routes: IndexMap<String, super::RawServiceRoute>,
    /// The calls this service makes, by the name of the service called.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub calls: IndexMap<String, RawCall>,
}

/// The copies of a service: how many, or each one with its addresses.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RawCopies {
    /// This many copies (1–100); their addresses are assigned by whoever runs them.
    Count(#[schemars(range(min = 1, max = 100))] u32),
    /// Each copy with its addresses.
    List(Vec<RawCopy>),
}

/// The most copies `copies: N` may ask for.
pub const MAX_COPIES: u32 = 100;

/// The built-in sample apps `hopwise up` can run for a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SampleKind {
    /// Per request, calls each service in `calls` (HTTP/1.1 or gRPC, as the callee speaks)
    /// through its proxy, and answers a small JSON (HTTP) or message (gRPC).
    Chain,
    /// Answers a small JSON (HTTP) or message (gRPC); calls nobody.
    Leaf,
    /// The seed's fee service: serves TLS itself (an `external` service), processes a payment
    /// before it answers, honours `Idempotency-Key`.
    Fee,
}

impl SampleKind {
    pub const ALL: [(&'static str, SampleKind); 3] = [
        ("chain", SampleKind::Chain),
        ("leaf", SampleKind::Leaf),
        ("fee", SampleKind::Fee),
    ];

    pub fn name(self) -> &'static str {
        SampleKind::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }
}

/// One copy of a service: where its application listens and where its proxy listens.
/// Addresses are `ip:port`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCopy {
    /// Where the application listens (plain HTTP/1.1, or h2c for gRPC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// The proxy's mutual-TLS port: other proxies reach this copy here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inbound: Option<String>,
    /// The proxy's HTTP-proxy port: the app calls any upstream here, chosen by `Host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbound: Option<String>,
    /// The proxy's admin port (`/metrics`, `/ready`, `/live`, `/config`), on localhost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
    /// A local port per upstream service: the app calls `http://<address>/…` to reach it.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub upstreams: IndexMap<String, String>,
    /// Labels this copy carries (`version: v2`), which a route's backend `subset` selects by;
    /// keys and values as Kubernetes writes a pod's labels.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub labels: IndexMap<String, String>,
}

/// A service outside the mesh, reached directly (the caller's proxy originates TLS if asked).
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawExternal {
    /// `host:port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawExternalTls>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawExternalTls {
    /// PEM file of the CA that signed the service's certificate, relative to the mesh file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The name to verify the certificate for; default: the address's host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEntry {
    /// How long the outside client waits for the whole request; `none` if it waits forever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<OrNone<Dur>>,
    /// How many times the outside client retries a failed request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
}

/// `services.<name>.inbound`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawInbound {
    /// Requests to the app in flight at once, per proxy (default 1024).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    /// Requests to the app in flight at once from one calling identity (default 256).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests_per_caller: Option<u32>,
    /// How long the app may take to start its answer (default 30s); `none`: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<OrNone<Dur>>,
    /// Requests a second let through to the app (default: no limit); over it, 429.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<super::RawRateLimit>,
}
