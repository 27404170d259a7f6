//! The mesh file as written: every field optional, presets not yet applied. Stage one of two
//! (raw → [`crate::mesh::Mesh`]). The JSON Schema is generated from these types; the readers
//! below fill them from the YAML tree, so both name the same fields (a test checks it).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use crate::backoff::Strategy;
use crate::duration::Dur;
use crate::policy::{Balancer, GrpcCode, Protocol, RetryOn};
use crate::preset::Preset;
use crate::read::{Fields, Reader};
use crate::yaml::{Node, Value};

/// The gRPC statuses a proxy may answer with when its own timeout fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TimeoutStatus {
    /// Envoy's (and Istio's) answer.
    Unavailable,
    /// Linkerd's and hopwise's answer.
    DeadlineExceeded,
}

impl TimeoutStatus {
    pub fn code(self) -> GrpcCode {
        match self {
            TimeoutStatus::Unavailable => GrpcCode::Unavailable,
            TimeoutStatus::DeadlineExceeded => GrpcCode::DeadlineExceeded,
        }
    }
}

/// Who may call a service.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RawAllow {
    /// `any` or `none`.
    Word(AllowWord),
    /// These services only.
    Services(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AllowWord {
    Any,
    None,
}

/// A value, or `none` to switch it off (e.g. `timeout: none`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OrNone<T> {
    None,
    Some(T),
}

impl<T: Serialize> Serialize for OrNone<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OrNone::None => s.serialize_str("none"),
            OrNone::Some(v) => v.serialize(s),
        }
    }
}

impl<T: JsonSchema> JsonSchema for OrNone<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        format!("{}OrNone", T::schema_name()).into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let inner = g.subschema_for::<T>();
        schemars::json_schema!({ "anyOf": [inner, { "const": "none" }] })
    }
}

impl<T: Copy> OrNone<T> {
    pub fn option(self) -> Option<T> {
        match self {
            OrNone::None => None,
            OrNone::Some(v) => Some(v),
        }
    }
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
    /// A service outside the mesh (no proxy of its own), reached at this address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<RawExternal>,
    /// Who may call this service: a list of service names, `any` (every identity of the
    /// mesh; the default) or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<RawAllow>,
    /// Narrower rules for paths, by prefix: only these services may call them.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub allow_paths: IndexMap<String, Vec<String>>,
    /// What the service's inbound proxy lets through to its app: caps on requests in flight
    /// (per proxy and per calling identity) and how long the app may take to answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inbound: Option<RawInbound>,
    #[serde(flatten)]
    pub policy: RawPolicy,
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

/// One call from a service to another, with its policy and, optionally, named routes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCall {
    #[serde(flatten)]
    pub request: RawRequest,
    #[serde(flatten)]
    pub policy: RawPolicy,
    /// Routes within the call, by name; each inherits the call's settings.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub routes: IndexMap<String, RawRoute>,
}

/// A route within a call, matched by path prefix; it inherits the call's settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Path prefix the route matches, e.g. `/penalty/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(flatten)]
    pub request: RawRequest,
    #[serde(flatten)]
    pub policy: RawPolicy,
}

/// What the caller sends, which decides whether repeating it is safe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRequest {
    /// Overrides the callee's protocol for this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// HTTP method. Default: `GET` over HTTP, `POST` over gRPC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Safe to repeat? Default: the method is idempotent by RFC 9110 (GET, HEAD, OPTIONS,
    /// TRACE, PUT, DELETE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// Retries the calling application's own code makes around this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_retries: Option<u32>,
}

