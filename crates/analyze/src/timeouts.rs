//! Timeout budgets: for every call, what happens when everything below it hangs — how many tries
//! the proxy makes (per its retry list), how long the call can take, how much of it fits in the
//! time its caller gives, and the per-try timeout that would fit. A delay a service's proxies
//! inject (`fault.delay`) adds to the time it takes to answer.

use std::time::Duration;

use hopwise_model::attempt::{Bound, Limit, Next, TryEnd};
use hopwise_model::timing::{largest_per_try, times, tries_that_fit, try_length, worst_case};
use hopwise_model::{Call, Mesh, Outcome, Service};
use indexmap::IndexMap;
use serde::Serialize;

use crate::assume::assumed;

/// How a service answers its caller when everything below it hangs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hung {
    /// When the service answers; `None`: never.
    pub time: Option<Duration>,
    /// What it answers (the error its proxy gave it, passed up unchanged).
    pub answer: Option<Outcome>,
    /// The answer carries a single-hop proxy's "retries exhausted" mark.
    pub marked: bool,
}

/// One call's timeout budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallTiming {
    pub call: String,
    pub path: String,
    pub per_try_timeout: Option<Duration>,
    pub timeout: Option<Duration>,
    /// Tries configured (first + retries).
    pub tries: u32,
    /// Tries actually made when everything below hangs (a list that cannot retry what the
    /// hang produces makes one).
    pub tries_when_hung: u32,
    /// How each try ends: `per-try timeout`, or the callee's own answer.
    pub try_ends_with: String,
    /// Length of one try; `None`: never ends.
    pub try_length: Option<Duration>,
    /// The worst case of this call, application retries included; `None`: never ends.
    pub worst_case: Option<Duration>,
    /// The time the caller gives this call, per its own try (or the outside client's wait).
    pub caller_window: Option<Duration>,
    /// Of this call's tries, how many finish inside the caller's window.
    pub tries_that_fit: u32,
    /// The largest per-try timeout that would let every try fit the caller's window.
    pub largest_fitting_per_try: Option<Duration>,
    /// Of the callee's slowest call, how many tries fit in one try of this call (and of how many).
    pub callee_tries_that_fit: Option<(u32, u32)>,
}

/// The budget of requests entering the mesh at one service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntryTiming {
    pub service: String,
    pub client_waits: Option<Duration>,
    pub client_retries: u32,
    pub worst_case: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeouts {
    pub calls: Vec<CallTiming>,
    pub entries: Vec<EntryTiming>,
}

struct Analysis<'m> {
    mesh: &'m Mesh,
    hung: IndexMap<String, Hung>,
    calls: IndexMap<String, CallTiming>,
}

pub fn analyze(mesh: &Mesh) -> Timeouts {
    let mut a = Analysis::new(mesh);
    for name in mesh.services.keys() {
        a.service(name);
    }
    // The window each service's calls must fit: the outside client's wait for entries, else
    // the smallest per-try window among the calls into the service.
    let mut windows: IndexMap<&str, Option<Duration>> = IndexMap::new();
    for s in mesh.services.values() {
        let incoming: Vec<Option<Duration>> = mesh
            .calls()
            .filter(|c| c.to == s.name)
            .map(|c| c.policy.try_window())
            .chain(s.entry.map(|e| e.timeout.map(|d| d.get())))
            .collect();
        let window = incoming.iter().flatten().min().copied();
        windows.insert(&s.name, window);
    }
    let mut calls = Vec::new();
    for call in mesh.calls() {
        let Some(mut t) = a.calls.get(&call.path).cloned() else {
            continue;
        };
        let window = windows.get(call.from.as_str()).copied().flatten();
        t.caller_window = window;
        if let Some(w) = window {
            let backoff = call.policy.retry.backoff;
            t.tries_that_fit = tries_that_fit(Some(w), t.tries_when_hung, t.try_length, &backoff);
            t.largest_fitting_per_try = largest_per_try(w, t.tries_when_hung, &backoff);
        } else {
            t.tries_that_fit = t.tries_when_hung;
        }
        t.callee_tries_that_fit = a.slowest_call(&call.to).map(|inner| {
            let fit = tries_that_fit(
                call.policy.try_window(),
                inner.tries_when_hung,
                inner.try_length,
                &a.backoff_of(&inner.path),
            );
            (fit, inner.tries_when_hung)
        });
        calls.push(t);
    }
    let entries = mesh
        .entries()
        .into_iter()
        .map(|s| EntryTiming {
            service: s.name.clone(),
            client_waits: s.entry.and_then(|e| e.timeout).map(|d| d.get()),
            client_retries: s.entry.map_or(0, |e| e.retries),
            worst_case: a.hung.get(&s.name).and_then(|h| h.time),
        })
        .collect();
    Timeouts { calls, entries }
}

/// One call under exactly its policy (a split's backend under its rule's: `splits.rs`), when
/// everything below it hangs; the calls below are counted as the table counts them.
pub fn timing(mesh: &Mesh, call: &Call) -> CallTiming {
    let mut a = Analysis::new(mesh);
    a.under(call).1
}

impl<'m> Analysis<'m> {
    fn new(mesh: &'m Mesh) -> Self {
        Analysis {
            mesh,
            hung: IndexMap::new(),
            calls: IndexMap::new(),
        }
    }

