//! A service on Kubernetes (`mesh.kubernetes`, `services.<name>.kubernetes`, read in
//! `raw/kubernetes.rs`): the namespace and ServiceAccount its pods run as. Its identity is then
//! the ServiceAccount's, `spiffe://<trust domain>/ns/<namespace>/sa/<name>` (Istio's form), which
//! the control plane signs only for a pod whose ServiceAccount token the API server vouched
//! for; `allow` naming the service names that ServiceAccount. What Kubernetes says of a Service
//! to the mesh: its endpoints ([`Endpoints`]) and its address and ports (`front.rs`). Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Serialize;

use crate::diag::Diagnostic;
use crate::raw::{RawKubernetes, RawMeshKubernetes};
use crate::read::Locations;

mod front;
pub use front::{Front, PortTarget, ServicePort};

/// The namespace a service's pods run in, and their ServiceAccount.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccount {
    /// The SPIFFE ID of this ServiceAccount's pods in `trust_domain`.
    pub fn identity(&self, trust_domain: &str) -> String {
        format!(
            "spiffe://{trust_domain}/ns/{}/sa/{}",
            self.namespace, self.name
        )
    }
}

/// What a Kubernetes Service's EndpointSlices say of its pods' addresses: the control plane's
/// typed input from discovery. A copy of the service whose address Kubernetes does not list as
/// ready takes no new requests (a terminating pod's drains; a deleted or unready pod's leaves).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Endpoints {
    /// Ready to serve (the endpoint's `ready` condition, unknown counting as ready).
    pub ready: BTreeSet<IpAddr>,
    /// Its pod is being deleted (`terminating`): requests in flight finish, no new ones come.
    pub terminating: BTreeSet<IpAddr>,
    /// The slices' TCP ports: by the Service port's name (empty for an unnamed one), the pods'
    /// port its `targetPort` resolved to ([`Front::ports_with`]).
    pub ports: BTreeMap<String, u16>,
}

impl Endpoints {
    /// Whether a copy at `ip` may take new requests.
    pub fn admits(&self, ip: IpAddr) -> bool {
        self.ready.contains(&ip)
    }

    /// How Kubernetes lists `ip`: `ready`, `terminating`, or `absent` (not listed, or listed
    /// as not ready).
    pub fn state(&self, ip: IpAddr) -> &'static str {
        if self.ready.contains(&ip) {
            "ready"
        } else if self.terminating.contains(&ip) {
            "terminating"
        } else {
            "absent"
        }
    }
}

/// An HTTPRoute or GRPCRoute read from Kubernetes whose parents are Services (the Gateway
/// API's mesh binding, GAMMA), written in the mesh file's words: the control plane adds it to
/// the mesh file it serves under each parent's `routes`, named as the resource is.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeRoute {
    pub namespace: String,
    pub name: String,
    /// The Services it is attached to, in its namespace.
    pub parents: Vec<String>,
    /// `{hostnames, rules}` as `services.<name>.routes.<route>` writes them; backends and
    /// mirrors name Kubernetes Services of its namespace (`service:`).
    pub route: serde_json::Value,
}

/// A namespace's name: an RFC 1123 label (what the API server accepts).
pub fn check_namespace(name: &str) -> Result<(), String> {
    if is_label(name) {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a Kubernetes namespace: at most 63 lowercase letters, digits and `-`, starting and ending with a letter or digit"
        ))
    }
}

/// A ServiceAccount's name: an RFC 1123 subdomain.
pub fn check_service_account(name: &str) -> Result<(), String> {
    if name.len() <= 253 && name.split('.').all(is_label) {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a Kubernetes ServiceAccount name: lowercase letters, digits, `-` and `.`, each part starting and ending with a letter or digit"
        ))
    }
}

/// An RFC 1123 label (a DNS name's part): also a label key's prefix's, `crate::labels`.
pub(crate) fn is_label(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| ok(c) || c == '-')
        && s.starts_with(ok)
        && s.ends_with(ok)
}

