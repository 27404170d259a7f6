//! The mesh file as written: every field optional, presets not yet applied. Stage one of two
//! (raw → [`crate::mesh::Mesh`]). The JSON Schema is generated from these types; the readers
//! fill them from the YAML tree, so both name the same fields (a test checks it).
//!
//! `services.rs`: the mesh, its services and their copies, entries, callers and inbound caps;
//! `tcp.rs`: `services.<name>.tcp` (opaque TCP ports) and its reader;
//! `carries.rs`: what a service's app carries on from a request to its calls;
//! `run.rs`: `services.<name>.run`, the service's own command that `hopwise up` starts;
//! `calls.rs`: calls, routes and the policy fields every layer shares (defaults, presets);
//! `routes.rs`, `read_routes.rs`: a service's own routes (`services.<name>.routes`, HTTPRoute and
//! GRPCRoute in the file's words) and their reader; `rule_policy.rs`: a route rule's own
//! `timeouts` and `retry` and their reader;
//! `gateway.rs`: `services.<name>.gateway`, the front door's listeners, certificates and limit;
//! `capture.rs`: `mesh.capture` and services' addresses; `ports.rs`: the ports a service is
//! called on and the app's port each reaches; `kubernetes.rs`: namespaces and
//! ServiceAccounts; `observe.rs`: tracing and the access log;
//! `readers.rs`, `read_policy.rs`, `values.rs`: the readers, every problem collected.

use schemars::JsonSchema;
use serde::Serialize;

use crate::policy::GrpcCode;

mod calls;
mod capture;
mod carries;
mod fault;
mod gateway;
mod kubernetes;
mod observe;
mod ports;
mod rate_limit;
mod read_policy;
mod read_routes;
mod readers;
mod routes;
mod rule_policy;
mod run;
mod services;
mod tcp;
mod upgrade;
mod values;

pub use calls::{
    RawBackoff, RawBudget, RawCall, RawLimits, RawOutlier, RawPolicy, RawRequest, RawRetries,
    RawRoute,
};
pub use capture::RawCapture;
pub use carries::Carry;
pub use fault::{RawAbort, RawDelay, RawFault, RawFaultHeader};
pub use gateway::{
    RawGateway, RawGatewayCertificate, RawGatewayHttp, RawGatewayHttps, RawGatewayRateLimit,
};
pub use kubernetes::{RawKubernetes, RawMeshKubernetes};
pub use observe::{LogFormat, OtlpProtocol, RawAccessLog, RawTracing, Sampling};
pub use ports::RawServicePort;
pub use rate_limit::{RawLimit, RawRateLimit};
pub use readers::read_mesh;
pub use routes::{
    FilterType, PathMatchType, PathModifierType, RawBackend, RawFilter, RawGrpcMethod, RawHeader,
    RawHeaderModifier, RawMethodMatch, RawMirror, RawPathMatch, RawPathModifier, RawRedirect,
    RawRewrite, RawRouteMatch, RawRouteRule, RawServiceRoute, RawTarget, RawValueMatch,
    ValueMatchType,
};
pub use rule_policy::{RawRuleRetry, RawTimeouts};
pub use run::{RawRun, RawRunCommand};
pub use services::{
    AllowWord, MAX_COPIES, RawAllow, RawCopies, RawCopy, RawEntry, RawExternal, RawExternalTls,
    RawInbound, RawMesh, RawMeshInfo, RawService, SampleKind,
};
pub use tcp::RawTcp;
pub use upgrade::RawUpgrade;

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