/// Policy fields; each layer (defaults → service → call → route) overrides the one above.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// Start from this product's defaults before applying this layer's fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    /// Route timeout: all tries and back-off together; `none` for no timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<OrNone<Dur>>,
    /// Timeout of each try; `none`: a try is bounded by the route timeout alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<OrNone<Dur>>,
    /// Time allowed to establish a connection to the upstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<Dur>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<RawRetries>,
    /// Retry budget; `none` to switch it off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<OrNone<RawBudget>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    /// gRPC status a proxy answers when its own timeout fires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_status_on_timeout: Option<TimeoutStatus>,
    /// Send the remaining time to the next hop and trim timeouts to the caller's deadline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagate_deadline: Option<bool>,
    /// Outlier ejection; `none` to switch it off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outlier: Option<OrNone<RawOutlier>>,
    /// How a copy is chosen for each try.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balancer: Option<Balancer>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRetries {
    /// Retries after the first try (Envoy's `num_retries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Conditions that are retried, named as Envoy's `retry_on` names them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on: Option<Vec<RetryOn>>,
    /// Status codes `retriable-status-codes` retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_codes: Option<Vec<u16>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<RawBackoff>,
    /// Retry outcomes where the request may have been processed (a response, a reset after
    /// sending, a timeout) only when the request is safe to repeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only_if_safe: Option<bool>,
    /// Treat a request carrying an `Idempotency-Key` header as safe to repeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub honor_idempotency_key: Option<bool>,
    /// Only one hop of a chain retries a given failure (the hop that gave up marks its answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub single_hop: Option<bool>,
    /// Request bodies up to this many bytes are kept for replay; larger ones are not retried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_replay_bytes: Option<u32>,
}

/// Outlier ejection: a copy that keeps failing is taken out of the rotation for a while.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOutlier {
    /// Consecutive 502/503/504 or connection failures that eject a copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consecutive_gateway_failures: Option<u32>,
    /// Ejection lasts this long times the number of times the copy has been ejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_ejection_time: Option<Dur>,
    /// Never eject more than this share (0–100) of a service's copies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ejection_percent: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBackoff {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<Dur>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<Dur>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    /// Retries allowed as a share of requests, 0.0–1.0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Retries always allowed per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_per_second: Option<u32>,
    /// The window over which requests are counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
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
}

// ---- readers: YAML tree → raw types, every problem collected ----

pub fn read_mesh(r: &mut Reader, node: &Node) -> RawMesh {
    let Some(mut f) = r.fields(node, "") else {
        return RawMesh::default();
    };
    let mesh = RawMesh {
        mesh: f.get(r, "mesh", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let info = RawMeshInfo {
                name: f.get(r, "name", Reader::string),
                trust_domain: f.get(r, "trust_domain", Reader::string),
                certs: f.get(r, "certs", Reader::string),
            };
            f.finish(r);
            Some(info)
        }),
        defaults: f.get(r, "defaults", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let policy = read_policy(r, &mut f);
            f.finish(r);
            Some(policy)
        }),
        services: f
            .get(r, "services", |r, n, p| Some(r.named(n, p, read_service)))
            .unwrap_or_default(),
    };
    f.finish(r);
    mesh
}

