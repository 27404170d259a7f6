//! Routes from the API server: HTTPRoutes and GRPCRoutes (`gateway.networking.k8s.io/v1`)
//! whose parent is a Service — the Gateway API's mesh binding (GAMMA) — read into the mesh
//! file's words ([`KubeRoute`], the control plane's typed input), and the `status.parents`
//! written back with what the control plane made of each. Pure; the watch is [`watch`].
//!
//! The words: every key of the rules in snake case (`queryParams` → `query_params`,
//! `backendRequest` → `backend_request`), `backendRefs` → `backends` with `name` → `service`,
//! a mirror's `backendRef` → `backend`. A backend or mirror in another namespace (which needs a
//! ReferenceGrant) or of another kind than a core Service is refused; a backend's `port` is
//! dropped (a copy is reached at its proxy's port). Everything else goes through as written,
//! so the mesh file's reader refuses what it does not know, by name.

use hopwise_model::kubernetes::KubeRoute;
use serde_json::{Map, Value, json};

mod watch;
pub use watch::{Link, watch};

/// The API group, and what hopwise writes as its `controllerName`.
pub const GROUP: &str = "gateway.networking.k8s.io";
pub const CONTROLLER: &str = "hopwise.dev/control";

/// A route's parents that are Services in its namespace (GAMMA), as `parentRefs` wrote them.
pub fn service_parents(route: &Value) -> Vec<Value> {
    let namespace = route["metadata"]["namespace"].as_str().unwrap_or_default();
    route["spec"]["parentRefs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|p| p["kind"] == "Service" && matches!(p["group"].as_str(), Some("" | "core")))
        .filter(|p| p["namespace"].as_str().is_none_or(|n| n == namespace))
        .cloned()
        .collect()
}

/// `route` (the resource as JSON) in the mesh file's words; `Err` with why not.
pub fn read(route: &Value) -> Result<KubeRoute, String> {
    let meta = &route["metadata"];
    let (Some(namespace), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
        return Err("no namespace or name".into());
    };
    let parents = service_parents(route)
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    let spec = &route["spec"];
    let mut out = Map::new();
    if let Some(hosts) = spec.get("hostnames") {
        out.insert("hostnames".into(), hosts.clone());
    }
    let rules = spec["rules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let rules: Result<Vec<Value>, String> = rules.iter().map(|r| rule(r, namespace)).collect();
    out.insert("rules".into(), Value::Array(rules?));
    Ok(KubeRoute {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        parents,
        route: Value::Object(out),
    })
}

fn rule(rule: &Value, namespace: &str) -> Result<Value, String> {
    let Value::Object(fields) = rule else {
        return Ok(snake(rule));
    };
    let mut out = Map::new();
    for (key, value) in fields {
        match key.as_str() {
            "backendRefs" => {
                let refs = value.as_array().map(Vec::as_slice).unwrap_or_default();
                let backends: Result<Vec<Value>, String> =
                    refs.iter().map(|b| backend(b, namespace)).collect();
                out.insert("backends".into(), Value::Array(backends?));
            }
            "filters" => {
                let list = value.as_array().map(Vec::as_slice).unwrap_or_default();
                let filters: Result<Vec<Value>, String> =
                    list.iter().map(|f| filter(f, namespace)).collect();
                out.insert("filters".into(), Value::Array(filters?));
            }
            _ => {
                out.insert(snake_key(key), snake(value));
            }
        }
    }
    Ok(Value::Object(out))
}

fn filter(filter: &Value, namespace: &str) -> Result<Value, String> {
    let mut out = snake(filter);
    if let Some(mirror) = filter["requestMirror"].as_object() {
        let mut m = Map::new();
        for (key, value) in mirror {
            match key.as_str() {
                "backendRef" => {
                    let mut b = backend(value, namespace)?;
                    if let Some(b) = b.as_object_mut() {
                        b.remove("weight");
                    }
                    m.insert("backend".into(), b);
                }
                _ => {
                    m.insert(snake_key(key), snake(value));
                }
            }
        }
        out["request_mirror"] = Value::Object(m);
    }
    Ok(out)
}

/// A `backendRef`: a core Service of the route's namespace, by name, with its weight.
fn backend(b: &Value, namespace: &str) -> Result<Value, String> {
    let name = b["name"].as_str().unwrap_or_default();
    if !matches!(b["group"].as_str(), None | Some("" | "core"))
        || !matches!(b["kind"].as_str(), None | Some("Service"))
    {
        return Err(format!(
            "backend `{name}`: only a core Service can be a backend"
        ));
    }
    if b["namespace"].as_str().is_some_and(|n| n != namespace) {
        return Err(format!(
            "backend `{name}`: in another namespace (a ReferenceGrant), not supported"
        ));
    }
    let mut out = Map::new();
    out.insert("service".into(), json!(name));
    for (key, value) in b.as_object().into_iter().flatten() {
        if !matches!(
            key.as_str(),
            "name" | "group" | "kind" | "namespace" | "port"
        ) {
            out.insert(snake_key(key), snake(value));
        }
    }
    Ok(Value::Object(out))
}

/// Every key of `v`, at any depth, in snake case (the rules hold no map of user keys).
fn snake(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (snake_key(k), snake(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(snake).collect()),
        other => other.clone(),
    }
}

fn snake_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// What the control plane made of a route, as the Gateway API's conditions say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    /// A parent or backend the mesh does not have, or a reference not supported.
    Unresolved(String),
    /// Does not read as a mesh route, or `hopwise check` refuses it.
    Invalid(String),
}

/// The `status` body for `route`: one entry per Service parent, by hopwise, with `Accepted`
/// and `ResolvedRefs` at the route's generation.
pub fn status(route: &Value, outcome: &Outcome) -> Value {
    let generation = route["metadata"]["generation"].as_i64().unwrap_or(0);
    let condition = |kind: &str, ok: bool, reason: &str, message: &str| {
        json!({
            "type": kind,
            "status": if ok { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": now_rfc3339(),
        })
    };
    let (accepted, resolved) = match outcome {
        Outcome::Accepted => (
            condition(
                "Accepted",
                true,
                "Accepted",
                "in the mesh file the control plane serves",
            ),
            condition(
                "ResolvedRefs",
                true,
                "ResolvedRefs",
                "every backend is a service of the mesh",
            ),
        ),
        Outcome::Unresolved(why) => (
            condition(
                "Accepted",
                true,
                "Accepted",
                "read; not served while a reference is unresolved",
            ),
            condition("ResolvedRefs", false, "BackendNotFound", why),
        ),
        Outcome::Invalid(why) => (
            condition("Accepted", false, "UnsupportedValue", why),
            condition("ResolvedRefs", true, "ResolvedRefs", ""),
        ),
    };
    let parents: Vec<Value> = service_parents(route)
        .into_iter()
        .map(|parent| {
            json!({
                "parentRef": parent,
                "controllerName": CONTROLLER,
                "conditions": [accepted, resolved],
            })
        })
        .collect();
    json!({ "status": { "parents": parents } })
}

pub(crate) fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
