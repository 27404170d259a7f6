//! Splits: a route rule with more than one backend, counted per backend as each caller's
//! proxy sends to it. The timeout table and fan-out count a call once per request reaching its
//! caller, so a caller that calls every backend of a split is counted as calling all of them;
//! here each backend gets its own numbers — the call to it under the rule's policy (its tries
//! and worst case when everything below hangs, a delay a service injects included), the most
//! attempts at one service of its chain per request the split sends there — and the split its
//! weighted expectation: Σ weight × attempts / Σ weight, the attempts one request through the
//! split makes on average when the backend's chain fails at its worst.
//!
//! Worst cases are not averaged: a request can take the slowest backend, so a split's budget is
//! its slowest weighted backend's, read off the rows. Pure: the mesh in, rows out.

use std::time::Duration;

use hopwise_model::route::{Backend, Route, RulePolicy, ServiceRoutes};
use hopwise_model::{Call, Mesh, Service};
use indexmap::IndexMap;
use serde::Serialize;

use crate::fanout::{self, Failure};
use crate::routes::Share;

/// One rule with several backends, as one caller's proxy sends to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Split {
    /// The service whose proxy picks the backend.
    pub caller: String,
    /// The service whose routes hold the rule.
    pub service: String,
    /// Where the rule is written (`services.b.routes.r.rules[0]`).
    pub rule: String,
    pub backends: Vec<BackendCount>,
    /// Σ weight × attempts / Σ weight over the backends; `None` when every weight is 0.
    pub expected_attempts: Option<f64>,
}

/// One backend of a split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendCount {
    /// The backend, its weight and part of the rule's requests.
    #[serde(flatten)]
    pub share: Share,
    /// `None` when the caller does not call it (`backend-not-called`: answered 404 at once).
    pub count: Option<Counted>,
}

/// What a request the split sends to a backend costs at worst.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counted {
    /// The call's tries when everything below hangs, under the rule's policy.
    pub tries: u32,
    /// The call's worst case when everything below hangs; `None`: never ends.
    pub worst_case: Option<Duration>,
    /// The most attempts at one service of the backend's chain (itself included).
    pub attempts: u64,
    /// That service and how it fails (`c hangs`).
    pub attempts_at: String,
}

/// Every split of every service's routes, per caller that calls the service.
pub fn analyze(mesh: &Mesh) -> Vec<Split> {
    let mut out = Vec::new();
    for (name, service) in &mesh.services {
        let rules = match &service.routes {
            ServiceRoutes::Http(r) => split_rules(r),
            ServiceRoutes::Grpc(r) => split_rules(r),
        };
        let callers = mesh.services.values().filter(|s| calls(s, name).is_some());
        for caller in callers {
            for rule in &rules {
                out.push(split(mesh, caller, name, rule));
            }
        }
    }
    out
}

/// A rule with more than one backend: where it is (`<route>.rules[<i>]`), what it sends.
struct SplitRule<'r> {
    at: String,
    backends: &'r [Backend],
    policy: Option<&'r RulePolicy>,
}

fn split_rules<M>(routes: &IndexMap<String, Route<M>>) -> Vec<SplitRule<'_>> {
    let mut out = Vec::new();
    for (route, r) in routes {
        for (i, rule) in r.rules.iter().enumerate() {
            if rule.backends.len() > 1 {
                out.push(SplitRule {
                    at: format!("{route}.rules[{i}]"),
                    backends: &rule.backends,
                    policy: rule.policy.as_ref(),
                });
            }
        }
    }
    out
}

fn split(mesh: &Mesh, caller: &Service, service: &str, rule: &SplitRule<'_>) -> Split {
    let backends: Vec<BackendCount> = (crate::routes::shares(rule.backends).into_iter())
        .map(|share| BackendCount {
            count: calls(caller, &share.service).map(|call| count(mesh, call, rule.policy)),
            share,
        })
        .collect();
    let total: u64 = backends.iter().map(|b| u64::from(b.share.weight)).sum();
    let weighted: f64 = (backends.iter())
        .map(|b| f64::from(b.share.weight) * b.count.as_ref().map_or(0.0, |c| c.attempts as f64))
        .sum();
    Split {
        caller: caller.name.clone(),
        service: service.to_owned(),
        rule: format!("services.{service}.routes.{}", rule.at),
        backends,
        expected_attempts: (total > 0).then(|| weighted / total as f64),
    }
}

/// The call to one backend under the rule's policy laid over it, counted.
fn count(mesh: &Mesh, call: &Call, policy: Option<&RulePolicy>) -> Counted {
    let call = match policy {
        Some(rp) => Call {
            policy: rp.over(&call.policy),
            ..call.clone()
        },
        None => call.clone(),
    };
    let timing = crate::timeouts::timing(mesh, &call);
    let (mut attempts, mut attempts_at) = (0, String::new());
    for target in chain(mesh, &call.to) {
        let Some(t) = mesh.services.get(&target) else {
            continue;
        };
        for failure in Failure::for_protocol(t.protocol) {
            let n = fanout::through(mesh, &call, &target, failure);
            if n > attempts {
                (attempts, attempts_at) = (n, format!("{target} {}", failure.label()));
            }
        }
    }
    Counted {
        tries: timing.tries_when_hung,
        worst_case: timing.worst_case,
        attempts,
        attempts_at,
    }
}

/// `from` and every service it reaches, each once.
fn chain(mesh: &Mesh, from: &str) -> Vec<String> {
    let mut out = vec![from.to_owned()];
    let mut i = 0;
    while let Some(name) = out.get(i).cloned() {
        for c in mesh.services.get(&name).map_or(&[][..], |s| &s.calls) {
            if !out.contains(&c.to) {
                out.push(c.to.clone());
            }
        }
        i += 1;
    }
    out
}

/// The caller's call to `service`, if it makes one.
fn calls<'m>(caller: &'m Service, service: &str) -> Option<&'m Call> {
    caller.calls.iter().find(|c| c.to == service)
}

#[cfg(test)]
mod tests;
