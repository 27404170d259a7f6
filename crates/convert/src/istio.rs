//! Istio → the translation: a VirtualService's `http` routes (matches, destinations, `timeout`,
//! `retries`) become routes of each host it names; a DestinationRule's traffic policy (caps,
//! connect timeout, outlier detection, per subset too) becomes the host's destination. What is
//! absent keeps Istio's defaults, which the `istio` preset holds: 2 retries on
//! `connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes`, no timeout,
//! caps at 4294967295. `retries` written without `attempts` (or with 0) switches retries off,
//! as Istio's `retry.go` does.

use hopwise_model::yaml::Node;

use crate::conditions;
use crate::ir::{
    Destination, Field, Flavor, Outlier, Route, Skipped, Translation, nonzero, timeout,
};
use crate::names::key;
use crate::node::{Ctx, get};
use crate::objects::Object;

/// A VirtualService.
pub fn virtual_service(t: &mut Translation, o: &Object, cx: &mut Ctx) {
    t.saw(Flavor::Istio);
    let Some(spec) = get(o.node, "spec").and_then(|s| cx.mapping(s, "spec")) else {
        return;
    };
    if let Some(g) = get(spec, "gateways") {
        let gateways: Vec<String> = cx
            .list(g, "spec.gateways")
            .iter()
            .filter_map(|n| cx.string(n, "spec.gateways[]"))
            .collect();
        if !gateways.is_empty() && !gateways.iter().any(|g| g == "mesh") {
            t.skipped.push(Skipped {
                at: cx.at(o.node, ""),
                why: "bound to gateways only (no `mesh`): it routes traffic entering the cluster, not calls between services".to_owned(),
            });
            return;
        }
    }
    let hosts: Vec<String> = get(spec, "hosts")
        .map(|h| {
            cx.list(h, "spec.hosts")
                .iter()
                .enumerate()
                .filter_map(|(i, n)| cx.string(n, &format!("spec.hosts[{i}]")))
                .collect()
        })
        .unwrap_or_default();
    if hosts.is_empty() {
        cx.error(o.pos(), "a VirtualService with no `spec.hosts`");
        return;
    }
    let mut routes = Vec::new();
    if let Some(http) = get(spec, "http") {
        for (i, r) in cx.list(http, "spec.http").iter().enumerate() {
            if let Some(route) = http_route(r, &format!("spec.http[{i}]"), cx) {
                routes.push(route);
            }
        }
    }
    for host in &hosts {
        if host.starts_with('*') {
            t.skipped.push(Skipped {
                at: cx.at(o.node, "hosts"),
                why: format!("the wildcard host `{host}` names no one service"),
            });
            continue;
        }
        t.host(&key(host, o.namespace))
            .routes
            .extend(routes.iter().cloned());
    }
    t.read.push(cx.at(o.node, ""));
}

fn http_route(r: &Node, field: &str, cx: &mut Ctx) -> Option<Route> {
    cx.mapping(r, field)?;
    let mut route = Route::new(cx.at(r, field));
    route.name = get(r, "name").and_then(|n| cx.string(n, &format!("{field}.name")));
    if let Some(m) = get(r, "match") {
        let matches = cx.list(m, &format!("{field}.match"));
        if let [one] = matches {
            let f = format!("{field}.match[0]");
            if let Some(uri) = get(one, "uri") {
                route.path = get(uri, "prefix")
                    .or_else(|| get(uri, "exact"))
                    .and_then(|p| cx.string(p, &format!("{f}.uri")));
            }
            if let Some(method) = get(one, "method").and_then(|m| get(m, "exact")) {
                route.method = cx.string(method, &format!("{f}.method.exact"));
            }
        }
    }
    if let Some(dests) = get(r, "route") {
        let mut subsets = Vec::new();
        for (i, d) in cx.list(dests, &format!("{field}.route")).iter().enumerate() {
            let weight = get(d, "weight")
                .and_then(|w| cx.count(w, &format!("{field}.route[{i}].weight"), 100))
                .unwrap_or(1);
            let subset = get(d, "destination")
                .and_then(|d| get(d, "subset"))
                .and_then(|s| cx.string(s, &format!("{field}.route[{i}].destination.subset")));
            if weight > 0 && !subsets.contains(&subset) {
                subsets.push(subset);
            }
        }
        if let [Some(one)] = subsets.as_slice() {
            route.subset = Some(one.clone());
        }
    }
    if let Some(t) = get(r, "timeout") {
        route.timeout = timeout(cx, t, &format!("{field}.timeout"));
    }
    if let Some(retries) = get(r, "retries") {
        retries_of(&mut route, retries, &format!("{field}.retries"), cx);
    }
    Some(route)
}

