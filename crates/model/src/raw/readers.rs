//! Readers for the mesh, its services, copies, calls and routes: YAML tree → raw types, every
//! problem collected with its path. Policy fields are read by `read_policy.rs`.

use indexmap::IndexMap;

use super::capture::{read_address, read_capture};
use super::kubernetes::{read_kubernetes, read_mesh_kubernetes};
use super::observe::{read_access_log, read_tracing};
use super::read_policy::read_policy;
use super::values::{or_none, positive_timeout, positive_u32, u32_field};
use super::{
    AllowWord, MAX_COPIES, RawAllow, RawCall, RawCopies, RawCopy, RawEntry, RawExternal,
    RawExternalTls, RawInbound, RawMesh, RawMeshInfo, RawRequest, RawRoute, RawService, SampleKind,
};
use crate::policy::Protocol;
use crate::read::{Fields, Reader};
use crate::yaml::{Node, Value};

pub fn read_mesh(r: &mut Reader, node: &Node) -> RawMesh {
    let Some(mut f) = r.fields(node, "") else {
        return RawMesh::default();
    };
    let mesh = RawMesh {
        mesh: f.get(r, "mesh", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let info = RawMeshInfo {
                name: f.get(r, "name", Reader::string),
                trust_domain: f.get(r, "trust_domain", Reader::string),
                certs: f.get(r, "certs", Reader::string),
                capture: f.get(r, "capture", read_capture),
                tracing: f.get(r, "tracing", read_tracing),
                kubernetes: f.get(r, "kubernetes", read_mesh_kubernetes),
            };
            f.finish(r);
            Some(info)
        }),
        defaults: f.get(r, "defaults", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let policy = read_policy(r, &mut f);
            f.finish(r);
            Some(policy)
        }),
        services: f
            .get(r, "services", |r, n, p| Some(r.named(n, p, read_service)))
            .unwrap_or_default(),
    };
    f.finish(r);
    mesh
}

fn read_service(r: &mut Reader, node: &Node, path: &str) -> Option<RawService> {
    let mut f = r.fields(node, path)?;
    let service = RawService {
        protocol: f.get(r, "protocol", |r, n, p| r.word(n, p, &Protocol::ALL)),
        entry: f.get(r, "entry", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let e = RawEntry {
                timeout: f.get(r, "timeout", or_none(positive_timeout)),
                retries: f.get(r, "retries", u32_field),
            };
            f.finish(r);
            Some(e)
        }),
        copies: f.get(r, "copies", |r, n, p| match &n.value {
            Value::Int(_) => {
                let c = r.count(n, p, u64::from(u32::MAX))?;
                if c == 0 || c > u64::from(MAX_COPIES) {
                    r.error(
                        p,
                        n.pos,
                        format!("{c} copies: write a number from 1 to {MAX_COPIES}, or a list"),
                    );
                    return None;
                }
                Some(RawCopies::Count(c as u32))
            }
            Value::Seq(_) => r.list(n, p, read_copy).map(RawCopies::List),
            other => {
                r.error(
                    p,
                    n.pos,
                    format!(
                        "expected a number of copies or a list of copies, found {}",
                        other.kind()
                    ),
                );
                None
            }
        }),
        sample: f.get(r, "sample", |r, n, p| r.word(n, p, &SampleKind::ALL)),
        run: f.get(r, "run", super::run::read_run),
        external: f.get(r, "external", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let e = RawExternal {
                address: f.get(r, "address", Reader::string),
                tls: f.get(r, "tls", |r, n, p| {
                    let mut f = r.fields(n, p)?;
                    let t = RawExternalTls {
                        ca_file: f.get(r, "ca_file", Reader::string),
                        server_name: f.get(r, "server_name", Reader::string),
                    };
                    f.finish(r);
                    Some(t)
                }),
            };
            f.finish(r);
            Some(e)
        }),
        address: f.get(r, "address", read_address),
        ports: f
            .get(r, "ports", super::ports::read_ports)
            .unwrap_or_default(),
        kubernetes: f.get(r, "kubernetes", read_kubernetes),
        allow: f.get(r, "allow", |r, n, p| match &n.value {
            Value::Seq(_) => r.list(n, p, Reader::string).map(RawAllow::Services),
            _ => r
                .word(n, p, &[("any", AllowWord::Any), ("none", AllowWord::None)])
                .map(RawAllow::Word),
        }),
        allow_paths: f
            .get(r, "allow_paths", |r, n, p| {
                let Value::Map(entries) = &n.value else {
                    r.error(
                        p,
                        n.pos,
                        format!(
                            "expected a mapping of path prefixes, found {}",
                            n.value.kind()
                        ),
                    );
                    return None;
                };
                let mut out = IndexMap::new();
                for (k, v) in entries {
                    let child = format!("{p}.{}", k.name);
                    if let Err(message) = path_prefix(&k.name) {
                        r.error(&child, k.pos, message);
                        continue;
                    }
                    if let Some(list) = r.list(v, &child, Reader::string) {
                        out.insert(k.name.clone(), list);
                    }
                }
                Some(out)
            })
            .unwrap_or_default(),
        inbound: f.get(r, "inbound", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let i = RawInbound {
                max_requests: f.get(r, "max_requests", positive_u32),
                max_requests_per_caller: f.get(r, "max_requests_per_caller", positive_u32),
                timeout: f.get(r, "timeout", or_none(positive_timeout)),
                rate_limit: f.get(r, "rate_limit", super::rate_limit::read_rate_limit),
            };
            f.finish(r);
            Some(i)
        }),
        fault: f.get(r, "fault", super::fault::read_fault),
        gateway: f.get(r, "gateway", super::gateway::read_gateway),
        tcp: f.get(r, "tcp", super::tcp::read_tcp),
        upgrade: f.get(r, "upgrade", super::upgrade::read_upgrade),
        carries: f.get(r, "carries", super::carries::read_carries),
        access_log: f.get(r, "access_log", read_access_log),
        policy: read_policy(r, &mut f),
        routes: f
            .get(r, "routes", |r, n, p| {
                Some(r.named(n, p, super::read_routes::read_route))
            })
            .unwrap_or_default(),
        calls: f
            .get(r, "calls", |r, n, p| Some(r.named(n, p, read_call)))
            .unwrap_or_default(),
    };
    f.finish(r);
    Some(service)
}

