//! The app's kubelet probes moved to the proxy's admin port (`hopwise_model::app_probe`): the
//! capture rules send every TCP connection arriving at the pod to the proxy's mutual-TLS port,
//! where the kubelet's plaintext probes of the app's ports would fail. Each `httpGet`,
//! `tcpSocket` and `grpc` probe of the app's containers (and of its own native sidecars) becomes
//! `GET /app-health/<container>/<kind>` on the admin port, its timing kept; the originals go to
//! the proxy. `exec` probes run inside the container and are left alone, and so is a probe that
//! names a `host` (the kubelet then probes that host, not this pod). Pure.

use hopwise_model::app_probe::{self, Action, AppProbe, AppProbes, Header, Kind};
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ADMIN_PORT;

/// One probe to replace: the container's list (`containers`, `initContainers`), its index
/// there, the field, and what goes in its place.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Rewrite {
    pub list: &'static str,
    pub index: usize,
    pub field: &'static str,
    pub probe: Probe,
}

/// The probes of `pod` to move, and the originals for the proxy; or why the pod cannot be
/// injected (a probe naming a port its container does not declare, which would never pass).
pub(super) fn rewrite(pod: &Pod) -> Result<(Vec<Rewrite>, AppProbes), String> {
    let mut rewrites = Vec::new();
    let mut probes = AppProbes::default();
    let Some(spec) = &pod.spec else {
        return Ok((rewrites, probes));
    };
    // Native sidecars (init containers that keep running) are probed like containers.
    let sidecars = spec.init_containers.iter().flatten().enumerate();
    let sidecars = sidecars
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .map(|(i, c)| ("initContainers", i, c));
    let containers = spec.containers.iter().enumerate();
    let all = containers
        .map(|(i, c)| ("containers", i, c))
        .chain(sidecars);
    for (list, index, container) in all {
        for kind in Kind::ALL {
            let Some(probe) = of(container, kind) else {
                continue;
            };
            let Some(action) = action(container, kind, probe)? else {
                continue;
            };
            let path = app_probe::path(&container.name, kind);
            let original = AppProbe {
                action,
                timeout_seconds: probe
                    .timeout_seconds
                    .and_then(|t| u32::try_from(t).ok())
                    .unwrap_or(1)
                    .clamp(1, app_probe::MAX_TIMEOUT_SECONDS),
            };
            probes
                .insert(path.clone(), original)
                .map_err(|e| format!("container {}: {e}", container.name))?;
            rewrites.push(Rewrite {
                list,
                index,
                field: kind.field(),
                probe: moved(probe, path),
            });
        }
    }
    Ok((rewrites, probes))
}

fn of(c: &Container, kind: Kind) -> Option<&Probe> {
    match kind {
        Kind::Startup => c.startup_probe.as_ref(),
        Kind::Liveness => c.liveness_probe.as_ref(),
        Kind::Readiness => c.readiness_probe.as_ref(),
    }
}

/// What the kubelet would do for `probe`, if it reaches one of this pod's ports.
fn action(c: &Container, kind: Kind, probe: &Probe) -> Result<Option<Action>, String> {
    let elsewhere = |host: &Option<String>| host.as_deref().is_some_and(|h| !h.is_empty());
    let port = |p: &IntOrString| resolve(c, kind, p);
    if let Some(get) = &probe.http_get {
        if elsewhere(&get.host) {
            return Ok(None);
        }
        let path = get.path.as_deref().filter(|p| !p.is_empty()).unwrap_or("/");
        let headers = get.http_headers.iter().flatten().map(|h| Header {
            name: h.name.clone(),
            value: h.value.clone(),
        });
        return Ok(Some(Action::Http {
            port: port(&get.port)?,
            // The kubelet puts a path without its leading `/` under one.
            path: if path.starts_with('/') {
                path.to_owned()
            } else {
                format!("/{path}")
            },
            https: get
                .scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS")),
            headers: headers.collect(),
        }));
    }
    if let Some(tcp) = &probe.tcp_socket {
        if elsewhere(&tcp.host) {
            return Ok(None);
        }
        return Ok(Some(Action::Tcp {
            port: port(&tcp.port)?,
        }));
    }
    if let Some(grpc) = &probe.grpc {
        return Ok(Some(Action::Grpc {
            port: port(&IntOrString::Int(grpc.port))?,
            service: grpc.service.clone().unwrap_or_default(),
        }));
    }
    Ok(None)
}

/// A probe's port: a number, or the name of one of the container's ports (as the kubelet reads
/// it).
fn resolve(c: &Container, kind: Kind, port: &IntOrString) -> Result<u16, String> {
    let named = |name: &str| {
        let ports = c.ports.iter().flatten();
        ports
            .filter(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
            .next()
    };
    let number = match port {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(name) => named(name),
    };
    number
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n != 0)
        .ok_or_else(|| {
            let port = match port {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => format!("`{s}`"),
            };
            format!(
                "container {}'s {} names port {port}, which is no port of the container: it \
                 could never pass",
                c.name,
                kind.field()
            )
        })
}

/// `probe` pointed at the admin port's `path`, its timing and thresholds kept.
fn moved(probe: &Probe, path: String) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path),
            port: IntOrString::Int(ADMIN_PORT.into()),
            scheme: Some("HTTP".to_owned()),
            ..HTTPGetAction::default()
        }),
        tcp_socket: None,
        grpc: None,
        exec: None,
        ..probe.clone()
    }
}

#[cfg(test)]
mod tests;
