//! The policies a call may be made under once routes are counted: its own, and each rule's
//! `timeouts`/`retry` laid over it (`RulePolicy::over`, as the caller's proxy lays them) when
//! the caller calls that rule's parent and the rule sends requests to the call's callee. `check`
//! reports each call at the worst of them (`timeouts.rs`, `fanout.rs`), so a rule's retries
//! count in the tries and attempts a call is reported to make.
//!
//! An over-approximation where it cannot tell: every route of the call (`calls.<b>.routes`)
//! is taken to be one a rule's request may take, and a rule counts whether or not a request
//! could reach it.

use hopwise_model::route::ServiceRoutes;
use hopwise_model::{Call, Mesh};

/// `call`, then a copy of it under each distinct rule policy that applies to it.
pub fn under_rules(mesh: &Mesh, call: &Call) -> Vec<Call> {
    let mut out = vec![call.clone()];
    let Some(caller) = mesh.services.get(&call.from) else {
        return out;
    };
    let mut parents: Vec<&str> = caller.calls.iter().map(|c| c.to.as_str()).collect();
    parents.dedup();
    for parent in parents {
        // Only HTTPRoutes carry `timeouts` and `retry`.
        let Some(ServiceRoutes::Http(routes)) = mesh.services.get(parent).map(|s| &s.routes) else {
            continue;
        };
        let rules = routes.values().flat_map(|r| &r.rules);
        for rule in rules.filter(|r| r.backends.iter().any(|b| b.target.service == call.to)) {
            let Some(rp) = &rule.policy else { continue };
            let policy = rp.over(&call.policy);
            if out.iter().all(|c| c.policy != policy) {
                out.push(Call {
                    policy,
                    ..call.clone()
                });
            }
        }
    }
    out
}
