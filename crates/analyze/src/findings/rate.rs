//! `retry-on-rate-limit`: a call whose retry rule names 429 (or, over gRPC, RESOURCE_EXHAUSTED)
//! to a service that limits its requests by rate (`inbound.rate_limit`). The caller's proxy
//! retries after its back-off, not after `Retry-After`: each refused request comes back within
//! milliseconds, spending the limit's tokens sooner and the caller's tries for nothing.

use hopwise_model::policy::GrpcCode;
use hopwise_model::{Call, Mesh, Outcome};

use super::{Out, Severity};

pub(super) fn findings(out: &mut Out, mesh: &Mesh, call: &Call) {
    let Some(callee) = mesh.services.get(&call.to) else {
        return;
    };
    let retry = &call.policy.retry;
    let refused = [
        Outcome::http(429),
        Outcome::grpc(GrpcCode::ResourceExhausted),
    ];
    if callee.rate_limit.is_empty()
        || retry.count == 0
        || !refused.iter().any(|o| retry.matches(*o))
    {
        return;
    }
    out.push(
        "retry-on-rate-limit",
        Severity::Warning,
        &call.label(),
        &format!("{}.retries.on", call.path),
        format!(
            "{} limits its requests by rate (services.{}.inbound.rate_limit), and this call retries what the limit refuses up to {} times after its back-off, not after Retry-After: refused requests come straight back",
            call.to, call.to, retry.count
        ),
        "leave 429 (resource-exhausted) out of retries.on / status_codes: let the app wait as Retry-After says".to_owned(),
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use hopwise_model::Mesh;

    fn found(retries: &str) -> Vec<String> {
        let text = format!(
            "services:\n  shop:\n    calls:\n      loans:\n        retries: {retries}\n  loans:\n    inbound:\n      rate_limit: {{ total: {{ rate: 10 }} }}\n"
        );
        let mesh = Mesh::from_yaml(&text).unwrap_or_else(|d| panic!("{}", d.render("test")));
        let report = crate::check(&mesh, &crate::Options::default());
        (report.findings.iter())
            .filter(|f| f.code == "retry-on-rate-limit")
            .map(|f| f.path.clone())
            .collect()
    }

    #[test]
    fn a_call_that_retries_what_a_rate_limit_refuses_is_warned_of() {
        let named = "{ count: 2, on: [retriable-status-codes], status_codes: [429] }";
        assert_eq!(found(named), ["services.shop.calls.loans.retries.on"]);
        assert!(found("{ count: 2, on: [5xx] }").is_empty());
        assert!(
            found("{ count: 0, on: [retriable-status-codes], status_codes: [429] }").is_empty()
        );
    }
}
