//! Linkerd → the translation. A ServiceProfile's routes (`timeout`, `isRetryable`) and its
//! `retryBudget`; the retry and timeout annotations (`retry.linkerd.io/*`,
//! `timeout.linkerd.io/*`) on a Service or on an HTTPRoute/GRPCRoute (read in `gateway.rs`).
//! Absent means Linkerd's defaults, which the `linkerd` preset holds: no retries, no timeout.
//!
//! A ServiceProfile bounds a retryable route's retries by its budget alone; hopwise counts
//! tries, so a retryable route gets the most retries the budget's floor lets one failing
//! request make (`minRetriesPerSecond × ttl`, 100 with Linkerd's defaults) and the budget
//! itself, whose ceiling `check` shows beside the count.

use hopwise_model::Dur;
use hopwise_model::yaml::Node;

use crate::conditions;
use crate::ir::{Budget, Field, Flavor, Route, Translation, timeout};
use crate::names::key;
use crate::node::{Ctx, get};
use crate::objects::Object;

/// Linkerd's budget when a ServiceProfile writes none: 20 %, 10 per second, 10 s.
const DEFAULT_BUDGET: Budget = Budget {
    ratio: Some(0.2),
    min_per_second: Some(10),
    window: Some(Dur::from_millis(10_000)),
};

