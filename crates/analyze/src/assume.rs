//! What `check` assumes a proxy does after each try: `hopwise_model::attempt::next`, the gate
//! the proxy runs, fed what the passes derive. The passes ask it with [`Given::allow`]: the
//! budget and the caps allow every retry (the "with budgets" column bounds budgets apart) and
//! the back-off is at its lower bound (the tries that can start; worst cases add upper bounds
//! themselves). The proxy's `agree_tests.rs` holds this equal to what the proxy decides.

use hopwise_model::Policy;
use hopwise_model::attempt::{self, Given, Next, Spend, TryEnd};

/// After a try ending as `t`, what the analysis assumes follows, with `spend` answering for the
/// budget, the `max_retries` cap and the back-off draw.
pub fn next_try(policy: &Policy, t: &TryEnd, spend: &mut impl Spend) -> Next {
    attempt::next(policy, t, spend)
}

/// [`next_try`] as the passes ask it: every retry allowed, the shortest back-off.
pub fn assumed(policy: &Policy, t: &TryEnd) -> Next {
    next_try(policy, t, &mut Given::allow())
}
