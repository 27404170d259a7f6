//! Calls to a whole-TCP service (`services.<name>.tcp` with no ports): `tcp-call` says which
//! policy the proxy applies to such a connection (`model`'s `TcpPolicy`, what the proxy runs),
//! and `tcp-field-ignored` names each policy field written on the call that cannot apply to
//! TCP (`model`'s `tcp::INAPPLICABLE`). The request findings do not run on these calls: there
//! is no request to time, retry or cap.

use hopwise_model::duration::human;
use hopwise_model::tcp::{INAPPLICABLE, TcpPolicy};
use hopwise_model::{Call, Mesh, Tcp};

use super::{Out, Severity};

/// The callee's `tcp`, when every call to it is a TCP call.
pub(super) fn whole_tcp<'m>(mesh: &'m Mesh, call: &Call) -> Option<&'m Tcp> {
    mesh.services
        .get(&call.to)?
        .tcp
        .as_ref()
        .filter(|t| t.whole())
}

pub(super) fn findings(out: &mut Out, mesh: &Mesh, call: &Call, tcp: &Tcp) {
    let label = call.label();
    // A call with routes is written once above them: its fields and `routes` are said once.
    let base = call.path.split(".routes.").next().unwrap_or(&call.path);
    let p = TcpPolicy::of(&call.policy, tcp);
    let idle = p.idle_timeout.map_or_else(|| "never".to_owned(), human);
    if !out.0.iter().any(|f| f.code == "tcp-call" && f.path == base) {
        out.push(
            "tcp-call",
            Severity::Info,
            &label,
            base,
            format!(
                "{label} is opaque TCP: connect within {}, closed after {idle} idle, at most {} open, {} {} tried when a connection cannot open, never retried once it opened",
                human(p.connect_timeout),
                p.max_connections,
                p.connect_tries,
                if p.connect_tries == 1 { "copy" } else { "copies" },
            ),
            "nothing to do; `connect_timeout`, `limits.max_connections`, `retries` (connect-failure) and the callee's `tcp.idle_timeout` shape it".to_owned(),
        );
    }
    for (field, why) in INAPPLICABLE {
        for at in [base, call.path.as_str()] {
            let path = format!("{at}.{field}");
            if !mesh.locations.written(&path) || out.0.iter().any(|f| f.path == path) {
                continue;
            }
            out.push(
                "tcp-field-ignored",
                Severity::Warning,
                &label,
                &path,
                format!("`{field}` has no effect on {label}: {why}"),
                format!("remove `{field}` from the call"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use hopwise_model::Mesh;

    use crate::{Options, check};

    const MESH: &str = "
services:
  checkout:
    calls:
      cache:
        timeout: 2s
        connect_timeout: 500ms
        retries: { count: 2, on: [connect-failure], backoff: { base: 25ms } }
        limits: { max_connections: 64, max_requests: 10 }
      pricing: { timeout: 2s }
  cache: { tcp: { idle_timeout: 5m } }
  pricing: {}
";

    #[test]
    fn a_tcp_call_says_its_policy_and_names_the_fields_that_cannot_apply() {
        let mesh = Mesh::from_yaml(MESH).unwrap_or_else(|d| panic!("{}", d.render("t")));
        let r = check(&mesh, &Options::default());
        let tcp: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.subject == "checkout → cache")
            .collect();
        let info = tcp.iter().find(|f| f.code == "tcp-call").unwrap();
        assert!(
            info.message.contains("connect within 500 ms")
                && info.message.contains("closed after 300.00 s idle")
                && info.message.contains("at most 64 open")
                && info.message.contains("3 copies tried"),
            "{}",
            info.message
        );
        let mut ignored: Vec<_> = tcp
            .iter()
            .filter(|f| f.code == "tcp-field-ignored")
            .map(|f| f.path.as_str())
            .collect();
        ignored.sort_unstable();
        assert_eq!(
            ignored,
            [
                "services.checkout.calls.cache.limits.max_requests",
                "services.checkout.calls.cache.retries.backoff",
                "services.checkout.calls.cache.timeout",
            ]
        );
        // The request findings stay on the HTTP call and never reach the TCP one.
        assert!(tcp.iter().all(|f| f.code.starts_with("tcp-")));
    }
}