fn read_service(r: &mut Reader, node: &Node, path: &str) -> Option<RawService> {
    let mut f = r.fields(node, path)?;
    let service = RawService {
        protocol: f.get(r, "protocol", |r, n, p| r.word(n, p, &Protocol::ALL)),
        entry: f.get(r, "entry", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let e = RawEntry {
                timeout: f.get(r, "timeout", or_none(positive_timeout)),
                retries: f.get(r, "retries", u32_field),
            };
            f.finish(r);
            Some(e)
        }),
        copies: f.get(r, "copies", |r, n, p| match &n.value {
            Value::Int(_) => {
                let c = r.count(n, p, u64::from(u32::MAX))?;
                if c == 0 || c > u64::from(MAX_COPIES) {
                    r.error(
                        p,
                        n.pos,
                        format!("{c} copies: write a number from 1 to {MAX_COPIES}, or a list"),
                    );
                    return None;
                }
                Some(RawCopies::Count(c as u32))
            }
            Value::Seq(_) => r.list(n, p, read_copy).map(RawCopies::List),
            other => {
                r.error(
                    p,
                    n.pos,
                    format!(
                        "expected a number of copies or a list of copies, found {}",
                        other.kind()
                    ),
                );
                None
            }
        }),
        sample: f.get(r, "sample", |r, n, p| r.word(n, p, &SampleKind::ALL)),
        external: f.get(r, "external", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let e = RawExternal {
                address: f.get(r, "address", Reader::string),
                tls: f.get(r, "tls", |r, n, p| {
                    let mut f = r.fields(n, p)?;
                    let t = RawExternalTls {
                        ca_file: f.get(r, "ca_file", Reader::string),
                        server_name: f.get(r, "server_name", Reader::string),
                    };
                    f.finish(r);
                    Some(t)
                }),
            };
            f.finish(r);
            Some(e)
        }),
        allow: f.get(r, "allow", |r, n, p| match &n.value {
            Value::Seq(_) => r.list(n, p, Reader::string).map(RawAllow::Services),
            _ => r
                .word(n, p, &[("any", AllowWord::Any), ("none", AllowWord::None)])
                .map(RawAllow::Word),
        }),
        allow_paths: f
            .get(r, "allow_paths", |r, n, p| {
                let Value::Map(entries) = &n.value else {
                    r.error(
                        p,
                        n.pos,
                        format!(
                            "expected a mapping of path prefixes, found {}",
                            n.value.kind()
                        ),
                    );
                    return None;
                };
                let mut out = IndexMap::new();
                for (k, v) in entries {
                    let child = format!("{p}.{}", k.name);
                    if let Err(message) = path_prefix(&k.name) {
                        r.error(&child, k.pos, message);
                        continue;
                    }
                    if let Some(list) = r.list(v, &child, Reader::string) {
                        out.insert(k.name.clone(), list);
                    }
                }
                Some(out)
            })
            .unwrap_or_default(),
        inbound: f.get(r, "inbound", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let i = RawInbound {
                max_requests: f.get(r, "max_requests", positive_u32),
                max_requests_per_caller: f.get(r, "max_requests_per_caller", positive_u32),
                timeout: f.get(r, "timeout", or_none(positive_timeout)),
            };
            f.finish(r);
            Some(i)
        }),
        policy: read_policy(r, &mut f),
        calls: f
            .get(r, "calls", |r, n, p| Some(r.named(n, p, read_call)))
            .unwrap_or_default(),
    };
    f.finish(r);
    Some(service)
}

fn read_copy(r: &mut Reader, node: &Node, path: &str) -> Option<RawCopy> {
    let mut f = r.fields(node, path)?;
    let copy = RawCopy {
        app: f.get(r, "app", Reader::string),
        inbound: f.get(r, "inbound", Reader::string),
        outbound: f.get(r, "outbound", Reader::string),
        admin: f.get(r, "admin", Reader::string),
        upstreams: f
            .get(r, "upstreams", |r, n, p| {
                Some(r.named(n, p, Reader::string))
            })
            .unwrap_or_default(),
    };
    f.finish(r);
    Some(copy)
}

fn read_call(r: &mut Reader, node: &Node, path: &str) -> Option<RawCall> {
    let mut f = r.fields(node, path)?;
    let call = RawCall {
        request: read_request(r, &mut f),
        policy: read_policy(r, &mut f),
        routes: f
            .get(r, "routes", |r, n, p| {
                Some(r.named(n, p, |r, n, p| {
                    let mut f = r.fields(n, p)?;
                    let route = RawRoute {
                        path: f.get(r, "path", |r, n, p| {
                            let path = r.string(n, p)?;
                            if let Err(message) = path_prefix(&path) {
                                r.error(p, n.pos, message);
                                return None;
                            }
                            Some(path)
                        }),
                        request: read_request(r, &mut f),
                        policy: read_policy(r, &mut f),
                    };
                    f.finish(r);
                    Some(route)
                }))
            })
            .unwrap_or_default(),
    };
    f.finish(r);
    Some(call)
}

