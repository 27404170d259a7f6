//! Local rate limits on requests to the app (`services.<name>.inbound.rate_limit`, docs/config.md):
//! token buckets for every caller together, each calling identity (or a named caller's own
//! limit in its place) and each named route, shared by every worker of the proxy. A request
//! takes a token from each bucket that applies to it, or from none: the buckets are asked
//! first and taken from only when all of them let it through, so a refused request costs the
//! other limits nothing. Refused, it learns which limit and how long to wait (`Retry-After`).
//!
//! The arithmetic is [`hopwise_model::rate`]'s; the clock is tokio's (a paused one in tests).
//!
//! The per-caller table is bounded: it holds at most [`MAX_CALLERS`] identities; when full, the
//! buckets that are full again (the same as new ones) are forgotten, and a caller that still
//! finds no room draws from one bucket shared by every such caller — stricter, never looser.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopwise_model::rate::{Bucket, Limit, RateLimits, Verdict};
use tokio::time::Instant;

use super::limits::{AsIs, CallerKey};
use super::{Caller, Inbound};
use crate::config::ProxyConfig;
use crate::error::ProxyError;

/// The name of each limit, in `x-hopwise-limit` and the `limits_tripped` metric.
pub const TOTAL: &str = "inbound.rate_limit.total";
pub const PER_CALLER: &str = "inbound.rate_limit.per_caller";
pub const CALLER: &str = "inbound.rate_limit.callers";
pub const ROUTE: &str = "inbound.rate_limit.routes";

/// Most calling identities the per-caller table remembers at once.
pub const MAX_CALLERS: usize = 4096;

/// A request a limit refused: which limit, and in how many whole seconds one would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub limit: &'static str,
    pub retry_after_secs: u64,
}

/// One proxy's rate limits and their buckets.
#[derive(Debug)]
pub struct RateLimiter {
    /// Named callers by identity (`ProxyConfig::rate_limit`).
    limits: RateLimits,
    /// The identities of `limits.callers`, hashed as connections' callers are.
    caller_keys: Vec<CallerKey>,
    /// For each of the configuration's inbound routes (by index): its limit in `limits.routes`.
    route_of: Vec<Option<usize>>,
    start: Instant,
    buckets: Mutex<Buckets>,
}

#[derive(Debug, Default)]
struct Buckets {
    total: Bucket,
    /// One per `limits.callers`.
    named: Vec<Bucket>,
    /// One per `limits.routes`.
    routes: Vec<Bucket>,
    per_caller: HashMap<CallerKey, Bucket, BuildHasherDefault<AsIs>>,
    /// Callers that found the table full.
    overflow: Bucket,
}

impl RateLimiter {
    /// The limiter for `config`, or none when it sets no limit (nothing to check per request).
    pub fn new(config: &ProxyConfig) -> Option<Arc<RateLimiter>> {
        let routes = config.inbound_routes.iter().map(|(name, _)| name.as_str());
        RateLimiter::of(config.rate_limit.clone(), routes)
    }

