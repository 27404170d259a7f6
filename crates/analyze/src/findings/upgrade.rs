//! Calls to a service that accepts protocol switches or CONNECT (`services.<name>.upgrade`):
//! `upgrade-not-retried` says, for a call whose retry policy retries more than connect failures,
//! that none of that applies to its upgrades — an upgrade is sent once (`model`'s
//! `Upgrade::policy`, what the proxy runs). The call's requests keep their findings.

use hopwise_model::policy::RetryOn;
use hopwise_model::{Call, Mesh};

use super::{Out, Severity};

const CODE: &str = "upgrade-not-retried";

pub(super) fn findings(out: &mut Out, mesh: &Mesh, call: &Call) {
    let Some(upgrade) = mesh.services.get(&call.to).and_then(|s| s.upgrade.as_ref()) else {
        return;
    };
    let retry = &call.policy.retry;
    let beyond_connect: Vec<&str> = RetryOn::ALL
        .iter()
        .filter(|(_, on)| *on != RetryOn::ConnectFailure && retry.on.contains(on))
        .map(|(name, _)| *name)
        .collect();
    // A call with routes is written once above them: said once for the call.
    let base = call.path.split(".routes.").next().unwrap_or(&call.path);
    if retry.count == 0
        || beyond_connect.is_empty()
        || out.0.iter().any(|f| f.code == CODE && f.path == base)
    {
        return;
    }
    let label = call.label();
    let kinds = match (upgrade.protocols.is_empty(), upgrade.connect) {
        (false, true) => format!("{} and CONNECT", upgrade.protocols.join(", ")),
        (false, false) => upgrade.protocols.join(", "),
        (true, _) => "CONNECT".to_owned(),
    };
    let tries = upgrade.policy(&call.policy).connect_tries;
    out.push(
        CODE,
        Severity::Info,
        &label,
        base,
        format!(
            "{label} retries {} times on {}, but its upgrades ({kinds}) are sent once: once the request went its answer is final; only a copy that cannot be reached is replaced ({tries} {} tried)",
            retry.count,
            beyond_connect.join(", "),
            if tries == 1 { "copy" } else { "copies" },
        ),
        "nothing to do for its requests; a client of an upgraded connection reconnects itself".to_owned(),
    );
}

#[cfg(test)]
mod tests {
    use hopwise_model::Mesh;

    use crate::{Options, check};

    #[test]
    fn a_retrying_call_to_a_service_that_upgrades_is_told_its_upgrades_are_sent_once() {
        let yaml = "
services:
  web:
    calls:
      chat: { retries: { count: 2, on: [5xx, connect-failure] } }
      pipe: { retries: { count: 2, on: [connect-failure] } }
      plain: { retries: { count: 2, on: [5xx] } }
  chat: { upgrade: { protocols: [websocket] } }
  pipe: { upgrade: { connect: true } }
  plain: {}
";
        let mesh = Mesh::from_yaml(yaml).unwrap_or_else(|d| panic!("{}", d.render("t")));
        let r = check(&mesh, &Options::default());
        let found: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.code == "upgrade-not-retried")
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        let f = found[0];
        assert_eq!(f.path, "services.web.calls.chat");
        assert!(
            f.message.contains("retries 2 times on 5xx")
                && f.message.contains("(websocket) are sent once")
                && f.message.contains("3 copies tried"),
            "{}",
            f.message
        );
    }
}