/// gRPC statuses a ServiceProfile counts as failures; with them `retriable-status-codes` for
/// HTTP's 500–599 ([`conditions::LINKERD_5XX`]). A retryable route retries a failed *response*
/// only: not a refused connection or a reset, which Envoy's `5xx` would also retry.
const PROFILE_FAILURES: [&str; 6] = [
    "retriable-status-codes",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

/// A ServiceProfile (named after its service's DNS name).
pub fn service_profile(t: &mut Translation, o: &Object, cx: &mut Ctx) {
    t.saw(Flavor::Linkerd);
    let Some(spec) = get(o.node, "spec").and_then(|s| cx.mapping(s, "spec")) else {
        return;
    };
    let budget = match get(spec, "retryBudget") {
        Some(b) => Field {
            value: budget_of(b, "spec.retryBudget", cx),
            at: cx.at(b, "spec.retryBudget"),
        },
        None => Field {
            value: DEFAULT_BUDGET,
            at: cx.at(o.node, ""),
        },
    };
    let mut routes = Vec::new();
    if let Some(list) = get(spec, "routes") {
        for (i, r) in cx.list(list, "spec.routes").iter().enumerate() {
            let f = format!("spec.routes[{i}]");
            if cx.mapping(r, &f).is_none() {
                continue;
            }
            let mut route = Route::new(cx.at(r, &f));
            route.name = get(r, "name").and_then(|n| cx.string(n, &format!("{f}.name")));
            if let Some(c) = get(r, "condition") {
                route.method =
                    get(c, "method").and_then(|m| cx.string(m, &format!("{f}.condition.method")));
            }
            if let Some(n) = get(r, "timeout") {
                route.timeout = timeout(cx, n, &format!("{f}.timeout"));
            }
            let retryable = get(r, "isRetryable")
                .and_then(|n| cx.boolean(n, &format!("{f}.isRetryable")).map(|b| (b, n)));
            if let Some((true, n)) = retryable {
                let at = cx.at(n, &format!("{f}.isRetryable"));
                let b = budget.value;
                let floor = b.min_per_second.unwrap_or(10)
                    * b.window.map_or(10, |w| w.get().as_secs().max(1));
                route.retry_count = Some(Field {
                    value: floor.clamp(1, u64::from(u32::MAX)),
                    at: at.clone(),
                });
                route.status_codes = Some(Field {
                    value: conditions::LINKERD_5XX.collect(),
                    at: at.clone(),
                });
                route.retry_on = Some(Field {
                    value: PROFILE_FAILURES.iter().map(|s| (*s).to_owned()).collect(),
                    at,
                });
                route.budget = Some(budget.clone());
            }
            routes.push(route);
        }
    }
    t.host(&key(o.name, o.namespace)).routes.extend(routes);
    t.read.push(cx.at(o.node, ""));
}

fn budget_of(b: &Node, field: &str, cx: &mut Ctx) -> Budget {
    let mut out = DEFAULT_BUDGET;
    if cx.mapping(b, field).is_none() {
        return out;
    }
    if let Some(n) = get(b, "retryRatio") {
        let f = format!("{field}.retryRatio");
        match cx.float(n, &f) {
            Some(r) if (0.0..=1.0).contains(&r) => out.ratio = Some(r),
            Some(r) => cx.error(n.pos, format!("`{f}`: {r} is not a share between 0 and 1")),
            None => {}
        }
    }
    if let Some(n) = get(b, "minRetriesPerSecond") {
        out.min_per_second = cx.count(
            n,
            &format!("{field}.minRetriesPerSecond"),
            u64::from(u32::MAX),
        );
    }
    if let Some(n) = get(b, "ttl") {
        out.window = cx
            .duration(n, &format!("{field}.ttl"))
            .filter(|d| !d.get().is_zero());
    }
    out
}

/// Whether an object carries any of Linkerd's retry or timeout annotations.
pub fn annotated(o: &Object) -> bool {
    ANNOTATIONS.iter().any(|k| o.annotation(k).is_some())
}

const ANNOTATIONS: [&str; 6] = [
    "retry.linkerd.io/http",
    "retry.linkerd.io/grpc",
    "retry.linkerd.io/limit",
    "retry.linkerd.io/timeout",
    "timeout.linkerd.io/request",
    "timeout.linkerd.io/response",
];

/// Linkerd's annotations onto `route` (a Service's apply to each of its routes; a route's own
/// retry annotations replace all of its Service's).
pub fn annotations(route: &mut Route, o: &Object, cx: &mut Ctx) {
    let field = |k: &str| format!("metadata.annotations[{k}]");
    let text = |cx: &mut Ctx, k: &str| {
        o.annotation(k)
            .and_then(|n| cx.string(n, &field(k)).map(|s| (s, n)))
    };
    let http = text(cx, "retry.linkerd.io/http");
    let grpc = text(cx, "retry.linkerd.io/grpc");
    let limit = o.annotation("retry.linkerd.io/limit");
    let per_try = o.annotation("retry.linkerd.io/timeout");
    if http.is_some() || grpc.is_some() || limit.is_some() || per_try.is_some() {
        let mut names = Vec::new();
        let mut codes = Vec::new();
        let mut at = None;
        for (k, found, read) in [
            (
                "retry.linkerd.io/http",
                http,
                conditions::linkerd_http as fn(&str) -> _,
            ),
            ("retry.linkerd.io/grpc", grpc, conditions::linkerd_grpc),
        ] {
            let Some((s, n)) = found else { continue };
            match read(&s) {
                Ok(c) => {
                    names.extend(c.names);
                    codes.extend(c.codes);
                    at.get_or_insert(cx.at(n, &field(k)));
                }
                Err(e) => cx.error(n.pos, format!("`{}`: {e}", field(k))),
            }
        }
        let count = match limit {
            Some(n) => cx
                .count(n, &field("retry.linkerd.io/limit"), u64::from(u32::MAX))
                .map(|v| Field {
                    value: v,
                    at: cx.at(n, &field("retry.linkerd.io/limit")),
                }),
            // Linkerd: "If unspecified, the default is 1".
            None => Some(Field {
                value: 1,
                at: cx.at(o.node, ""),
            }),
        };
        let at = at.unwrap_or_else(|| cx.at(o.node, ""));
        route.retry_count = count;
        route.status_codes = Some(Field {
            value: codes,
            at: at.clone(),
        });
        route.retry_on = Some(Field { value: names, at });
        if let Some(n) = per_try {
            let f = field("retry.linkerd.io/timeout");
            if let Some(d) = cx.duration(n, &f) {
                route.per_try_timeout = Some(Field {
                    value: Some(d),
                    at: cx.at(n, &f),
                });
            }
        }
    }
    for (k, request) in [
        ("timeout.linkerd.io/request", true),
        ("timeout.linkerd.io/response", false),
    ] {
        let Some(n) = o.annotation(k) else { continue };
        let Some(value) = timeout(cx, n, &field(k)) else {
            continue;
        };
        if request {
            route.timeout = Some(value);
        } else if route.per_try_timeout.is_none() {
            // A backend response's limit: one try's, never retried by itself.
            route.per_try_timeout = Some(value);
        }
    }
}
