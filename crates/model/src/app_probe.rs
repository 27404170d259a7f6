//! An app's kubelet probes, run by its proxy (Kubernetes injection, docs/kubernetes.md). In an
//! injected pod the capture rules send every TCP connection that arrives at the pod to the
//! proxy's mutual-TLS port, so the kubelet's plaintext probes of the app's ports would be
//! refused there and the pod would never be ready. Injection therefore moves each `httpGet`,
//! `tcpSocket` and `grpc` probe of an app container to `GET /app-health/<container>/<kind>` on
//! the proxy's admin port (which the rules let through) and hands the proxy the originals as
//! JSON in `$HOPWISE_APP_PROBES`; the proxy runs the original against the app when the kubelet
//! asks, as Istio's agent does. This module is the one meaning of that JSON: its types, the
//! paths, and the checks both sides rely on (a proxy only ever probes what injection wrote,
//! never a path or port a request names). Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::route::{HeaderName, HeaderValue};

/// The proxy's environment variable holding the probes (JSON: [`AppProbes`]).
pub const ENV: &str = "HOPWISE_APP_PROBES";
/// Where the rewritten probes point on the admin port.
pub const PREFIX: &str = "/app-health/";
/// More than any pod has: a bound on what a proxy reads from its environment.
pub const MAX_PROBES: usize = 64;
/// The longest a proxy waits for the app on a probe's behalf, whatever the probe says.
pub const MAX_TIMEOUT_SECONDS: u32 = 300;

/// Which of a container's probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Startup, Kind::Liveness, Kind::Readiness];

    /// The last segment of its path (Istio's words).
    pub fn segment(self) -> &'static str {
        match self {
            Kind::Startup => "startupz",
            Kind::Liveness => "livez",
            Kind::Readiness => "readyz",
        }
    }

    /// The container field that holds it (`readinessProbe`).
    pub fn field(self) -> &'static str {
        match self {
            Kind::Startup => "startupProbe",
            Kind::Liveness => "livenessProbe",
            Kind::Readiness => "readinessProbe",
        }
    }
}

/// The admin path a container's probe of `kind` is moved to.
pub fn path(container: &str, kind: Kind) -> String {
    format!("{PREFIX}{container}/{}", kind.segment())
}

/// One original probe: what the kubelet would have done, and within how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppProbe {
    pub action: Action,
    /// The probe's `timeoutSeconds` (1 when it gives none, as Kubernetes defaults it).
    pub timeout_seconds: u32,
}

/// What a probe does at the app (at the pod's IP, as the kubelet would).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// `GET path` over HTTP/1.1 (over TLS, unverified as the kubelet's, when `https`): 200–399
    /// passes.
    Http {
        port: u16,
        path: String,
        #[serde(default)]
        https: bool,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        headers: Vec<Header>,
    },
    /// A TCP connection opened: passes.
    Tcp { port: u16 },
    /// `grpc.health.v1.Health/Check` over h2c for `service` (empty: the server as a whole):
    /// `SERVING` passes.
    Grpc {
        port: u16,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        service: String,
    },
}

/// A header an HTTP probe sends (the probe's `httpHeaders`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub name: String,
    pub value: String,
}

/// Every rewritten probe of a pod, by its admin path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AppProbes(BTreeMap<String, AppProbe>);

/// Why a probe cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("{ENV} is not the probes' JSON: {0}")]
    Json(String),
    #[error("{ENV}: {count} probes, more than the {MAX_PROBES} a pod may have")]
    TooMany { count: usize },
    #[error("{ENV}: probe `{path}`: {why}")]
    Probe { path: String, why: String },
}

impl AppProbes {
    /// Reads `$HOPWISE_APP_PROBES`' text, every probe checked.
    pub fn parse(text: &str) -> Result<AppProbes, ProbeError> {
        let probes: AppProbes =
            serde_json::from_str(text).map_err(|e| ProbeError::Json(e.to_string()))?;
        probes.check()?;
        Ok(probes)
    }

    /// Adds `probe` at `path`, checked as [`AppProbes::parse`] checks it.
    pub fn insert(&mut self, path: String, probe: AppProbe) -> Result<(), ProbeError> {
        check_one(&path, &probe)?;
        self.0.insert(path, probe);
        if self.0.len() > MAX_PROBES {
            return Err(ProbeError::TooMany {
                count: self.0.len(),
            });
        }
        Ok(())
    }

    /// The probe a request's path names, if injection wrote one there.
    pub fn get(&self, path: &str) -> Option<&AppProbe> {
        self.0.get(path)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &AppProbe)> {
        self.0.iter().map(|(p, a)| (p.as_str(), a))
    }

    /// The JSON the proxy reads back (`parse`).
    pub fn to_json(&self) -> String {
        // A map of plain strings and numbers: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    fn check(&self) -> Result<(), ProbeError> {
        if self.0.len() > MAX_PROBES {
            return Err(ProbeError::TooMany {
                count: self.0.len(),
            });
        }
        self.0
            .iter()
            .try_for_each(|(path, probe)| check_one(path, probe))
    }
}

fn check_one(path: &str, probe: &AppProbe) -> Result<(), ProbeError> {
    let bad = |why: String| ProbeError::Probe {
        path: path.to_owned(),
        why,
    };
    let container = path
        .strip_prefix(PREFIX)
        .and_then(|rest| {
            let (container, kind) = rest.split_once('/')?;
            Kind::ALL
                .iter()
                .any(|k| k.segment() == kind)
                .then_some(container)
        })
        .ok_or_else(|| bad(format!("not {PREFIX}<container>/(startupz|livez|readyz)")))?;
    if !crate::kubernetes::is_label(container) {
        return Err(bad(format!("`{container}` is not a container's name")));
    }
    if !(1..=MAX_TIMEOUT_SECONDS).contains(&probe.timeout_seconds) {
        return Err(bad(format!(
            "timeout_seconds {} is not 1 to {MAX_TIMEOUT_SECONDS}",
            probe.timeout_seconds
        )));
    }
    let port = match &probe.action {
        Action::Http {
            port,
            path: target,
            headers,
            ..
        } => {
            if !request_target(target) {
                return Err(bad(format!(
                    "`{}` is not a path to request (`/`, then visible ASCII but `\"<>` and backquote)",
                    target.escape_debug()
                )));
            }
            for h in headers {
                HeaderName::new(&h.name).map_err(&bad)?;
                HeaderValue::new(&h.value).map_err(&bad)?;
            }
            port
        }
        Action::Tcp { port } => port,
        Action::Grpc { port, service } => {
            if service.len() > 256 || service.chars().any(|c| c.is_control()) {
                return Err(bad("the gRPC service name is too long or holds a control \
                                character"
                    .to_owned()));
            }
            port
        }
    };
    if *port == 0 {
        return Err(bad("port 0".to_owned()));
    }
    Ok(())
}

/// What may follow `GET ` in a request line: `/`, then visible ASCII but for the few the
/// proxy's HTTP library refuses in a path or query (`"`, `<`, `>`, `` ` ``), bounded.
fn request_target(target: &str) -> bool {
    target.starts_with('/')
        && target.len() <= 2048
        && target
            .bytes()
            .all(|c| c.is_ascii_graphic() && !b"\"<>`".contains(&c))
}

#[cfg(test)]
mod tests;
