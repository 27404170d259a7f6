//! Retry fan-out: for each way a service can fail, how many attempts reach it per request that
//! enters the mesh — following what each proxy really retries (its list, the call's safety) and
//! what error it passes up when it gives up (503 over HTTP, UNAVAILABLE over gRPC), with the
//! application's own retries and the bound that retry budgets put on it at steady load.
//!
//! Every call is assumed to be made once per request that reaches its caller, and a service
//! whose call fails answers with the error it got (as a gRPC service returning its client's
//! error does); a service that turns errors into something else stops the multiplying.
//!
//! The "retries exhausted" mark on a failure an app passes up always reaches the proxy above:
//! the app's own proxy links the app's failed answer to the calls it made, by trace context or
//! by time (the proxy's `link`). What else crosses an app is what its `carries` says
//! ([`hopwise_model::Carries`]): the deadline onto the calls it makes.
//! Late tries are those that start after the entry's client gave up: when it has a wait, each
//! try is placed in time from the request's arrival (back-off at its lower bound, as for hangs)
//! and those at the failing service that start at or past the wait are counted.

use std::collections::HashMap;
use std::time::Duration;

use hopwise_model::attempt::{self, Bound, Limit, Next, Skip, Trim, TryEnd};
use hopwise_model::timing::try_length;
use hopwise_model::{Call, Mesh, Outcome, Protocol};
use indexmap::IndexMap;
use serde::Serialize;

use crate::assume::assumed;

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
    /// Of `attempts`, how many start after the entry's client has given up (its
    /// `entry.timeout`; 0 when it waits forever).
    pub late: u64,
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
    /// Of the attempts at the failing service, those that start after the client gave up.
    late: u64,
}

impl Reach {
    fn add(&mut self, other: &Reach, times: u64) {
        self.late = self.late.saturating_add(other.late.saturating_mul(times));
        for (k, v) in &other.received {
            let slot = self.received.entry(k.clone()).or_default();
            *slot = slot.saturating_add(v.saturating_mul(times));
        }
    }

    fn scale(&mut self, times: u64) {
        self.late = self.late.saturating_mul(times);
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
    memo: HashMap<(String, Option<Duration>, Option<Duration>), Reach>,
    reaches: HashMap<String, bool>,
    tries: IndexMap<String, u32>,
    /// How long the entry's client waits: tries are then placed in time (from the request's
    /// arrival) to count those that start after it.
    wait: Option<Duration>,
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
    let e = mesh.services.get(entry)?.entry;
    let window = e.and_then(|e| e.timeout).map(|d| d.get());
    let mut s = Scenario::new(mesh, target, failure, window);
    if !s.reaches(entry) {
        return None;
    }
    let mut r = s.service(entry, window, window.map(|_| Duration::ZERO));
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
        late: r.late,
    })
}

/// Attempts at `target`, failing as `failure`, for one request the caller's app makes on
/// `call` under exactly its policy (a split's backend: `splits.rs`), with no deadline from
/// above: the worst case below the caller.
pub fn through(mesh: &Mesh, call: &Call, target: &str, failure: Failure) -> u64 {
    let mut s = Scenario::new(mesh, target, failure, None);
    if !s.reaches(&call.to) {
        return 0;
    }
    let r = s.call(call, None, None);
    r.received.get(target).copied().unwrap_or(0)
}

impl<'m> Scenario<'m> {
    fn new(mesh: &'m Mesh, target: &'m str, failure: Failure, wait: Option<Duration>) -> Self {
        Scenario {
            mesh,
            target,
            failure,
            memo: HashMap::new(),
            reaches: HashMap::new(),
            tries: IndexMap::new(),
            wait,
        }
    }

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