    /// The limiter for `limits` (named callers by identity), for a proxy whose inbound routes
    /// are named `routes` in order; none when `limits` sets no limit.
    pub fn of<'a>(
        limits: RateLimits,
        routes: impl Iterator<Item = &'a str>,
    ) -> Option<Arc<RateLimiter>> {
        if limits.is_empty() {
            return None;
        }
        let route_of = routes
            .map(|name| limits.routes.iter().position(|(n, _)| n == name))
            .collect();
        let buckets = Buckets {
            named: vec![Bucket::default(); limits.callers.len()],
            routes: vec![Bucket::default(); limits.routes.len()],
            ..Buckets::default()
        };
        Some(Arc::new(RateLimiter {
            caller_keys: limits
                .callers
                .iter()
                .map(|(id, _)| CallerKey::of(id))
                .collect(),
            limits,
            route_of,
            start: Instant::now(),
            buckets: Mutex::new(buckets),
        }))
    }

    /// The limiter under a new configuration: `previous`'s, with its buckets, when the limits
    /// and the routes they name are the same.
    pub fn next(
        config: &ProxyConfig,
        previous: Option<&Arc<RateLimiter>>,
    ) -> Option<Arc<RateLimiter>> {
        let next = RateLimiter::new(config)?;
        match previous {
            Some(p) if p.limits == next.limits && p.route_of == next.route_of => Some(p.clone()),
            _ => Some(next),
        }
    }

    /// One request from `caller` (none: plaintext, no identity) on inbound route `route` (an
    /// index into the configuration's `inbound_routes`): let through, a token taken from every
    /// bucket that applies, or refused with nothing taken.
    pub fn admit(&self, caller: Option<CallerKey>, route: Option<usize>) -> Result<(), Limited> {
        let now = self.start.elapsed();
        let mut guard = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = &mut *guard;
        let mut applies: [Option<(&mut Bucket, Limit, &'static str)>; 3] = [None, None, None];
        if let Some(limit) = self.limits.total {
            applies[0] = Some((&mut b.total, limit, TOTAL));
        }
        if let Some(key) = caller {
            if let Some(i) = self.caller_keys.iter().position(|k| *k == key) {
                applies[1] = Some((&mut b.named[i], self.limits.callers[i].1, CALLER));
            } else if let Some(limit) = self.limits.per_caller {
                let bucket = caller_bucket(&mut b.per_caller, &mut b.overflow, key, now);
                applies[1] = Some((bucket, limit, PER_CALLER));
            }
        }
        if let Some(i) = route.and_then(|r| self.route_of.get(r).copied().flatten()) {
            applies[2] = Some((&mut b.routes[i], self.limits.routes[i].1, ROUTE));
        }
        // The longest wait among the limits that refuse: after it, all of them would pass.
        let refused = (applies.iter().flatten())
            .filter_map(|(bucket, limit, name)| match bucket.check(*limit, now) {
                Verdict::Allow => None,
                Verdict::Deny { retry_after } => Some((retry_after, *name)),
            })
            .max_by_key(|(wait, _)| *wait);
        if let Some((retry_after, limit)) = refused {
            let deny = Verdict::Deny { retry_after };
            return Err(Limited {
                limit,
                retry_after_secs: deny.retry_after_secs().unwrap_or(1),
            });
        }
        for (bucket, limit, _) in applies.into_iter().flatten() {
            bucket.take(limit, now);
        }
        Ok(())
    }

    /// Identities the per-caller table remembers (for tests: it stays bounded).
    pub fn callers_remembered(&self) -> usize {
        let b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        b.per_caller.len()
    }
}

/// `key`'s bucket in the per-caller table; the shared `overflow` one when the table is full of
/// callers whose buckets are still refilling.
fn caller_bucket<'a>(
    table: &'a mut HashMap<CallerKey, Bucket, BuildHasherDefault<AsIs>>,
    overflow: &'a mut Bucket,
    key: CallerKey,
    now: Duration,
) -> &'a mut Bucket {
    if table.len() >= MAX_CALLERS && !table.contains_key(&key) {
        // A full bucket is a new one: forgetting it changes nothing. Runs only for a caller
        // new to a full table, so at most once per such request.
        table.retain(|_, b| !b.is_full(now));
        if table.len() >= MAX_CALLERS {
            return overflow;
        }
    }
    table.entry(key).or_default()
}

impl Inbound {
    /// Limits this proxy's inbound requests by rate (the limiter every worker shares).
    #[must_use]
    pub fn rate_limited(self, rates: Option<Arc<RateLimiter>>) -> Self {
        Inbound { rates, ..self }
    }

    /// Whether the rate limits let a request from `caller` on `path` through, counted when
    /// they do not. Without limits, nothing is looked up.
    pub(super) fn within_rate(&self, caller: &Caller, path: &str) -> Result<(), ProxyError> {
        let Some(rates) = &self.rates else {
            return Ok(());
        };
        let route = self.config.inbound_route_index(path);
        rates.admit(caller.key(), route).map_err(|l| {
            self.metrics.limit_tripped(&self.config.service, l.limit);
            ProxyError::RateLimited {
                limit: l.limit,
                retry_after_secs: l.retry_after_secs,
            }
        })
    }
}

#[cfg(test)]
mod tests;