/// The ServiceAccount of service `name`, when the mesh or the service says it runs on
/// Kubernetes. An external service has none (it runs no proxy): a block on one is an error, as
/// is a default ServiceAccount name (the service's) that Kubernetes would refuse.
pub fn resolve(
    mesh: Option<&RawMeshKubernetes>,
    service: Option<&RawKubernetes>,
    name: &str,
    external: bool,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> Option<ServiceAccount> {
    let path = format!("services.{name}.kubernetes");
    if external {
        if service.is_some() {
            diags.push(Diagnostic::new(
                &path,
                locations.of(&path),
                "an external service runs no proxy and has no ServiceAccount: remove `kubernetes`"
                    .to_owned(),
            ));
        }
        return None;
    }
    if mesh.is_none() && service.is_none() {
        return None;
    }
    let namespace = service
        .and_then(|s| s.namespace.clone())
        .or_else(|| mesh.and_then(|m| m.namespace.clone()))
        .unwrap_or_else(|| "default".to_owned());
    let account = match service.and_then(|s| s.service_account.clone()) {
        Some(a) => a,
        None => {
            if let Err(why) = check_service_account(name) {
                let at = if service.is_some() {
                    path.clone()
                } else {
                    format!("services.{name}")
                };
                diags.push(Diagnostic::new(
                    &at,
                    locations.of(&at),
                    format!("{why}: the service's name is its default ServiceAccount; write `kubernetes: {{ service_account: … }}`"),
                ));
                return None;
            }
            name.to_owned()
        }
    };
    Some(ServiceAccount {
        namespace,
        name: account,
    })
}

/// Two services running as one ServiceAccount would share one identity, so neither `allow` nor
/// a signed certificate could tell them apart: an error at the second.
pub fn check_distinct(mesh: &crate::Mesh, diags: &mut Vec<Diagnostic>) {
    let mut seen: std::collections::HashMap<&ServiceAccount, &str> = Default::default();
    for (name, service) in &mesh.services {
        let Some(account) = &service.kubernetes else {
            continue;
        };
        if let Some(first) = seen.insert(account, name) {
            seen.insert(account, first);
            let path = format!("services.{name}.kubernetes");
            let at = if mesh.locations.of(&path).is_some() {
                path
            } else {
                format!("services.{name}")
            };
            diags.push(Diagnostic::new(
                &at,
                mesh.locations.of(&at),
                format!(
                    "`{name}` and `{first}` both run as ServiceAccount `{}` in namespace `{}`: an identity names one service; give each its own `service_account`",
                    account.name, account.namespace
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests;

/// `ns/<namespace>/sa/<name>` — a ServiceAccount written as Istio's principals end — as
/// (namespace, name); `None` for anything else (a service's name holds no `/`).
pub fn account_of(entry: &str) -> Option<(&str, &str)> {
    let rest = entry.strip_prefix("ns/")?;
    let (namespace, name) = rest.split_once("/sa/")?;
    (check_namespace(namespace).is_ok() && check_service_account(name).is_ok())
        .then_some((namespace, name))
}

/// `allow` and `allow_paths` may name a ServiceAccount (`ns/shop/sa/web`) where they name a
/// service: it stands for the service that runs as it, since an identity names one service
/// ([`check_distinct`]). One that no service runs as is an error at its list (no certificate is
/// ever signed for it, so allowing it would admit no one — a typo that should not pass).
pub fn resolve_allowed_accounts(mesh: &mut crate::Mesh, diags: &mut Vec<Diagnostic>) {
    let runs_as: std::collections::HashMap<(String, String), String> = mesh
        .services
        .iter()
        .filter_map(|(n, s)| {
            let a = s.kubernetes.as_ref()?;
            Some(((a.namespace.clone(), a.name.clone()), n.clone()))
        })
        .collect();
    let mut unknown = Vec::new();
    for (service, s) in mesh.services.iter_mut() {
        let lists = match &mut s.allow {
            crate::Allow::Only(list) => vec![("allow".to_owned(), list)],
            crate::Allow::Any => Vec::new(),
        };
        let paths = s
            .allow_paths
            .iter_mut()
            .map(|(p, list)| (format!("allow_paths.{p}"), list));
        for (field, list) in lists.into_iter().chain(paths) {
            for entry in list.iter_mut() {
                let Some((ns, sa)) = account_of(entry) else {
                    continue;
                };
                match runs_as.get(&(ns.to_owned(), sa.to_owned())) {
                    Some(name) => *entry = name.clone(),
                    None => unknown.push((format!("services.{service}.{field}"), entry.clone())),
                }
            }
        }
    }
    for (path, entry) in unknown {
        diags.push(Diagnostic::new(
            &path,
            mesh.locations.of(&path),
            format!("allows `{entry}`, but no service of this file runs as that ServiceAccount (its `kubernetes` block names it)"),
        ));
    }
}
