//! The arithmetic of one request's tries, written once: the deadline (the route timeout trimmed
//! to what the caller has left), each try's timeout, the gate that decides whether a failed try
//! is retried (and if not, why), and the retry budget's rule. The proxy runs these on every
//! request; `hopwise check` runs them on what it assumes, so the two cannot disagree.
//!
//! Pure: no clock. Times come in as `Duration`s measured by the caller (time left, not
//! instants), and what the gate needs from run-time state — the budget, a `max_retries` place,
//! a random draw — it asks for through [`Spend`], only once the checks before it have passed.

use std::time::Duration;

use crate::policy::{Budget, Decision, Outcome, Policy};

/// Whose limit ends a try, or a request, when it runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    /// The try's own `per_try_timeout`: the try failed, and may be retried.
    PerTry,
    /// The route's `timeout`: the request is over.
    Route,
    /// The deadline the caller propagated: the request is over.
    Caller,
}

/// A span of time and whose limit it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    pub time: Duration,
    pub bound: Bound,
}

/// A request's deadline, as [`trim`] decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trim {
    /// No route timeout and no deadline from the caller.
    Unbounded,
    /// The request must be done within this (bound `Route` or `Caller`).
    Until(Limit),
    /// No time is left already: answer at once and start nothing upstream.
    Passed,
}

/// The deadline: the route timeout, trimmed to what the caller has left when it said (and the
/// policy propagates deadlines: the caller of this function decides whether to pass it). The
/// caller's time wins only when strictly shorter.
pub fn trim(route: Option<Duration>, callers: Option<Duration>) -> Trim {
    let limit = match (route, callers) {
        (Some(r), Some(c)) if c < r => Limit {
            time: c,
            bound: Bound::Caller,
        },
        (None, Some(c)) => Limit {
            time: c,
            bound: Bound::Caller,
        },
        (Some(r), _) => Limit {
            time: r,
            bound: Bound::Route,
        },
        (None, None) => return Trim::Unbounded,
    };
    if limit.time.is_zero() {
        Trim::Passed
    } else {
        Trim::Until(limit)
    }
}

/// One try's timeout: the shorter of the per-try timeout and the time the request has left
/// (`left`, bound `Route` or `Caller`). On a tie the request's limit names it: when it fires the
/// request is over, not just the try. `None`: nothing bounds the try.
pub fn try_timeout(per_try: Option<Duration>, left: Option<Limit>) -> Option<Limit> {
    match (per_try, left) {
        (Some(p), Some(l)) if p < l.time => Some(Limit {
            time: p,
            bound: Bound::PerTry,
        }),
        (Some(p), None) => Some(Limit {
            time: p,
            bound: Bound::PerTry,
        }),
        (_, Some(l)) => Some(l),
        (None, None) => None,
    }
}

impl Policy {
    /// The longest one try can last, when no caller's deadline trims it: [`try_timeout`] of the
    /// per-try timeout and the route timeout.
    pub fn try_window(&self) -> Option<Duration> {
        let route = self.timeout.map(|d| Limit {
            time: d.get(),
            bound: Bound::Route,
        });
        try_timeout(self.per_try_timeout.map(|d| d.get()), route).map(|l| l.time)
    }
}

/// Why a failed try is not retried, in the order the gate checks. [`Skip::label`] is the
/// proxy's `hopwise_retries_skipped_total{reason}` label (none for the list and the count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skip {
    /// No condition in `retries.on` matches the outcome.
    NotListed,
    /// `only_if_safe`, and the request may have been processed and is not safe to repeat.
    Unsafe,
    /// `single_hop`, and the answer carries a proxy below's "retries exhausted" mark.
    RetriedBelow,
    /// No retries left (none configured, or all made).
    Count,
    /// The request body outgrew the replay buffer.
    Replay,
    /// The retry budget is spent.
    Budget,
    /// `limits.max_retries` retries are in flight already.
    MaxRetries,
    /// The back-off would outlast the time left.
    Deadline,
}

impl Skip {
    /// The `reason` label the proxy counts the skip under.
    pub fn label(self) -> Option<&'static str> {
        match self {
            Skip::NotListed | Skip::Count => None,
            Skip::Unsafe => Some("unsafe"),
            Skip::RetriedBelow => Some("retried-below"),
            Skip::Replay => Some("body-too-large"),
            Skip::Budget => Some("budget"),
            Skip::MaxRetries => Some("limit"),
            Skip::Deadline => Some("deadline"),
        }
    }

    /// A retry refused by the budget or a cap: the answer is marked as if retried, so the hops
    /// above do not make the retry this one was told not to make.
    pub fn sheds(self) -> bool {
        matches!(self, Skip::Budget | Skip::MaxRetries)
    }
}

/// How one try ended, as the gate needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TryEnd {
    /// Tries made so far, this one included (1 for the first).
    pub attempt: u32,
    pub outcome: Outcome,
    /// The try's timeout ([`try_timeout`]); `None`: it had none.
    pub limit: Option<Limit>,
    /// The request is safe to repeat (idempotent, or an `Idempotency-Key` honoured).
    pub safe: bool,
    /// The answer carries another proxy's "retries exhausted" mark.
    pub marked: bool,
    /// The request's body can still be sent again.
    pub replayable: bool,
    /// The request's deadline as the try ends: the time left and whose; `None`: no deadline.
    pub left: Option<Limit>,
}

