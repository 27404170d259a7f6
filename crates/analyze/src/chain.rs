//! The seed's retry fan-out calculator (`hopwise fanout`): a chain of services, each calling
//! the next through a proxy with Istio's retry list, and the attempts that reach the bottom.
//! It builds a real [`Mesh`] and runs the same fan-out analysis as `hopwise check`.

use hopwise_model::{Budget, Call, Dur, Entry, Mesh, Preset, Protocol, RetryOn, Service};
use indexmap::IndexMap;
use serde::Serialize;

use crate::fanout::{self, Failure};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainFailure {
    Down,
    /// gRPC UNAVAILABLE over gRPC, HTTP 503 over HTTP.
    Error,
    Hang,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub depth: u32,
    pub proxy_retries: u32,
    pub code_retries: u32,
    pub failure: ChainFailure,
    pub protocol: Protocol,
    pub retriable_status_codes: Vec<u16>,
    pub budget: Option<f64>,
    pub top_only: bool,
}

impl Default for Params {
    /// The seed's sample "Istio gRPC, bottom down".
    fn default() -> Self {
        Params {
            depth: 3,
            proxy_retries: 2,
            code_retries: 0,
            failure: ChainFailure::Down,
            protocol: Protocol::Grpc,
            retriable_status_codes: Vec::new(),
            budget: None,
            top_only: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub bottom: String,
    /// Attempts reaching the bottom service per request at the top.
    pub attempts: u64,
    /// The ceiling with the budget at steady load (equals `attempts` without one).
    pub with_budget: f64,
    /// Calls each service in the chain receives, top first.
    pub received: IndexMap<String, u64>,
    /// How much each hop multiplies, top first: their product is `attempts`.
    pub factors: Vec<u64>,
    /// What each change would leave at the bottom.
    pub changes: Vec<Change>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub change: String,
    pub attempts: f64,
}

fn names(depth: u32) -> Vec<String> {
    const SEED: [&str; 4] = ["frontend", "checkout", "pricing", "inventory"];
    if depth == 3 {
        SEED.iter().map(|s| (*s).to_owned()).collect()
    } else {
        (0..=depth).map(|i| format!("service-{i}")).collect()
    }
}

/// The chain as a mesh file would describe it.
pub fn mesh(p: &Params) -> Mesh {
    let names = names(p.depth);
    let mut services = IndexMap::new();
    for (i, name) in names.iter().enumerate() {
        let calls = names
            .get(i + 1)
            .map(|to| {
                let mut policy = Preset::Istio.policy();
                policy.retry.count = if p.top_only && i > 0 {
                    0
                } else {
                    p.proxy_retries
                };
                policy.retry.status_codes = p.retriable_status_codes.iter().copied().collect();
                policy.retry.on.insert(RetryOn::RetriableStatusCodes);
                policy.budget = p.budget.map(|ratio| Budget {
                    ratio,
                    min_per_second: 0,
                    window: Dur::from_millis(10_000),
                });
                vec![Call {
                    from: name.clone(),
                    to: to.clone(),
                    route: None,
                    route_path: None,
                    path: format!("services.{name}.calls.{to}"),
                    protocol: p.protocol,
                    method: "POST".to_owned(),
                    idempotent: false,
                    idempotent_declared: None,
                    app_retries: p.code_retries,
                    policy,
                }]
            })
            .unwrap_or_default();
        services.insert(
            name.clone(),
            Service {
                name: name.clone(),
                protocol: p.protocol,
                entry: (i == 0).then_some(Entry {
                    timeout: None,
                    retries: 0,
                }),
                calls,
                copies: Vec::new(),
                copies_counted: false,
                sample: None,
                run: None,
                external: None,
                address: None,
                kubernetes: None,
                allow: hopwise_model::Allow::Any,
                allow_paths: Vec::new(),
                rate_limit: hopwise_model::rate::RateLimits::default(),
                fault: None,
                inbound: Default::default(),
                tcp: None,
                ports: Default::default(),
                upgrade: None,
                // Istio's chain: apps pass nothing on (its retries have no mark to keep).
                carries: Default::default(),
                gateway: None,
                routes: Default::default(),
            },
        );
    }
    Mesh {
        name: "fanout".to_owned(),
        trust_domain: "hopwise.local".to_owned(),
        certs: None,
        services,
        capture: Default::default(),
        observe: Default::default(),
        locations: Default::default(),
    }
}

fn failure(p: &Params) -> Failure {
    match (p.failure, p.protocol) {
        (ChainFailure::Down, _) => Failure::Down,
        (ChainFailure::Hang, _) => Failure::Hang,
        (ChainFailure::Error, Protocol::Grpc) => Failure::Unavailable,
        (ChainFailure::Error, Protocol::Http) => Failure::Http503,
    }
}

/// Attempts at the bottom and the budget ceiling, for one set of parameters.
fn count(p: &Params) -> (u64, f64, IndexMap<String, u64>) {
    let m = mesh(p);
    let names = names(p.depth);
    let (top, bottom) = (&names[0], &names[names.len() - 1]);
    match fanout::row(&m, top, bottom, failure(p)) {
        Some(row) => {
            let received = names
                .iter()
                .map(|n| (n.clone(), row.received.get(n).copied().unwrap_or(0)))
                .collect();
            let budgeted = if p.budget.is_some() {
                row.with_budgets
            } else {
                row.attempts as f64
            };
            (row.attempts, budgeted, received)
        }
        None => (0, 0.0, IndexMap::new()),
    }
}

pub fn run(p: &Params) -> Outcome {
    let (attempts, with_budget, received) = count(p);
    let values: Vec<u64> = received.values().copied().collect();
    let factors = values
        .windows(2)
        .map(|w| w[1].checked_div(w[0]).unwrap_or(0))
        .collect();
    let mut changes = Vec::new();
    let mut try_change = |label: String, q: Params| {
        let (a, b, _) = count(&q);
        let v = if q.budget.is_some() { b } else { a as f64 };
        changes.push(Change {
            change: label,
            attempts: v,
        });
    };
    for ratio in [0.2, 0.1] {
        if p.budget != Some(ratio) {
            try_change(
                format!("a {:.0}% retry budget on every proxy", ratio * 100.0),
                Params {
                    budget: Some(ratio),
                    ..p.clone()
                },
            );
        }
    }
    if !p.top_only {
        try_change(
            "only the top proxy retrying".to_owned(),
            Params {
                top_only: true,
                ..p.clone()
            },
        );
    }
    if p.code_retries == 0 {
        try_change(
            "code retries 2 per call as well".to_owned(),
            Params {
                code_retries: 2,
                ..p.clone()
            },
        );
    } else {
        try_change(
            "no code retries".to_owned(),
            Params {
                code_retries: 0,
                ..p.clone()
            },
        );
    }
    Outcome {
        bottom: names(p.depth).last().cloned().unwrap_or_default(),
        attempts,
        with_budget,
        received,
        factors,
        changes,
    }
}

fn number(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("about {v:.1}")
    }
}

pub fn text(p: &Params, o: &Outcome) -> String {
    let mut out = String::new();
    let top = o.received.keys().next().cloned().unwrap_or_default();
    out.push_str(&format!(
        "{} calls reach {} for each request at {top}",
        o.attempts, o.bottom
    ));
    if p.budget.is_some() {
        out.push_str(&format!(
            " ({} with the retry budget at steady load)",
            number(o.with_budget)
        ));
    }
    out.push('\n');
    let factors: Vec<String> = o.factors.iter().map(u64::to_string).collect();
    out.push_str(&format!("  {} = {}\n", factors.join(" × "), o.attempts));
    let proxies = if p.top_only {
        format!(
            "the top proxy tries {} time(s), the others once",
            u64::from(p.proxy_retries) + 1
        )
    } else {
        format!(
            "each proxy tries {} time(s)",
            u64::from(p.proxy_retries) + 1
        )
    };
    out.push_str(&format!(
        "  {proxies}; each service's code {} time(s)\n\n",
        u64::from(p.code_retries) + 1
    ));
    let names: Vec<&String> = o.received.keys().collect();
    let counts: Vec<String> = o.received.values().map(u64::to_string).collect();
    let widths: Vec<usize> = names
        .iter()
        .zip(&counts)
        .map(|(n, c)| n.chars().count().max(c.len()))
        .collect();
    let row = |cells: Vec<String>, sep: &str| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join(sep)
            .trim_end()
            .to_owned()
    };
    out.push_str(&format!(
        "  {}\n",
        row(names.iter().map(|s| (*s).clone()).collect(), " ─▶ ")
    ));
    out.push_str(&format!("  {}\n\n", row(counts, "    ")));
    out.push_str(&format!("What each change leaves at {}:\n", o.bottom));
    let w = o.changes.iter().map(|c| c.change.len()).max().unwrap_or(0);
    for c in &o.changes {
        out.push_str(&format!("  {:<w$}  {}\n", c.change, number(c.attempts)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bottom(p: Params) -> u64 {
        run(&p).attempts
    }

    #[test]
    fn the_seed_calculator() {
        let o = run(&Params::default());
        assert_eq!(o.attempts, 27);
        assert_eq!(o.factors, [3, 3, 3]);
        assert_eq!(
            o.received.values().copied().collect::<Vec<_>>(),
            [1, 3, 9, 27]
        );
        assert_eq!(
            bottom(Params {
                code_retries: 2,
                ..Params::default()
            }),
            729
        );
        assert_eq!(
            bottom(Params {
                top_only: true,
                ..Params::default()
            }),
            3
        );
        let b20 = run(&Params {
            budget: Some(0.2),
            ..Params::default()
        });
        assert!(
            (b20.with_budget - 1.728).abs() < 1e-9,
            "{}",
            b20.with_budget
        );
        let b10 = run(&Params {
            budget: Some(0.1),
            ..Params::default()
        });
        assert!((b10.with_budget - 1.331).abs() < 1e-9);
        let text = text(&Params::default(), &o);
        assert!(text.contains("about 1.7"), "{text}");
        assert!(text.contains("about 1.3"), "{text}");
    }

    #[test]
    fn follows_what_each_proxy_really_retries() {
        let http = |failure, codes: Vec<u16>| Params {
            protocol: Protocol::Http,
            failure,
            retriable_status_codes: codes,
            ..Params::default()
        };
        assert_eq!(bottom(http(ChainFailure::Down, vec![])), 3);
        assert_eq!(bottom(http(ChainFailure::Error, vec![])), 1);
        assert_eq!(bottom(http(ChainFailure::Error, vec![503])), 27);
        assert_eq!(
            bottom(Params {
                failure: ChainFailure::Error,
                ..Params::default()
            }),
            27
        );
        // Istio's list does not retry a hang, and with no timeout nothing ends it.
        assert_eq!(
            bottom(Params {
                failure: ChainFailure::Hang,
                ..Params::default()
            }),
            1
        );
    }
}
