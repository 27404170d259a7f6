//! The plane's results as the wire sends them, and the wire's requests as the plane takes
//! them: plain field-by-field mappings between `plane`'s domain types and the generated `pb`
//! types, so the plane knows nothing of the protocol. A request's text is read by
//! [`plane::request`]'s rules here (names and labels bounded and printable), before a handler
//! locks the plane; pure, fuzzed (`fuzz/fuzz_targets/control_requests.rs`). A whole snapshot here is what the
//! deltas (`plane::delta`) are computed on.

use std::path::Path;
use std::sync::Arc;

use hopwise_analyze::Finding;

use crate::pb;
use crate::plane::{
    self, Ack, ApiError, Applied, CopyStatus, PendingProxy, ProxyStatus, Rotated, ServiceStatus,
    Snapshot, Status, Upstream,
};

/// A finding as the API sends it.
pub fn finding(f: &Finding) -> pb::Finding {
    pb::Finding {
        code: f.code.to_owned(),
        severity: f.severity.label().to_owned(),
        subject: f.subject.clone(),
        path: f.path.clone(),
        message: f.message.clone(),
        fix: f.fix.clone(),
    }
}

/// A whole snapshot (no delta fields set).
pub fn snapshot(s: &Snapshot) -> pb::Snapshot {
    thin(s, None)
}

/// What `next` changes from `prev` (the last one sent on the stream), as a delta on
/// `prev.version`: `plane::delta::diff`'s answer, computed without copying the parts the two
/// share (the same `Arc`: the mesh file, policy, bundle and callers; an upstream's endpoints),
/// which both sides then hold as empty and equal, so the diff carries nothing of them.
pub fn delta(prev: &Snapshot, next: &Snapshot) -> pb::Snapshot {
    if prev.version == 0 {
        // No base to apply a delta to (see `diff`).
        return snapshot(next);
    }
    plane::delta::diff(&thin(prev, Some(next)), &thin(next, Some(prev)))
}

/// `s` on the wire, whole; beside `other`, with what it shares with `other` left empty.
fn thin(s: &Snapshot, other: Option<&Snapshot>) -> pb::Snapshot {
    let f = &s.fixed;
    let shared_fixed = other.is_some_and(|o| Arc::ptr_eq(&o.fixed, &s.fixed));
    let text = |t: &str| {
        Some(if shared_fixed {
            String::new()
        } else {
            t.to_owned()
        })
    };
    let upstreams = s
        .upstreams
        .iter()
        .map(|u| {
            let shared = other.is_some_and(|o| o.upstreams.iter().any(|p| Arc::ptr_eq(p, u)));
            upstream(u, shared)
        })
        .collect();
    pb::Snapshot {
        version: s.version,
        config_version: f.config_version,
        service: f.service.clone(),
        identity: f.identity.clone(),
        mesh_yaml: text(&f.mesh_yaml),
        policy_json: text(&f.policy_json),
        upstreams,
        trust_bundle_pem: text(&f.trust_bundle_pem),
        allowed_callers: if shared_fixed {
            Vec::new()
        } else {
            f.allowed_callers.clone()
        },
        ca_generation: f.ca_generation,
        ..Default::default()
    }
}

/// An upstream whole; `shared`: its endpoints left out (the other side holds the same list).
fn upstream(u: &Upstream, shared: bool) -> pb::Upstream {
    pb::Upstream {
        service: u.service.clone(),
        identity: u.identity.clone(),
        endpoints: if shared {
            Vec::new()
        } else {
            u.endpoints.clone()
        },
        labelled: if shared {
            Vec::new()
        } else {
            (u.labels.iter())
                .map(|(endpoint, labels)| pb::LabelledEndpoint {
                    endpoint: endpoint.clone(),
                    labels: labels.clone(),
                })
                .collect()
        },
        removed_endpoints: Vec::new(),
    }
}

pub fn status(s: Status) -> pb::StatusResponse {
    pb::StatusResponse {
        mesh: s.mesh,
        version: s.version,
        config_version: s.config_version,
        proxies: s.proxies.into_iter().map(proxy_status).collect(),
        services: s.services.into_iter().map(service_status).collect(),
        ca_not_after_unix: s.ca_not_after_unix,
        ca_generation: s.ca_generation,
        ca_rotation: s.ca_rotation,
        trust_bundle: s.trust_bundle,
        store: s.store,
    }
}

