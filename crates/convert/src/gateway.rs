//! Gateway API → the translation: an HTTPRoute or GRPCRoute whose parent is a Service (the
//! mesh's, GAMMA) gives that service's routes — matches, `timeouts.request`,
//! `timeouts.backendRequest` (one try's), `retry.attempts`/`retry.codes`/`retry.backoff` — and
//! Linkerd's annotations on the route override them. A route bound to a Gateway carries traffic
//! entering the cluster, not calls between services: it is listed as skipped. A GRPCRoute's
//! parent speaks gRPC.

use hopwise_model::Protocol;
use hopwise_model::yaml::Node;

use crate::ir::{Field, Flavor, Route, Skipped, Translation, nonzero, timeout};
use crate::linkerd;
use crate::names::key;
use crate::node::{Ctx, get};
use crate::objects::Object;

/// An HTTPRoute or GRPCRoute.
pub fn route(t: &mut Translation, o: &Object, cx: &mut Ctx) {
    let grpc = o.kind == "GRPCRoute";
    let Some(spec) = get(o.node, "spec").and_then(|s| cx.mapping(s, "spec")) else {
        return;
    };
    let mut parents = Vec::new();
    if let Some(refs) = get(spec, "parentRefs") {
        for (i, p) in cx.list(refs, "spec.parentRefs").iter().enumerate() {
            let f = format!("spec.parentRefs[{i}]");
            let kind = get(p, "kind").and_then(|k| cx.string(k, &format!("{f}.kind")));
            let name = get(p, "name").and_then(|n| cx.string(n, &format!("{f}.name")));
            let ns = get(p, "namespace").and_then(|n| cx.string(n, &format!("{f}.namespace")));
            match (kind.as_deref(), name) {
                (Some("Service"), Some(n)) => {
                    let ns = ns.as_deref().or(o.namespace);
                    parents.push((key(&n, ns), cx.at(p, &f)));
                }
                (_, Some(n)) => t.skipped.push(Skipped {
                    at: cx.at(p, &f),
                    why: format!(
                        "parent `{n}` is a {}: that route carries traffic entering the cluster, not calls between services",
                        kind.as_deref().unwrap_or("Gateway")
                    ),
                }),
                (_, None) => cx.error(p.pos, format!("`{f}`: a parent without `name`")),
            }
        }
    }
    if parents.is_empty() {
        return;
    }
    if linkerd::annotated(o) {
        t.saw(Flavor::Linkerd);
    }
    let mut routes = Vec::new();
    if let Some(rules) = get(spec, "rules") {
        for (i, r) in cx.list(rules, "spec.rules").iter().enumerate() {
            let f = format!("spec.rules[{i}]");
            if cx.mapping(r, &f).is_none() {
                continue;
            }
            let mut route = rule(r, &f, grpc, cx);
            linkerd::annotations(&mut route, o, cx);
            routes.push(route);
        }
    }
    if routes.is_empty() {
        let mut route = Route::new(cx.at(o.node, ""));
        linkerd::annotations(&mut route, o, cx);
        routes.push(route);
    }
    for (parent, at) in parents {
        let h = t.host(&parent);
        h.routes.extend(routes.iter().cloned());
        if grpc {
            h.protocol = Some(Field {
                value: Protocol::Grpc,
                at,
            });
        }
    }
    t.read.push(cx.at(o.node, ""));
}

fn rule(r: &Node, field: &str, grpc: bool, cx: &mut Ctx) -> Route {
    let mut route = Route::new(cx.at(r, field));
    route.name = get(r, "name").and_then(|n| cx.string(n, &format!("{field}.name")));
    if let Some(m) = get(r, "matches")
        && let [one] = cx.list(m, &format!("{field}.matches"))
    {
        let f = format!("{field}.matches[0]");
        if grpc {
            if let Some(method) = get(one, "method") {
                let service = get(method, "service")
                    .and_then(|s| cx.string(s, &format!("{f}.method.service")));
                let name =
                    get(method, "method").and_then(|s| cx.string(s, &format!("{f}.method.method")));
                route.path = match (service, name) {
                    (Some(s), Some(m)) => Some(format!("/{s}/{m}")),
                    (Some(s), None) => Some(format!("/{s}/")),
                    _ => None,
                };
            }
        } else {
            if let Some(path) = get(one, "path") {
                let kind = get(path, "type").and_then(|k| cx.string(k, &format!("{f}.path.type")));
                if kind.as_deref() != Some("RegularExpression") {
                    route.path =
                        get(path, "value").and_then(|v| cx.string(v, &format!("{f}.path.value")));
                }
            }
            route.method = get(one, "method").and_then(|m| cx.string(m, &format!("{f}.method")));
        }
    }
    if let Some(timeouts) = get(r, "timeouts") {
        for (key, per_try) in [("request", false), ("backendRequest", true)] {
            let Some(n) = get(timeouts, key) else {
                continue;
            };
            let Some(value) = timeout(cx, n, &format!("{field}.timeouts.{key}")) else {
                continue;
            };
            if per_try {
                route.per_try_timeout = Some(value);
            } else {
                route.timeout = Some(value);
            }
        }
    }
    if let Some(retry) = get(r, "retry") {
        let f = format!("{field}.retry");
        if let Some(n) = get(retry, "attempts") {
            let g = format!("{f}.attempts");
            route.retry_count = cx.count(n, &g, u64::from(u32::MAX)).map(|v| Field {
                value: v,
                at: cx.at(n, &g),
            });
        }
        if let Some(n) = get(retry, "codes") {
            let g = format!("{f}.codes");
            let codes: Vec<u16> = cx
                .list(n, &g)
                .iter()
                .filter_map(|c| cx.count(c, &g, 599))
                .filter_map(|c| u16::try_from(c).ok())
                .collect();
            let at = cx.at(n, &g);
            route.retry_on = Some(Field {
                value: vec!["retriable-status-codes".to_owned()],
                at: at.clone(),
            });
            route.status_codes = Some(Field { value: codes, at });
        }
        if let Some(n) = get(retry, "backoff") {
            route.backoff_base = nonzero(cx, n, &format!("{f}.backoff"));
        }
    }
    route
}
