//! `services.<name>.ports` as written: the ports captured apps call the service on, and the
//! app's port each one reaches (a Kubernetes Service's `port` and `targetPort`). Its reader,
//! every problem collected with its path; the meaning is [`crate::ports`]'s.

use schemars::JsonSchema;
use serde::Serialize;

use super::values::port;
use crate::read::Reader;
use crate::yaml::Node;

/// One of `services.<name>.ports`: a port captured apps call the service's address on, and
/// the port of the app's host it reaches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawServicePort {
    /// The port callers dial at the service's address (a Service's `port`).
    pub port: u16,
    /// The port on each copy's app host the call reaches (a Service's numeric `targetPort`).
    /// Default: `port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_port: Option<u16>,
}

/// The list; a port given twice is refused at its second place.
pub(super) fn read_ports(r: &mut Reader, n: &Node, p: &str) -> Option<Vec<RawServicePort>> {
    let list = r.list(n, p, |r, n, p| {
        let mut f = r.fields(n, p)?;
        let before = r.diags.len();
        let port_at = f.get(r, "port", |r, n, p| Some((port(r, n, p)?, n.pos)));
        let target_port = f.get(r, "target_port", port);
        f.finish(r);
        let Some((port, pos)) = port_at else {
            if r.diags.len() == before {
                r.error(
                    p,
                    n.pos,
                    "a service port needs `port` (the port callers dial)",
                );
            }
            return None;
        };
        Some((
            RawServicePort { port, target_port },
            format!("{p}.port"),
            pos,
        ))
    })?;
    let mut out: Vec<RawServicePort> = Vec::with_capacity(list.len());
    for (sp, path, pos) in list {
        if out.iter().any(|o| o.port == sp.port) {
            let message = format!(
                "port {} is listed twice: each port reaches one app port",
                sp.port
            );
            r.error(&path, pos, message);
            continue;
        }
        out.push(sp);
    }
    Some(out)
}
