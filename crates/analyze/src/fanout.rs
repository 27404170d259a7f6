//! Retry fan-out: for each way a service can fail, how many attempts reach it per request that
//! enters the mesh — following what each proxy really retries (its list, the call's safety) and
//! what error it passes up when it gives up (503 over HTTP, UNAVAILABLE over gRPC), with the
//! application's own retries and the bound that retry budgets put on it at steady load.
//!
//! Every call is assumed to be made once per request that reaches its caller, and a service
//! whose call fails answers with the error it got (as a gRPC service returning its client's
//! error does); a service that turns errors into something else stops the multiplying.

use std::collections::HashMap;
use std::time::Duration;

use hopwise_model::timing::try_length;
use hopwise_model::{Call, Decision, Mesh, Outcome, Protocol};
use indexmap::IndexMap;
use serde::Serialize;

/// How the failing service fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Failure {
    /// Down: connections are refused.
    Down,
    /// Answers HTTP 503 at once.
    Http503,
    /// Answers gRPC UNAVAILABLE at once.
    Unavailable,
    /// Accepts requests and never answers.
    Hang,
}

impl Failure {
    pub fn label(self) -> &'static str {
        match self {
            Failure::Down => "is down (connection refused)",
            Failure::Http503 => "answers HTTP 503",
            Failure::Unavailable => "answers gRPC UNAVAILABLE",
            Failure::Hang => "hangs",
        }
    }

    /// The failures worth asking about for a service speaking `protocol`.
    pub fn for_protocol(protocol: Protocol) -> [Failure; 3] {
        match protocol {
            Protocol::Http => [Failure::Down, Failure::Http503, Failure::Hang],
            Protocol::Grpc => [Failure::Down, Failure::Unavailable, Failure::Hang],
        }
    }
}

/// Attempts reaching one failing service for one request entering the mesh.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FanoutRow {
    pub entry: String,
    pub service: String,
    pub failure: Failure,
    pub attempts: u64,
    /// The ceiling when every budgeted call stays within its budget (steady load).
    pub with_budgets: f64,
    /// What the outside client finally gets.
    pub client_gets: Option<String>,
    /// Requests (or connection attempts) each service on the way receives.
    pub received: IndexMap<String, u64>,
    /// Tries each call on the way makes, in the order the request travels.
    pub tries: IndexMap<String, u32>,
}

#[derive(Debug, Clone, Default)]
struct Reach {
    received: IndexMap<String, u64>,
    bounded: f64,
    /// What the service (or call) answers; `None`: success.
    answer: Option<Outcome>,
    /// When it answers; `None`: never.
    time: Option<Duration>,
    /// The answer carries a "retries exhausted" mark (a `single_hop` proxy retried already).
    marked: bool,
}

impl Reach {
    fn add(&mut self, other: &Reach, times: u64) {
        for (k, v) in &other.received {
            let slot = self.received.entry(k.clone()).or_default();
            *slot = slot.saturating_add(v.saturating_mul(times));
        }
    }

    fn scale(&mut self, times: u64) {
        for v in self.received.values_mut() {
            *v = v.saturating_mul(times);
        }
        self.bounded *= times as f64;
    }
}

struct Scenario<'m> {
    mesh: &'m Mesh,
    target: &'m str,
    failure: Failure,
    memo: HashMap<(String, Option<Duration>), Reach>,
    reaches: HashMap<String, bool>,
    tries: IndexMap<String, u32>,
}

/// Every (entry, failing service, failure) row of the mesh.
pub fn analyze(mesh: &Mesh) -> Vec<FanoutRow> {
    let mut rows = Vec::new();
    for entry in mesh.entries() {
        for target in mesh.services.values() {
            if target.name == entry.name {
                continue;
            }
            for failure in Failure::for_protocol(target.protocol) {
                if let Some(row) = row(mesh, &entry.name, &target.name, failure) {
                    rows.push(row);
                }
            }
        }
    }
    rows
}

/// The row for one failure, or `None` when `target` cannot be reached from `entry`.
pub fn row(mesh: &Mesh, entry: &str, target: &str, failure: Failure) -> Option<FanoutRow> {
    let mut s = Scenario {
        mesh,
        target,
        failure,
        memo: HashMap::new(),
        reaches: HashMap::new(),
        tries: IndexMap::new(),
    };
    if !s.reaches(entry) {
        return None;
    }
    let e = mesh.services.get(entry)?.entry;
    let window = e.and_then(|e| e.timeout).map(|d| d.get());
    let mut r = s.service(entry, window);
    let client_retries = e.map_or(0, |e| e.retries);
    if r.answer.is_some() && r.time.is_some() {
        r.scale(u64::from(client_retries) + 1);
    }
    Some(FanoutRow {
        entry: entry.to_owned(),
        service: target.to_owned(),
        failure,
        attempts: r.received.get(target).copied().unwrap_or(0),
        with_budgets: r.bounded,
        client_gets: match (r.answer, r.time) {
            (_, None) => Some("no answer".to_owned()),
            (Some(o), _) => Some(o.to_string()),
            (None, _) => None,
        },
        received: r.received,
        tries: s.tries,
    })
}