/// A `retries` block (a route's, or the mesh-wide default's) onto `route`.
pub fn retries_of(route: &mut Route, retries: &Node, field: &str, cx: &mut Ctx) {
    if cx.mapping(retries, field).is_none() {
        return;
    }
    let attempts = match get(retries, "attempts") {
        Some(a) => {
            let f = format!("{field}.attempts");
            cx.count(a, &f, u64::from(u32::MAX)).map(|n| Field {
                value: n,
                at: cx.at(a, &f),
            })
        }
        // `retries` without `attempts` (0): Istio switches retries off.
        None => Some(Field {
            value: 0,
            at: cx.at(retries, field),
        }),
    };
    route.retry_count = attempts;
    if let Some(p) = get(retries, "perTryTimeout") {
        route.per_try_timeout = timeout(cx, p, &format!("{field}.perTryTimeout"));
    }
    if let Some(b) = get(retries, "backoff") {
        route.backoff_base = nonzero(cx, b, &format!("{field}.backoff"));
    }
    if let Some(on) = get(retries, "retryOn") {
        let f = format!("{field}.retryOn");
        if let Some(text) = cx.string(on, &f) {
            match conditions::istio(&text) {
                Ok(c) => {
                    let at = cx.at(on, &f);
                    route.status_codes = Some(Field {
                        value: c.codes,
                        at: at.clone(),
                    });
                    route.retry_on = Some(Field { value: c.names, at });
                }
                Err(e) => cx.error(on.pos, format!("`{f}`: {e}")),
            }
        }
    }
}

/// A DestinationRule.
pub fn destination_rule(t: &mut Translation, o: &Object, cx: &mut Ctx) {
    t.saw(Flavor::Istio);
    let Some(spec) = get(o.node, "spec").and_then(|s| cx.mapping(s, "spec")) else {
        return;
    };
    let Some(host) = get(spec, "host").and_then(|h| cx.string(h, "spec.host")) else {
        cx.error(o.pos(), "a DestinationRule with no `spec.host`");
        return;
    };
    let mut dest = Destination::new(cx.at(o.node, ""));
    if let Some(tp) = get(spec, "trafficPolicy") {
        traffic_policy(&mut dest, tp, "spec.trafficPolicy", cx);
    }
    let mut subsets = Vec::new();
    if let Some(list) = get(spec, "subsets") {
        for (i, s) in cx.list(list, "spec.subsets").iter().enumerate() {
            let f = format!("spec.subsets[{i}]");
            let Some(name) = get(s, "name").and_then(|n| cx.string(n, &format!("{f}.name"))) else {
                continue;
            };
            // A subset's policy starts from the rule's and overrides what it writes.
            let mut own = dest.clone();
            own.holder = cx.at(s, &f);
            if let Some(tp) = get(s, "trafficPolicy") {
                traffic_policy(&mut own, tp, &format!("{f}.trafficPolicy"), cx);
            }
            subsets.push((name, own));
        }
    }
    let h = t.host(&key(&host, o.namespace));
    h.destination = Some(dest);
    h.subsets.extend(subsets);
    t.read.push(cx.at(o.node, ""));
}

fn traffic_policy(dest: &mut Destination, tp: &Node, field: &str, cx: &mut Ctx) {
    let cap = |cx: &mut Ctx, node: Option<&Node>, f: String| {
        node.and_then(|n| {
            cx.count(n, &f, u64::from(u32::MAX)).map(|v| Field {
                value: v,
                at: cx.at(n, &f),
            })
        })
    };
    if let Some(pool) = get(tp, "connectionPool") {
        let f = format!("{field}.connectionPool");
        if let Some(tcp) = get(pool, "tcp") {
            let g = format!("{f}.tcp");
            if let Some(c) = cap(
                cx,
                get(tcp, "maxConnections"),
                format!("{g}.maxConnections"),
            ) {
                dest.max_connections = Some(c);
            }
            if let Some(c) = get(tcp, "connectTimeout")
                .and_then(|n| nonzero(cx, n, &format!("{g}.connectTimeout")))
            {
                dest.connect_timeout = Some(c);
            }
        }
        if let Some(http) = get(pool, "http") {
            let g = format!("{f}.http");
            if let Some(c) = cap(
                cx,
                get(http, "http1MaxPendingRequests"),
                format!("{g}.http1MaxPendingRequests"),
            ) {
                dest.max_pending = Some(c);
            }
            if let Some(c) = cap(
                cx,
                get(http, "http2MaxRequests"),
                format!("{g}.http2MaxRequests"),
            ) {
                dest.max_requests = Some(c);
            }
            if let Some(c) = cap(cx, get(http, "maxRetries"), format!("{g}.maxRetries")) {
                dest.max_retries = Some(c);
            }
        }
    }
    if let Some(od) = get(tp, "outlierDetection") {
        let f = format!("{field}.outlierDetection");
        let consecutive = get(od, "consecutiveGatewayErrors")
            .map(|n| (n, "consecutiveGatewayErrors"))
            .or_else(|| get(od, "consecutive5xxErrors").map(|n| (n, "consecutive5xxErrors")))
            .and_then(|(n, k)| cx.count(n, &format!("{f}.{k}"), u64::from(u32::MAX)));
        let base = get(od, "baseEjectionTime")
            .and_then(|n| cx.duration(n, &format!("{f}.baseEjectionTime")));
        let percent = get(od, "maxEjectionPercent")
            .and_then(|n| cx.count(n, &format!("{f}.maxEjectionPercent"), 100));
        dest.outlier = Some(Field {
            value: Outlier {
                consecutive,
                base_ejection_time: base,
                max_ejection_percent: percent,
            },
            at: cx.at(od, &f),
        });
    }
}