    /// One request arriving at `name` at `at` (counted from the entry's arrival, when tries are
    /// placed in time), which must answer within `window`.
    fn service(&mut self, name: &str, window: Option<Duration>, at: Option<Duration>) -> Reach {
        let key = (name.to_owned(), window, at);
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
            r.late = u64::from(matches!((at, self.wait), (Some(a), Some(w)) if a >= w));
            match self.failure {
                Failure::Down => r.answer = Some(Outcome::ConnectFailure),
                Failure::Http503 => r.answer = Some(Outcome::http(503)),
                Failure::Unavailable => {
                    r.answer = Some(Outcome::grpc(hopwise_model::GrpcCode::Unavailable))
                }
                Failure::Hang => r.time = None,
            }
        } else {
            let Some(service) = self.mesh.services.get(name) else {
                return r;
            };
            let (calls, carries, serves) =
                (service.calls.clone(), service.carries, service.protocol);
            for call in &calls {
                if !self.reaches(&call.to) {
                    continue;
                }
                // The app's calls see the deadline of the request it serves only if it gets there.
                let through = carries.passes_deadline(serves, call.protocol);
                let c = self.worst_call(call, window.filter(|_| through), at);
                r.add(&c, 1);
                r.bounded += c.bounded;
                if r.answer.is_none() {
                    r.answer = c.answer;
                    // The app's proxy marks its failed answer when the call's was.
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

    /// A call at the worst of the policies it may be made under (its own, or a rule's over
    /// it: `routes::under_rules`): the most attempts at the failing service, the call's tries
    /// the most of any.
    fn worst_call(&mut self, call: &Call, window: Option<Duration>, at: Option<Duration>) -> Reach {
        let variants = crate::routes::under_rules(self.mesh, call);
        if variants.len() == 1 {
            return self.call(call, window, at);
        }
        let label = call.label();
        let mut most = self.tries.get(&label).copied().unwrap_or(0);
        let mut worst: Option<Reach> = None;
        for v in &variants {
            // `call` writes the call's tries only when unset: unset them, keep the most.
            if let Some(n) = self.tries.get_mut(&label) {
                *n = 0;
            }
            let r = self.call(v, window, at);
            most = most.max(self.tries.get(&label).copied().unwrap_or(0));
            let hits = |r: &Reach| r.received.get(self.target).copied().unwrap_or(0);
            if worst.as_ref().is_none_or(|w| hits(&r) > hits(w)) {
                worst = Some(r);
            }
        }
        self.tries.insert(label, most);
        worst.unwrap_or_default()
    }

    /// One call made by the caller's application through its proxy, within `window`.
    fn call(&mut self, call: &Call, window: Option<Duration>, at: Option<Duration>) -> Reach {
        let p = &call.policy;
        let route = p.timeout.map(|d| d.get());
        // Reserve the call's place so the chain reads top first.
        self.tries.entry(call.label()).or_insert(0);
        let t = self.tries_of(call, window, at);
        if let Some(n) = self.tries.get_mut(&call.label())
            && *n == 0
        {
            *n = t.tries;
        }
        let mut out = t.out;
        let cut = match (route, t.elapsed) {
            (Some(r), Some(e)) => e > r,
            (Some(_), None) => true,
            _ => false,
        };
        out.time = if cut { route } else { t.elapsed };
        out.answer = if cut {
            Some(p.give_up_answer(Outcome::Timeout, call.protocol))
        } else {
            t.last.map(|o| p.give_up_answer(o, call.protocol))
        };
        // A single-hop proxy that retried marks its answer; a marked answer passed on keeps it.
        out.marked = out.answer.is_some()
            && ((p.retry.single_hop && t.tries > 1)
                || (!cut && t.last_from_below && t.below_marked));
        let factor = match p.budget {
            Some(b) => b.tries_per_request(t.tries),
            None => f64::from(t.tries),
        };
        out.bounded = factor * t.first_bounded;
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

    /// The tries a call's proxy makes within `window`, each decided as the proxy decides it
    /// ([`assumed`]): the deadline trimmed to the window, each try's timeout, the retry gate.
    fn tries_of(&mut self, call: &Call, window: Option<Duration>, at: Option<Duration>) -> Tried {
        let p = &call.policy;
        let per_try = p.per_try_timeout.map(|d| d.get());
        let mut t = Tried {
            out: Reach::default(),
            tries: 0,
            elapsed: Some(Duration::ZERO),
            last: None,
            last_from_below: false,
            below_marked: false,
            first_bounded: 0.0,
        };
        // The proxy reads its caller's deadline, and sends one on, only if it propagates them.
        let propagates = p.propagate_deadline;
        let window = window.filter(|_| propagates);
        let deadline = match attempt::trim(p.timeout.map(|d| d.get()), window) {
            Trim::Passed => return t,
            Trim::Until(d) => Some(d),
            Trim::Unbounded => None,
        };
        let mut start = Duration::ZERO;
        let mut limit = attempt::try_timeout(per_try, deadline);
        loop {
            let window = self.callee_window(call, limit, deadline, start, propagates);
            let inner = self.service(&call.to, window, at.map(|a| a.saturating_add(start)));
            t.tries += 1;
            t.out.add(&inner, 1);
            if t.tries == 1 {
                t.first_bounded = inner.bounded;
            }
            let len = try_length(per_try, inner.time);
            let outcome = match (per_try, inner.time) {
                (Some(t), Some(b)) if t < b => Some(Outcome::Timeout),
                (Some(_), None) => Some(Outcome::Timeout),
                _ => inner.answer,
            };
            t.last_from_below = outcome == inner.answer && outcome != Some(Outcome::ConnectFailure);
            t.below_marked = t.last_from_below && inner.marked;
            t.elapsed = match (t.elapsed, len) {
                (Some(e), Some(l)) => Some(e.saturating_add(l)),
                _ => None,
            };
            t.last = outcome;
            let Some(o) = outcome else { break };
            let Some(l) = len else { break };
            let end = TryEnd {
                attempt: t.tries,
                outcome: o,
                // The outcome as this pass derives it: a timeout is the per-try timeout's (a
                // window that closes first is seen at the next try's start).
                limit: per_try.map(|time| Limit {
                    time,
                    bound: Bound::PerTry,
                }),
                safe: call.idempotent,
                marked: t.below_marked,
                replayable: true,
                left: deadline.map(|d| Limit {
                    time: d.time.saturating_sub(start.saturating_add(l)),
                    ..d
                }),
            };
            let (delay, next) = match assumed(p, &end) {
                Next::Retry { delay, timeout } => (delay, timeout),
                Next::Skip(Skip::Deadline) => {
                    // The back-off before the closed window is counted, as an upper bound.
                    t.elapsed = t
                        .elapsed
                        .map(|e| e.saturating_add(p.retry.backoff.upper(t.tries)));
                    break;
                }
                Next::Skip(_) | Next::Done => break,
            };
            let step = l.saturating_add(delay);
            if step.is_zero() {
                // Every remaining try starts at the same instant with the same window, so it
                // sees exactly what this one saw: count them at once (retry counts can be huge).
                let rest = p.retry.count - (t.tries - 1);
                t.out.add(&inner, u64::from(rest));
                let backoff_total = p.retry.backoff.total_upper(p.retry.count.saturating_add(1));
                t.elapsed = t.elapsed.map(|e| e.saturating_add(backoff_total));
                t.tries = p.retry.count.saturating_add(1);
                break;
            }
            start = start.saturating_add(step);
            limit = next;
            t.elapsed = t
                .elapsed
                .map(|e| e.saturating_add(p.retry.backoff.upper(t.tries)));
        }
        t
    }
}

impl Scenario<'_> {
    /// The time the callee's own calls get from one try (if its app lets it reach them): what
    /// the proxy sends on, the request's time left as the try starts (`propagates`); but when
    /// the callee's proxy links its app's calls, the try's own end ends them too (its caller
    /// goes away), so they get no longer than the try.
    fn callee_window(
        &self,
        call: &Call,
        limit: Option<Limit>,
        deadline: Option<Limit>,
        start: Duration,
        propagates: bool,
    ) -> Option<Duration> {
        let linked = (self.mesh.services.get(&call.to)).is_some_and(|s| s.carries.linked());
        if linked {
            limit.map(|l| l.time)
        } else if propagates {
            deadline.map(|d| d.time.saturating_sub(start))
        } else {
            None
        }
    }
}

/// What one call's tries came to, before its proxy gives up.
struct Tried {
    out: Reach,
    tries: u32,
    /// How long they took (back-off at its upper bounds); `None`: never ends.
    elapsed: Option<Duration>,
    last: Option<Outcome>,
    /// The last outcome is the callee's own answer (not a timeout or a refused connection).
    last_from_below: bool,
    below_marked: bool,
    /// What the first try reached with budgets bounding it.
    first_bounded: f64,
}

#[cfg(test)]
mod tests;