fn read_request(r: &mut Reader, f: &mut Fields<'_>) -> RawRequest {
    RawRequest {
        protocol: f.get(r, "protocol", |r, n, p| r.word(n, p, &Protocol::ALL)),
        method: f.get(r, "method", |r, n, p| {
            let m = r.string(n, p)?;
            if m.is_empty() || !m.chars().all(|c| c.is_ascii_alphabetic()) {
                r.error(p, n.pos, format!("`{m}` is not an HTTP method"));
                return None;
            }
            Some(m.to_ascii_uppercase())
        }),
        idempotent: f.get(r, "idempotent", Reader::bool),
        app_retries: f.get(r, "app_retries", u32_field),
    }
}

fn read_policy(r: &mut Reader, f: &mut Fields<'_>) -> RawPolicy {
    RawPolicy {
        preset: f.get(r, "preset", |r, n, p| r.word(n, p, &Preset::ALL)),
        timeout: f.get(r, "timeout", or_none(positive_timeout)),
        per_try_timeout: f.get(r, "per_try_timeout", or_none(positive_timeout)),
        connect_timeout: f.get(r, "connect_timeout", positive_duration),
        retries: f.get(r, "retries", read_retries),
        budget: f.get(r, "budget", or_none(read_budget)),
        limits: f.get(r, "limits", read_limits),
        grpc_status_on_timeout: f.get(r, "grpc_status_on_timeout", |r, n, p| {
            r.word(
                n,
                p,
                &[
                    ("unavailable", TimeoutStatus::Unavailable),
                    ("deadline-exceeded", TimeoutStatus::DeadlineExceeded),
                ],
            )
        }),
        propagate_deadline: f.get(r, "propagate_deadline", Reader::bool),
        outlier: f.get(r, "outlier", or_none(read_outlier)),
        balancer: f.get(r, "balancer", |r, n, p| r.word(n, p, &Balancer::ALL)),
    }
}

fn read_retries(r: &mut Reader, node: &Node, path: &str) -> Option<RawRetries> {
    let mut f = r.fields(node, path)?;
    let retries = RawRetries {
        count: f.get(r, "count", u32_field),
        on: f.get(r, "on", |r, n, p| {
            r.list(n, p, |r, n, p| r.word(n, p, &RetryOn::ALL))
        }),
        status_codes: f.get(r, "status_codes", |r, n, p| {
            r.list(n, p, |r, n, p| {
                let code = r.count(n, p, 999)?;
                if !(100..=599).contains(&code) {
                    r.error(p, n.pos, format!("{code} is not an HTTP status (100–599)"));
                    return None;
                }
                Some(code as u16)
            })
        }),
        backoff: f.get(r, "backoff", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let b = RawBackoff {
                strategy: f.get(r, "strategy", |r, n, p| r.word(n, p, &Strategy::ALL)),
                base: f.get(r, "base", positive_duration),
                max: f.get(r, "max", positive_duration),
            };
            f.finish(r);
            Some(b)
        }),
        only_if_safe: f.get(r, "only_if_safe", Reader::bool),
        honor_idempotency_key: f.get(r, "honor_idempotency_key", Reader::bool),
        single_hop: f.get(r, "single_hop", Reader::bool),
        max_replay_bytes: f.get(r, "max_replay_bytes", u32_field),
    };
    f.finish(r);
    Some(retries)
}

fn read_outlier(r: &mut Reader, node: &Node, path: &str) -> Option<RawOutlier> {
    let mut f = r.fields(node, path)?;
    let o = RawOutlier {
        consecutive_gateway_failures: f.get(r, "consecutive_gateway_failures", positive_u32),
        base_ejection_time: f.get(r, "base_ejection_time", positive_duration),
        max_ejection_percent: f.get(r, "max_ejection_percent", |r, n, p| {
            r.count(n, p, 100).map(|v| v as u32)
        }),
    };
    f.finish(r);
    Some(o)
}