/// What follows a try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait `delay`, then try again bounded by `timeout` ([`try_timeout`] on what will be left).
    Retry {
        delay: Duration,
        timeout: Option<Limit>,
    },
    /// The answer goes to the caller: the try succeeded, or the request's own deadline (the
    /// route timeout, the caller's) ended it, which is never retried (Envoy).
    Done,
    /// A failed try that is not retried, and why.
    Skip(Skip),
}

/// What a retry takes from run-time state. Asked in this order, each only once the checks
/// before it have passed (taking from the budget spends it).
pub trait Spend {
    /// Takes one retry from the retry budget; `false`: spent. (No budget: `true`.)
    fn budget(&mut self) -> bool;
    /// Takes a `limits.max_retries` place; `false`: the cap is reached.
    fn retry_place(&mut self) -> bool;
    /// A uniformly random number for the back-off draw ([`crate::Backoff::delay`]).
    fn jitter(&mut self) -> u64;
}

/// [`Spend`] with answers fixed in advance: what the analyser assumes, and what tests feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Given {
    pub budget: bool,
    pub retry_place: bool,
    pub jitter: u64,
}

impl Given {
    /// The budget and the caps allow every retry; the back-off at its lower bound (a jitter of
    /// 0 draws each strategy's shortest wait).
    pub fn allow() -> Given {
        Given {
            budget: true,
            retry_place: true,
            jitter: 0,
        }
    }
}

impl Spend for Given {
    fn budget(&mut self) -> bool {
        self.budget
    }
    fn retry_place(&mut self) -> bool {
        self.retry_place
    }
    fn jitter(&mut self) -> u64 {
        self.jitter
    }
}

/// The retry gate: after a try ending as `t`, is another made, and if not, why? Checked in the
/// order of `docs/resilience.md`: the retry list, safety, the single-hop mark (all three
/// [`crate::Retry::decide_marked`]), the count, the replay buffer, the budget, `max_retries`,
/// and whether the back-off fits in the time left.
pub fn next(policy: &Policy, t: &TryEnd, spend: &mut impl Spend) -> Next {
    let retry = &policy.retry;
    // An answer below 500 is a success, unless it is a 4xx the rule names (`retriable-4xx`, a
    // 429 in `status_codes`), as Envoy retries the codes it is given. Asked of a 4xx only: the
    // rule's conditions looked up on every 2xx cost ~500 instructions a request (measured).
    let named_4xx = matches!(
        t.outcome,
        Outcome::Response {
            status: 400..=499,
            grpc: None
        }
    ) && retry.matches(t.outcome);
    if (t.outcome.is_success() && !named_4xx) || ended_by_deadline(t) {
        return Next::Done;
    }
    let skip = match retry.decide_marked(t.outcome, t.safe, t.marked) {
        Decision::Retry => None,
        Decision::NotListed => Some(Skip::NotListed),
        Decision::Unsafe => Some(Skip::Unsafe),
        Decision::RetriedBelow => Some(Skip::RetriedBelow),
        Decision::NoRetries => Some(Skip::Count),
    }
    .or_else(|| (t.attempt > retry.count).then_some(Skip::Count))
    .or_else(|| (!t.replayable).then_some(Skip::Replay))
    .or_else(|| (!spend.budget()).then_some(Skip::Budget))
    .or_else(|| (!spend.retry_place()).then_some(Skip::MaxRetries));
    if let Some(s) = skip {
        return Next::Skip(s);
    }
    let delay = retry.backoff.delay(t.attempt, spend.jitter());
    if t.left.is_some_and(|l| l.time <= delay) {
        return Next::Skip(Skip::Deadline);
    }
    let left = t.left.map(|l| Limit {
        time: l.time - delay,
        ..l
    });
    Next::Retry {
        delay,
        timeout: try_timeout(policy.per_try_timeout.map(|d| d.get()), left),
    }
}

/// The try timed out on the request's limit, not its own.
fn ended_by_deadline(t: &TryEnd) -> bool {
    t.outcome == Outcome::Timeout && t.limit.is_some_and(|l| l.bound != Bound::PerTry)
}

impl Budget {
    /// Retries the budget allows over a `window` in which `requests` requests arrived:
    /// `ratio × requests`, plus the floor `min_per_second × window`.
    pub fn retries_allowed(&self, requests: u64, window: Duration) -> f64 {
        f64::from(self.min_per_second) * window.as_secs_f64() + self.ratio * requests as f64
    }

    /// May one more retry go, `retries` having gone already in that window?
    pub fn allows(&self, requests: u64, retries: u64, window: Duration) -> bool {
        (retries as f64) + 1.0 <= self.retries_allowed(requests, window)
    }

    /// Tries per request through a budget at steady load, where the floor's share vanishes: at
    /// most `1 + ratio`, and never more than the policy's `tries`.
    pub fn tries_per_request(&self, tries: u32) -> f64 {
        f64::from(tries).min(1.0 + self.retries_allowed(1, Duration::ZERO))
    }
}

#[cfg(test)]
mod tests;