impl Scenario<'_> {
    fn reaches(&mut self, from: &str) -> bool {
        if from == self.target {
            return true;
        }
        if let Some(r) = self.reaches.get(from) {
            return *r;
        }
        let callees: Vec<String> = self
            .mesh
            .services
            .get(from)
            .map(|s| s.calls.iter().map(|c| c.to.clone()).collect())
            .unwrap_or_default();
        let r = callees.iter().any(|c| self.reaches(c));
        self.reaches.insert(from.to_owned(), r);
        r
    }

    /// One request arriving at `name`, which must answer within `window`.
    fn service(&mut self, name: &str, window: Option<Duration>) -> Reach {
        let key = (name.to_owned(), window);
        if let Some(r) = self.memo.get(&key) {
            return r.clone();
        }
        let mut r = Reach {
            bounded: 0.0,
            time: Some(Duration::ZERO),
            ..Reach::default()
        };
        r.received.insert(name.to_owned(), 1);
        if name == self.target {
            r.bounded = 1.0;
            match self.failure {
                Failure::Down => r.answer = Some(Outcome::ConnectFailure),
                Failure::Http503 => r.answer = Some(Outcome::http(503)),
                Failure::Unavailable => {
                    r.answer = Some(Outcome::grpc(hopwise_model::GrpcCode::Unavailable))
                }
                Failure::Hang => r.time = None,
            }
        } else {
            let calls: Vec<Call> = self
                .mesh
                .services
                .get(name)
                .map(|s| s.calls.clone())
                .unwrap_or_default();
            for call in &calls {
                if !self.reaches(&call.to) {
                    continue;
                }
                let c = self.call(call, window);
                r.add(&c, 1);
                r.bounded += c.bounded;
                if r.answer.is_none() {
                    r.answer = c.answer;
                    r.marked = c.marked;
                }
                r.time = match (r.time, c.time) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
        }
        self.memo.insert(key, r.clone());
        r
    }

    /// One call made by the caller's application through its proxy, within `window`.
    fn call(&mut self, call: &Call, window: Option<Duration>) -> Reach {
        let p = &call.policy;
        let per_try = p.per_try_timeout.map(|d| d.get());
        let route = p.timeout.map(|d| d.get());
        let w = match (window, route) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Reserve the call's place so the chain reads top first.
        self.tries.entry(call.label()).or_insert(0);
        let mut out = Reach::default();
        let mut start = Duration::ZERO;
        let mut elapsed = Some(Duration::ZERO);
        let mut last: Option<Outcome> = None;
        let mut last_from_below = false;
        let mut below_marked = false;
        let mut tries = 0u32;
        let mut first_bounded = 0.0;
        loop {
            if let Some(w) = w
                && start >= w
            {
                break;
            }
            let try_window = match (per_try, w.map(|w| w - start)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let inner = self.service(&call.to, try_window);
            tries += 1;
            out.add(&inner, 1);
            if tries == 1 {
                first_bounded = inner.bounded;
            }
            let len = try_length(per_try, inner.time);
            let outcome = match (per_try, inner.time) {
                (Some(t), Some(b)) if t < b => Some(Outcome::Timeout),
                (Some(_), None) => Some(Outcome::Timeout),
                _ => inner.answer,
            };
            last_from_below = outcome == inner.answer && outcome != Some(Outcome::ConnectFailure);
            below_marked = last_from_below && inner.marked;
            elapsed = match (elapsed, len) {
                (Some(e), Some(l)) => Some(e.saturating_add(l)),
                _ => None,
            };
            last = outcome;
            let Some(o) = outcome else { break };
            let Some(l) = len else { break };
            if tries > p.retry.count
                || p.retry.decide_marked(o, call.idempotent, below_marked) != Decision::Retry
            {
                break;
            }
            let step = l.saturating_add(p.retry.backoff.lower(tries));
            if step.is_zero() && w.is_none_or(|w| !w.is_zero()) {
                // Every remaining try starts at the same instant with the same window, so it
                // sees exactly what this one saw: count them at once (retry counts can be huge).
                let rest = p.retry.count - (tries - 1);
                out.add(&inner, u64::from(rest));
                let backoff_total = p.retry.backoff.total_upper(p.retry.count.saturating_add(1));
                elapsed = elapsed.map(|e| e.saturating_add(backoff_total));
                tries = p.retry.count.saturating_add(1);
                break;
            }
            start = start.saturating_add(step);
            elapsed = elapsed.map(|e| e.saturating_add(p.retry.backoff.upper(tries)));
        }
        if let Some(t) = self.tries.get_mut(&call.label())
            && *t == 0
        {
            *t = tries;
        }
        let cut = match (route, elapsed) {
            (Some(r), Some(e)) => e > r,
            (Some(_), None) => true,
            _ => false,
        };
        out.time = if cut { route } else { elapsed };
        out.answer = if cut {
            Some(p.give_up_answer(Outcome::Timeout, call.protocol))
        } else {
            last.map(|o| p.give_up_answer(o, call.protocol))
        };
        // A single-hop proxy that retried marks its answer; a marked answer passed on keeps it.
        out.marked = out.answer.is_some()
            && ((p.retry.single_hop && tries > 1) || (!cut && last_from_below && below_marked));
        let factor = match p.budget {
            Some(b) => (f64::from(tries)).min(1.0 + b.ratio),
            None => f64::from(tries),
        };
        out.bounded = factor * first_bounded;
        // The application's own retries repeat the whole proxied call when it fails.
        if out.answer.is_some_and(|o| !o.is_success()) && out.time.is_some() && call.app_retries > 0
        {
            let times = u64::from(call.app_retries) + 1;
            out.scale(times);
            out.time = out
                .time
                .map(|t| hopwise_model::timing::times(t, call.app_retries.saturating_add(1)));
        }
        out
    }
}

#[cfg(test)]
mod tests;