fn read_budget(r: &mut Reader, node: &Node, path: &str) -> Option<RawBudget> {
    let mut f = r.fields(node, path)?;
    let budget = RawBudget {
        ratio: f.get(r, "ratio", |r, n, p| {
            let v = r.float(n, p)?;
            if !(0.0..=1.0).contains(&v) {
                r.error(
                    p,
                    n.pos,
                    format!("{v} is not a share between 0.0 and 1.0 (20 % is 0.2)"),
                );
                return None;
            }
            Some(v)
        }),
        min_per_second: f.get(r, "min_per_second", u32_field),
        window: f.get(r, "window", positive_duration),
    };
    f.finish(r);
    Some(budget)
}

fn read_limits(r: &mut Reader, node: &Node, path: &str) -> Option<RawLimits> {
    let mut f = r.fields(node, path)?;
    let limits = RawLimits {
        max_connections: f.get(r, "max_connections", positive_u32),
        max_pending: f.get(r, "max_pending", u32_field),
        max_requests: f.get(r, "max_requests", positive_u32),
        max_retries: f.get(r, "max_retries", u32_field),
    };
    f.finish(r);
    Some(limits)
}

/// A path rule's prefix must start with `/` and be in the form requests are matched in
/// ([`crate::path`]): another spelling would never match anything.
fn path_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!(
            "`{prefix}` is not a path prefix: it must start with `/`"
        ));
    }
    match crate::path::normalize(prefix) {
        Ok(p) if p == prefix => Ok(()),
        Ok(p) => Err(format!(
            "`{prefix}` is not a normalized path (requests are matched normalized): write `{p}`"
        )),
        Err(e) => Err(format!("`{prefix}` cannot be a path prefix: {e}")),
    }
}

fn u32_field(r: &mut Reader, n: &Node, p: &str) -> Option<u32> {
    r.count(n, p, u32::MAX.into()).map(|v| v as u32)
}

fn positive_u32(r: &mut Reader, n: &Node, p: &str) -> Option<u32> {
    let v = u32_field(r, n, p)?;
    if v == 0 {
        r.error(
            p,
            n.pos,
            "must be at least 1: a cap of 0 refuses every request",
        );
        return None;
    }
    Some(v)
}

fn duration(r: &mut Reader, n: &Node, p: &str) -> Option<Dur> {
    match &n.value {
        Value::Str(s) => match s.parse::<Dur>() {
            Ok(d) => Some(d),
            Err(e) => {
                r.error(p, n.pos, e.to_string());
                None
            }
        },
        Value::Int(i) => {
            r.error(
                p,
                n.pos,
                format!("`{i}` has no unit; write it as e.g. `{i}ms` or `{i}s`"),
            );
            None
        }
        _ => {
            r.error(
                p,
                n.pos,
                format!(
                    "expected a duration such as `300ms`, found {}",
                    n.value.kind()
                ),
            );
            None
        }
    }
}

/// A duration where zero makes no sense (a back-off or window of 0).
fn positive_duration(r: &mut Reader, n: &Node, p: &str) -> Option<Dur> {
    let d = duration(r, n, p)?;
    if d.0.is_zero() {
        r.error(p, n.pos, "must be longer than zero");
        return None;
    }
    Some(d)
}

/// A timeout: zero would fail everything (Envoy reads 0 as "none"; we ask for the word).
fn positive_timeout(r: &mut Reader, n: &Node, p: &str) -> Option<Dur> {
    let d = duration(r, n, p)?;
    if d.0.is_zero() {
        r.error(
            p,
            n.pos,
            "must be longer than zero; to switch the timeout off write `none`",
        );
        return None;
    }
    Some(d)
}

fn or_none<T>(
    read: impl FnOnce(&mut Reader, &Node, &str) -> Option<T>,
) -> impl FnOnce(&mut Reader, &Node, &str) -> Option<OrNone<T>> {
    move |r, n, p| match &n.value {
        Value::Str(s) if s == "none" => Some(OrNone::None),
        _ => read(r, n, p).map(OrNone::Some),
    }
}