fn proxy_status(p: ProxyStatus) -> pb::ProxyStatus {
    pb::ProxyStatus {
        service: p.service,
        proxy: p.proxy,
        connected: p.connected,
        last_sent_version: p.last_sent_version,
        last_acked_version: p.last_acked_version,
        last_ack_accepted: p.last_ack_accepted,
        last_ack_reason: p.last_ack_reason,
        last_ack_unix_ms: p.last_ack_unix_ms,
        cert_not_after_unix: p.cert_not_after_unix,
        cert_ca_generation: p.cert_ca_generation,
        replica: p.replica,
    }
}

fn service_status(s: ServiceStatus) -> pb::ServiceStatus {
    pb::ServiceStatus {
        service: s.service,
        external: s.external,
        copies: s.copies.into_iter().map(copy_status).collect(),
        certs_issued: s.certs_issued,
        cert_not_after_unix: s.cert_not_after_unix,
    }
}

fn copy_status(c: CopyStatus) -> pb::CopyStatus {
    pb::CopyStatus {
        lease_id: c.lease_id,
        inbound_addr: c.inbound_addr,
        healthy: c.healthy,
        expires_in_ms: c.expires_in_ms,
        kubernetes: c.kubernetes.to_owned(),
    }
}

pub fn applied(a: Applied) -> pb::ApplyResponse {
    pb::ApplyResponse {
        applied: a.applied,
        unchanged: a.unchanged,
        config_version: a.config_version,
        version: a.version,
        diagnostics: a.diagnostics,
        findings: a.findings.iter().map(finding).collect(),
        message: a.message,
    }
}

pub fn rotated(r: Rotated) -> pb::RotateCaResponse {
    pb::RotateCaResponse {
        done: r.done,
        unchanged: r.unchanged,
        rotation: r.rotation,
        ca_generation: r.ca_generation,
        version: r.version,
        trust_bundle: r.trust_bundle,
        pending: r.pending.into_iter().map(pending).collect(),
        message: r.message,
        retry: r.retry,
    }
}

fn pending(p: PendingProxy) -> pb::PendingProxy {
    pb::PendingProxy {
        service: p.service,
        proxy: p.proxy,
        connected: p.connected,
        reason: p.reason,
        replica: p.replica,
    }
}

/// An acknowledgement as the plane takes it: the proxy's name refused when it is not one
/// ([`plane::request::proxy_name`]), the reason kept bounded and printable.
pub fn ack(r: pb::AckRequest) -> Result<Ack, ApiError> {
    plane::request::proxy_name(&r.proxy)?;
    Ok(Ack {
        reason: plane::request::reason(&r.reason),
        token: r.token,
        service: r.service,
        proxy: r.proxy,
        version: r.version,
        accepted: r.accepted,
        cert_ca_generation: r.cert_ca_generation,
        trust_bundle_applied: r.trust_bundle_applied,
    })
}

/// What a `Token` call asks: a new join token for `service`, sent back unless `revoke`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenAsk {
    pub service: String,
    pub revoke: bool,
}

/// A `Token` call as the plane takes it: a service name the mesh file could hold
/// ([`plane::request::token_service`]; whether it does is the plane's to say).
pub fn token(r: pb::TokenRequest) -> Result<TokenAsk, ApiError> {
    plane::request::token_service(&r.service)?;
    Ok(TokenAsk {
        service: r.service,
        revoke: r.revoke,
    })
}

/// The answer to `ask` once the plane made `token`, written to `file` on its own host: the
/// token only when not revoked.
pub fn token_response(ask: TokenAsk, token: String, file: &Path) -> pb::TokenResponse {
    let file = file.display().to_string();
    let service = &ask.service;
    let message = if ask.revoke {
        format!(
            "`{service}`'s join token is revoked: refused from the next call on, and its open \
             streams end. A new token is in {file} on the control plane's host only; its \
             proxies need it (or `token rotate`) to connect again"
        )
    } else {
        format!(
            "`{service}`'s join token is replaced: the old one is refused from the next call \
             on, and its open streams end. The new one is in {file} on the control plane's host"
        )
    };
    pb::TokenResponse {
        token: if ask.revoke { String::new() } else { token },
        service: ask.service,
        token_file: file,
        message,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod request_tests;