fn read_copy(r: &mut Reader, node: &Node, path: &str) -> Option<RawCopy> {
    let mut f = r.fields(node, path)?;
    let copy = RawCopy {
        app: f.get(r, "app", Reader::string),
        inbound: f.get(r, "inbound", Reader::string),
        outbound: f.get(r, "outbound", Reader::string),
        admin: f.get(r, "admin", Reader::string),
        upstreams: f
            .get(r, "upstreams", |r, n, p| {
                Some(r.named(n, p, Reader::string))
            })
            .unwrap_or_default(),
        labels: f.get(r, "labels", Reader::labels).unwrap_or_default(),
    };
    f.finish(r);
    Some(copy)
}

fn read_call(r: &mut Reader, node: &Node, path: &str) -> Option<RawCall> {
    let mut f = r.fields(node, path)?;
    let call = RawCall {
        request: read_request(r, &mut f),
        policy: read_policy(r, &mut f),
        routes: f
            .get(r, "routes", |r, n, p| {
                Some(r.named(n, p, |r, n, p| {
                    let mut f = r.fields(n, p)?;
                    let route = RawRoute {
                        path: f.get(r, "path", |r, n, p| {
                            let path = r.string(n, p)?;
                            if let Err(message) = path_prefix(&path) {
                                r.error(p, n.pos, message);
                                return None;
                            }
                            Some(path)
                        }),
                        request: read_request(r, &mut f),
                        policy: read_policy(r, &mut f),
                    };
                    f.finish(r);
                    Some(route)
                }))
            })
            .unwrap_or_default(),
    };
    f.finish(r);
    Some(call)
}

fn read_request(r: &mut Reader, f: &mut Fields<'_>) -> RawRequest {
    RawRequest {
        protocol: f.get(r, "protocol", |r, n, p| r.word(n, p, &Protocol::ALL)),
        method: f.get(r, "method", |r, n, p| {
            let m = r.string(n, p)?;
            if m.is_empty() || !m.chars().all(|c| c.is_ascii_alphabetic()) {
                r.error(p, n.pos, format!("`{m}` is not an HTTP method"));
                return None;
            }
            Some(m.to_ascii_uppercase())
        }),
        idempotent: f.get(r, "idempotent", Reader::bool),
        app_retries: f.get(r, "app_retries", u32_field),
    }
}

/// A path rule's prefix must start with `/` and be in the form requests are matched in
/// ([`crate::path`]): another spelling would never match anything.
fn path_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!(
            "`{prefix}` is not a path prefix: it must start with `/`"
        ));
    }
    match crate::path::normalize(prefix) {
        Ok(p) if p == prefix => Ok(()),
        Ok(p) => Err(format!(
            "`{prefix}` is not a normalized path (requests are matched normalized): write `{p}`"
        )),
        Err(e) => Err(format!("`{prefix}` cannot be a path prefix: {e}")),
    }
}
