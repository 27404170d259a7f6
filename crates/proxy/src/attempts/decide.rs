//! What follows a try, as the proxy decides it: `hopwise_model::attempt::next` — the gate
//! `hopwise check` assumes too — over the run-time state it asks for (the retry budget, a
//! `limits.max_retries` place, a random draw for the back-off), and the metrics a refused retry
//! is counted under. [`decide`] is pure given its [`Spend`]; `agree_tests.rs` holds it equal to
//! what the analyser assumes.

use hopwise_model::Policy;
use hopwise_model::attempt::{self, Next, Skip, Spend, TryEnd};

use crate::budget::RetryBudget;
use crate::limits::{Admitted, Gauges, Tripped};
use crate::metrics::RouteMetrics;

/// After a try ending as `t`: retry (after what delay, within what timeout), or give the
/// answer to the caller, and if a retry was refused, why.
pub fn decide(policy: &Policy, t: &TryEnd, spend: &mut impl Spend) -> Next {
    attempt::next(policy, t, spend)
}

/// The state shared with the cluster's other requests that a retry takes from, and the
/// `max_retries` place this request holds (kept to its end; a new retry takes a new one).
pub(super) struct Live<'s> {
    budget: Option<&'s RetryBudget>,
    gauges: &'s Gauges,
    _place: Option<Admitted<'s>>,
    tripped: Option<Tripped>,
}

impl<'s> Live<'s> {
    pub(super) fn new(budget: Option<&'s RetryBudget>, gauges: &'s Gauges) -> Self {
        Live {
            budget,
            gauges,
            _place: None,
            tripped: None,
        }
    }

    /// Counts a refused retry: its reason, and the cap that refused it.
    pub(super) fn count(&self, rm: &RouteMetrics, service: &str, skip: Skip) {
        if let Some(reason) = skip.label() {
            rm.retry_skipped(reason);
        }
        if skip == Skip::MaxRetries
            && let Some(t) = self.tripped
        {
            rm.metrics().limit_tripped(service, t.name());
        }
    }
}

impl Spend for Live<'_> {
    fn budget(&mut self) -> bool {
        self.budget.is_none_or(RetryBudget::withdraw)
    }

    fn retry_place(&mut self) -> bool {
        match self.gauges.admit_retry() {
            Ok(place) => {
                self._place = Some(place);
                true
            }
            Err(t) => {
                self.tripped = Some(t);
                false
            }
        }
    }

    fn jitter(&mut self) -> u64 {
        fastrand::u64(..)
    }
}
