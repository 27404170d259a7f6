//! Where a service's rules send requests that its callers' proxies cannot send them, found
//! before deployment instead of by the proxy at run time (docs/routes.md, "In the proxy"):
//!
//! - `backend-not-called`: a rule's backend or mirror that a caller of the service does not
//!   call. That caller's proxy has no cluster for it: its requests the rule sends there are
//!   answered 404 `no-route`, and a mirror's copies are not made.
//! - `label-subset`: a backend or mirror whose label `subset` no copy of its service carries,
//!   where the file declares those copies (a list, or a count, whose copies carry no labels):
//!   requests sent there are answered 503 `no-endpoint`, copies are not made. A service whose
//!   copies the file does not declare registers them at run time (`hopwise proxy --label`):
//!   nothing is known of their labels, nothing is said.
//!
//! Pure: the mesh in, findings out, one per (caller, rule, target) or (rule, target).

use hopwise_model::labels;
use hopwise_model::route::{Filter, Route, ServiceRoutes, Target};
use hopwise_model::{Mesh, Service};
use indexmap::IndexMap;

use crate::findings::{Finding, Severity};

/// Every target of every rule that some caller cannot reach, or no copy can be in.
pub fn unreachable(mesh: &Mesh) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, service) in &mesh.services {
        let targets = match &service.routes {
            ServiceRoutes::Http(r) => targets(r),
            ServiceRoutes::Grpc(r) => targets(r),
        };
        for (at, kind, target) in targets {
            let rule = format!("services.{name}.routes.{at}");
            if let Some(copies) = no_copy_carries(mesh, target) {
                out.push(subset(name, &rule, kind, target, copies));
            }
            for caller in callers(mesh, name).filter(|c| !calls(c, &target.service)) {
                out.push(not_called(name, &rule, kind, target, &caller.name));
            }
        }
    }
    out
}

/// Each rule's backends and mirrors: (`<route>.rules[<i>]`, `backend` or `mirror`, target).
fn targets<M>(routes: &IndexMap<String, Route<M>>) -> Vec<(String, &'static str, &Target)> {
    let mut out = Vec::new();
    for (route_name, route) in routes {
        for (i, rule) in route.rules.iter().enumerate() {
            let at = format!("{route_name}.rules[{i}]");
            for b in &rule.backends {
                out.push((at.clone(), "backend", &b.target));
            }
            for f in &rule.filters {
                if let Filter::RequestMirror(m) = f {
                    out.push((at.clone(), "mirror", &m.target));
                }
            }
        }
    }
    out
}

fn callers<'m>(mesh: &'m Mesh, service: &'m str) -> impl Iterator<Item = &'m Service> {
    (mesh.services.values()).filter(move |s| calls(s, service))
}

fn calls(caller: &Service, service: &str) -> bool {
    caller.calls.iter().any(|c| c.to == service)
}

fn not_called(service: &str, rule: &str, kind: &str, target: &Target, caller: &str) -> Finding {
    let to = &target.service;
    let what = if kind == "mirror" {
        format!("{caller}'s proxy makes no copy")
    } else {
        format!("{caller}'s proxy answers them 404 no-route")
    };
    Finding {
        code: "backend-not-called",
        severity: Severity::Warning,
        subject: format!("{caller} → {service} ({kind} {to})"),
        path: rule.to_owned(),
        message: format!(
            "{rule} sends {caller}'s requests to {kind} {to}, which {caller} does not call: {what}"
        ),
        fix: format!("add `{to}` to services.{caller}.calls, or send the rule elsewhere"),
    }
}

/// The number of copies the file declares of `target`'s service when it names a subset none
/// of them carries; `None` when it names none, when one carries it, or when the copies register
/// at run time (none declared).
fn no_copy_carries(mesh: &Mesh, target: &Target) -> Option<usize> {
    let copies = &mesh.services.get(&target.service)?.copies;
    let none = !target.subset.is_empty()
        && !copies.is_empty()
        && !(copies.iter()).any(|c| labels::carries(&c.labels, &target.subset));
    none.then_some(copies.len())
}

fn subset(service: &str, rule: &str, kind: &str, target: &Target, copies: usize) -> Finding {
    let labels: Vec<String> = (target.subset.iter())
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let labels = labels.join(", ");
    let to = &target.service;
    Finding {
        code: "label-subset",
        severity: Severity::Warning,
        subject: format!("{service} ({kind} {to} {{{labels}}})"),
        path: rule.to_owned(),
        message: format!(
            "{rule}'s {kind} {to} selects the copies labelled {{{labels}}}, which none of the {copies} {to} copies the file declares carries: {}",
            if kind == "mirror" {
                "no copy is made"
            } else {
                "its requests are answered 503 no-endpoint"
            }
        ),
        fix: format!(
            "label a copy of {to} (`services.{to}.copies[i].labels: {{ {labels} }}`), or send the rule elsewhere"
        ),
    }
}

#[cfg(test)]
#[path = "reach_tests.rs"]
mod tests;