    fn service(&mut self, name: &str) -> Hung {
        if let Some(h) = self.hung.get(name) {
            return *h;
        }
        let Some(service) = self.mesh.services.get(name) else {
            return Hung {
                time: None,
                answer: None,
                marked: false,
            };
        };
        let mut hung = if service.calls.is_empty() {
            // A leaf: this is what hangs.
            Hung {
                time: None,
                answer: None,
                marked: false,
            }
        } else {
            self.slowest(service)
        };
        // A delay its own proxies inject (`fault`) comes before its app sees the request; at
        // worst a request is one delayed (any percent above 0, a header-only fault too).
        if let Some(d) = (service.fault.as_ref().and_then(|f| f.delay)).filter(|d| d.percent > 0) {
            hung.time = hung.time.map(|t| t.saturating_add(d.time));
        }
        self.hung.insert(name.to_owned(), hung);
        hung
    }

    /// A service answers when its slowest call gives up, with that call's answer.
    fn slowest(&mut self, service: &Service) -> Hung {
        let mut slowest: Option<Hung> = None;
        for call in &service.calls {
            let h = self.call(call);
            slowest = Some(match slowest {
                None => h,
                Some(s) => match (s.time, h.time) {
                    (_, None) => h,
                    (None, _) => s,
                    (Some(a), Some(b)) if b > a => h,
                    _ => s,
                },
            });
        }
        slowest.unwrap_or(Hung {
            time: None,
            answer: None,
            marked: false,
        })
    }

    /// A call at the worst of the policies it may be made under (its own, or a rule's over
    /// it: `routes::under_rules`): the longest worst case (the time its caller waits when
    /// everything below hangs), then the most tries; the tries configured are the most of any.
    fn call(&mut self, call: &Call) -> Hung {
        let mut worst: Option<(Hung, CallTiming)> = None;
        for variant in crate::routes::under_rules(self.mesh, call) {
            let (h, t) = self.under(&variant);
            let tries = worst.as_ref().map_or(0, |(_, w)| w.tries).max(t.tries);
            let longer = |w: &CallTiming| {
                let rank =
                    |t: &CallTiming| (t.worst_case.unwrap_or(Duration::MAX), t.tries_when_hung);
                rank(&t) > rank(w)
            };
            if worst.as_ref().is_none_or(|(_, w)| longer(w)) {
                worst = Some((h, t));
            }
            if let Some((_, w)) = &mut worst {
                w.tries = tries;
            }
        }
        let (hung, timing) = worst.unwrap_or_else(|| self.under(call));
        self.calls.insert(call.path.clone(), timing);
        hung
    }

    /// A call under its own policy, when everything below it hangs.
    fn under(&mut self, call: &Call) -> (Hung, CallTiming) {
        let below = self.service(&call.to);
        let p = &call.policy;
        let per_try = p.per_try_timeout.map(|d| d.get());
        let timed_out = match (per_try, below.time) {
            (Some(t), Some(b)) => t < b,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let outcome = if timed_out {
            Some(Outcome::Timeout)
        } else {
            below.answer
        };
        let from_below = !timed_out && below.answer.is_some();
        // Every try ends as the first (everything below hangs alike): all are made if the
        // first is retried. No deadline here: the route timeout cuts the worst case below.
        let first = outcome.map(|o| TryEnd {
            attempt: 1,
            outcome: o,
            limit: per_try.map(|time| Limit {
                time,
                bound: Bound::PerTry,
            }),
            safe: call.idempotent,
            marked: from_below && below.marked,
            replayable: true,
            left: None,
        });
        let retried = first.is_some_and(|t| matches!(assumed(p, &t), Next::Retry { .. }));
        let tries = if retried { p.tries() } else { 1 };
        // A try lasts until the callee answers or a timeout (per-try or route) cuts it.
        let len = try_length(p.try_window(), below.time);
        let route = p.timeout.map(|d| d.get());
        let proxy_worst = worst_case(tries, len, &p.retry.backoff, route);
        let cut_by_route = match (route, len) {
            (Some(r), Some(l)) => {
                times(l, tries).saturating_add(p.retry.backoff.total_upper(tries)) > r
            }
            (Some(_), None) => true,
            _ => false,
        };
        let answer = if cut_by_route {
            Some(p.give_up_answer(Outcome::Timeout, call.protocol))
        } else {
            outcome.map(|o| p.give_up_answer(o, call.protocol))
        };
        // The application's own retries repeat the whole proxied call.
        let worst = proxy_worst.map(|w| times(w, call.app_retries.saturating_add(1)));
        let ends = match outcome {
            Some(Outcome::Timeout) => "per-try timeout".to_owned(),
            Some(o) => format!("{o} from {}", call.to),
            None if cut_by_route => "route timeout".to_owned(),
            None => "never".to_owned(),
        };
        let timing = CallTiming {
            call: call.label(),
            path: call.path.clone(),
            per_try_timeout: per_try,
            timeout: route,
            tries: p.tries(),
            tries_when_hung: tries,
            try_ends_with: ends,
            try_length: len,
            worst_case: worst,
            caller_window: None,
            tries_that_fit: tries,
            largest_fitting_per_try: None,
            callee_tries_that_fit: None,
        };
        let marked = answer.is_some()
            && ((p.retry.single_hop && tries > 1) || (!cut_by_route && from_below && below.marked));
        let hung = Hung {
            time: worst,
            answer,
            marked,
        };
        (hung, timing)
    }

    /// The timing of the slowest call a service makes (the one that decides its answer).
    fn slowest_call(&self, service: &str) -> Option<CallTiming> {
        let s = self.mesh.services.get(service)?;
        s.calls
            .iter()
            .filter_map(|c| self.calls.get(&c.path))
            .max_by_key(|t| t.worst_case.unwrap_or(Duration::MAX))
            .cloned()
    }

    fn backoff_of(&self, path: &str) -> hopwise_model::Backoff {
        self.mesh
            .calls()
            .find(|c| c.path == path)
            .map_or(hopwise_model::Backoff::ENVOY, |c| c.policy.retry.backoff)
    }
}

#[cfg(test)]
mod tests;
