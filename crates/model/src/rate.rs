//! The arithmetic of a local rate limit (issue 29: per service, per route, per calling
//! identity, on the callee's inbound side): a token bucket of `burst` requests refilled at `rate`
//! a second, kept as one number — the time the bucket will be full again, GCRA's "theoretical
//! arrival time" — so a check is a comparison and an add, with no float drift. A request the
//! bucket refuses learns when one would be let through (`Retry-After`, whole seconds up).
//!
//! Pure, no clock: the time is the caller's, a [`Duration`] since any fixed start (the proxy's
//! clock, which a test pauses). Which bucket a request draws from, and the 429, are the proxy's.
//!
//! [`RateLimits`] is `services.<name>.inbound.rate_limit` resolved: each name it gives checked
//! against the mesh (a caller must be a service, a route one its callers' `routes` name).

use std::time::Duration;

use indexmap::IndexMap;
use serde::Serialize;

use crate::diag::Diagnostic;
use crate::raw::{RawLimit, RawRateLimit, RawService};
use crate::read::Locations;

/// A limit as written: `rate` requests a second on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limit {
    /// At least 1.
    pub rate: u32,
    /// At least 1: the requests let through at once after a quiet spell.
    pub burst: u32,
}

impl Limit {
    /// The time one request's token takes to come back (1 s / rate).
    fn interval(self) -> u128 {
        NANOS_PER_SEC / u128::from(self.rate.max(1))
    }
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// One bucket's state: empty at first use means full (a new bucket lets a burst through).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bucket {
    /// When the bucket is full again, in nanoseconds on the caller's clock.
    full_at: u128,
}

/// What the bucket says to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refused; one request would be let through after this long.
    Deny {
        retry_after: Duration,
    },
}

impl Verdict {
    /// `Retry-After` in whole seconds, rounded up, at least 1 (the header has no fractions).
    pub fn retry_after_secs(self) -> Option<u64> {
        match self {
            Verdict::Allow => None,
            Verdict::Deny { retry_after } => {
                let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                Some(secs.max(1))
            }
        }
    }
}

impl Bucket {
    /// One request at `now`: let through (a token taken) or refused (nothing taken).
    pub fn take(&mut self, limit: Limit, now: Duration) -> Verdict {
        let verdict = self.check(limit, now);
        if verdict == Verdict::Allow {
            self.full_at = self.full_at.max(now.as_nanos()) + limit.interval();
        }
        verdict
    }

    /// What [`Bucket::take`] would say at `now`, taking nothing: a request several buckets
    /// limit asks them all before it takes from any, so one that refuses costs the others
    /// nothing.
    pub fn check(&self, limit: Limit, now: Duration) -> Verdict {
        let now = now.as_nanos();
        // Room for `burst` tokens: the bucket may run up to `burst - 1` intervals ahead of now.
        let tolerance = limit.interval() * u128::from(limit.burst.max(1) - 1);
        let ahead = self.full_at.max(now) - now;
        if ahead > tolerance {
            let wait = ahead - tolerance;
            return Verdict::Deny {
                retry_after: Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX)),
            };
        }
        Verdict::Allow
    }

    /// Full again at `now` (it would let a whole burst through): such a bucket is the same as
    /// a new one, so a table of buckets may forget it.
    pub fn is_full(&self, now: Duration) -> bool {
        self.full_at <= now.as_nanos()
    }
}

/// A service's rate limits (`services.<name>.inbound.rate_limit`), resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RateLimits {
    /// Every caller together.
    pub total: Option<Limit>,
    /// Each calling identity.
    pub per_caller: Option<Limit>,
    /// A calling service by name, in place of `per_caller` for it.
    pub callers: Vec<(String, Limit)>,
    /// By the name of a route its callers give, every caller together.
    pub routes: Vec<(String, Limit)>,
}

impl RateLimits {
    pub fn is_empty(&self) -> bool {
        self.total.is_none()
            && self.per_caller.is_none()
            && self.callers.is_empty()
            && self.routes.is_empty()
    }
}

pub(crate) fn limit(raw: RawLimit) -> Limit {
    Limit {
        rate: raw.rate,
        burst: raw.burst.unwrap_or(raw.rate),
    }
}

/// `service`'s rate limits from its raw form, every name checked against `services` (the file
/// as written): a caller must be a service of the mesh, a route a name its callers' calls to
/// `service` give under `routes`.
pub fn resolve(
    raw: Option<&RawRateLimit>,
    service: &str,
    services: &IndexMap<String, RawService>,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> RateLimits {
    let Some(raw) = raw else {
        return RateLimits::default();
    };
    let at = format!("services.{service}.inbound.rate_limit");
    let mut problem = |path: String, message: String| {
        diags.push(Diagnostic::new(&path, locations.of(&path), message));
    };
    for name in raw.callers.keys().filter(|c| !services.contains_key(*c)) {
        problem(
            format!("{at}.callers.{name}"),
            format!("`{name}` is not a service of this mesh: a caller is named as a service"),
        );
    }
    let routes: Vec<&String> = services
        .values()
        .filter_map(|s| s.calls.get(service))
        .flat_map(|c| c.routes.keys())
        .collect();
    for name in raw.routes.keys().filter(|r| !routes.contains(r)) {
        problem(
            format!("{at}.routes.{name}"),
            format!(
                "no call to `{service}` has a route named `{name}` (a route is named in its caller's `calls.{service}.routes`)"
            ),
        );
    }
    let named =
        |m: &IndexMap<String, RawLimit>| m.iter().map(|(k, v)| (k.clone(), limit(*v))).collect();
    RateLimits {
        total: raw.total.map(limit),
        per_caller: raw.per_caller.map(limit),
        callers: named(&raw.callers),
        routes: named(&raw.routes),
    }
}

#[cfg(test)]
mod resolve_tests;
#[cfg(test)]
mod tests;
