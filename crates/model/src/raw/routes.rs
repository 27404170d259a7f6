//! `services.<name>.routes` as written: a service's own routes, in the Gateway API's words
//! (HTTPRoute for an HTTP service, GRPCRoute for a gRPC one; docs/routes.md), each field the
//! spec's name in the file's snake case (`queryParams` → `query_params`, `statusCode` →
//! `status_code`), `backendRefs` written `backends` with a `service` and a label `subset`.
//!
//! Types only, every field optional; their reader is `read_routes.rs`, and what they mean
//! (checked values, the protocol's kind of route) is `crate::route::resolve`'s. Not the call's
//! routes (`calls.<service>.routes`, a path prefix with policy: `calls.rs`).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

/// One route of a service: the requests to it that its rules take, and where they go.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawServiceRoute {
    /// The `Host` names the route answers (`*.` for any name below); default: every name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostnames: Option<Vec<String>>,
    /// The rules, competing by the Gateway API's precedence; ties to the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<RawRouteRule>>,
}

/// One rule: any of its matches takes a request (none: every request).
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRouteRule {
    /// Unique within the route: lower-case letters, digits, `-`, `.`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<RawRouteMatch>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filters: Option<Vec<RawFilter>>,
    /// Where the requests go, by weight (default 1 each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backends: Option<Vec<RawBackend>>,
    /// HTTPRoute's `timeouts`: over the caller's call policy, for the requests this rule takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<super::RawTimeouts>,
    /// HTTPRoute's `retry`: over the caller's call policy, for the requests this rule takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<super::RawRuleRetry>,
}

/// One match: every condition given must hold. `path`, `query_params` and an HTTP `method`
/// (`GET`) belong to an HTTP service's routes; a gRPC `method` (`{ service, method }`) to a
/// gRPC service's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRouteMatch {
    /// Default: `{ type: PathPrefix, value: / }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<RawPathMatch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<Vec<RawValueMatch>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_params: Option<Vec<RawValueMatch>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<RawMethodMatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPathMatch {
    /// Default `PathPrefix`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<PathMatchType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum PathMatchType {
    Exact,
    PathPrefix,
    RegularExpression,
}

/// A header or query parameter and the value it must have.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawValueMatch {
    /// Default `Exact`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<ValueMatchType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum ValueMatchType {
    Exact,
    RegularExpression,
}

/// An HTTP method (`GET`), or a gRPC service and method.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RawMethodMatch {
    Http(String),
    Grpc(RawGrpcMethod),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawGrpcMethod {
    /// Default `Exact`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<ValueMatchType>,
    /// `pkg.Service`; default: any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// `Method`; default: any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// One filter: its `type` and the field of that name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawFilter {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<FilterType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_header_modifier: Option<RawHeaderModifier>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_header_modifier: Option<RawHeaderModifier>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_redirect: Option<RawRedirect>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_rewrite: Option<RawRewrite>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_mirror: Option<RawMirror>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum FilterType {
    RequestHeaderModifier,
    ResponseHeaderModifier,
    RequestRedirect,
    #[serde(rename = "URLRewrite")]
    UrlRewrite,
    RequestMirror,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderModifier {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<Vec<RawHeader>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add: Option<Vec<RawHeader>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHeader {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Each field left out keeps the request's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    /// `http` or `https`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<RawPathModifier>,
    /// 301, 302 (default), 303, 307 or 308.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRewrite {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<RawPathModifier>,
}

/// `{ type: ReplaceFullPath, replace_full_path: /x }` or `{ type: ReplacePrefixMatch,
/// replace_prefix_match: /x }`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPathModifier {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<PathModifierType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace_full_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace_prefix_match: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum PathModifierType {
    ReplaceFullPath,
    ReplacePrefixMatch,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMirror {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<RawTarget>,
    /// 0 to 100; default 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<u8>,
}

/// A service of the mesh, or the copies of it carrying every label of `subset`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subset: Option<IndexMap<String, String>>,
}

/// A target and its share of the rule's requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    #[serde(flatten)]
    pub target: RawTarget,
    /// Default 1; 0 sends nothing; at most 1,000,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}
