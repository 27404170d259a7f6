//! Routes from Kubernetes (HTTPRoutes and GRPCRoutes whose parent is a Service): the plane's
//! typed input, and the mesh file it then serves — the operator's file with each accepted
//! route added under its parents' `routes`, as JSON text (YAML reads it; keys in file order).
//! Each route is checked as `hopwise control apply` checks a file, on top of the routes
//! accepted before it (by namespace and name): one that `hopwise check` refuses, or that names
//! a Service the mesh does not have, is refused alone with the reason, and the rest serve. The
//! store keeps only the operator's file; the routes come back from Kubernetes after a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hopwise_model::kubernetes::KubeRoute;
use hopwise_model::{Mesh, yaml};

use super::{Plane, prepare};

/// Why a route was refused: the Gateway API's condition it fails and the reason's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A parent or backend is no service of the mesh (`ResolvedRefs: BackendNotFound`).
    NotFound(String),
    /// The route does not read, or `hopwise check` finds an error (`Accepted: UnsupportedValue`).
    Invalid(String),
}

/// What the plane made of a route: `Ok` serves.
pub type Verdict = Result<(), Refused>;

/// The routes Kubernetes holds, by namespace and name, and what was made of each.
#[derive(Debug, Default)]
pub(super) struct KubeRoutes {
    routes: BTreeMap<(String, String), KubeRoute>,
    verdicts: BTreeMap<(String, String), Verdict>,
    /// The text served with the accepted routes in (`None`: the operator's file as it is).
    pub(super) served: Option<Arc<str>>,
}

impl Plane {
    /// Records route `namespace/name` (`None`: deleted) and serves the mesh file with every
    /// accepted route in. Returns what was made of this one (`None` when deleted). Wakes every
    /// stream when the text served changed.
    pub fn set_kube_route(
        &mut self,
        namespace: &str,
        name: &str,
        route: Option<KubeRoute>,
    ) -> Option<Verdict> {
        let key = (namespace.to_owned(), name.to_owned());
        match route {
            Some(r) => self.kube_routes.routes.insert(key.clone(), r),
            None => self.kube_routes.routes.remove(&key),
        };
        self.reoverlay();
        self.kube_routes.verdicts.get(&key).cloned()
    }

    /// The text proxies are sent: the operator's file, with Kubernetes's accepted routes.
    pub fn served_text(&self) -> &str {
        match &self.kube_routes.served {
            Some(text) => text,
            None => self.mesh_text(),
        }
    }

    /// Works out again which routes serve and the text that holds them, from the operator's
    /// file in force: after a route changed, or the file did.
    pub(super) fn reoverlay(&mut self) {
        let file = self.mesh_text().to_owned();
        let Ok(file_mesh) = Mesh::from_yaml(&file) else {
            return;
        };
        let mut accepted: Vec<&KubeRoute> = Vec::new();
        let mut verdicts = BTreeMap::new();
        let mut served = None;
        for (key, route) in &self.kube_routes.routes {
            let mut with = accepted.clone();
            with.push(route);
            let verdict = overlay(&file, &file_mesh, &with).and_then(|text| {
                let prepared = prepare(&text, &format!("HTTPRoute {}/{}", key.0, key.1));
                match prepared.refusal() {
                    Some(why) => Err(Refused::Invalid(why)),
                    None => Ok(prepared),
                }
            });
            match verdict {
                Ok(prepared) => {
                    accepted.push(route);
                    served = Some(prepared);
                    verdicts.insert(key.clone(), Ok(()));
                }
                Err(why) => {
                    verdicts.insert(key.clone(), Err(why));
                }
            }
        }
        self.kube_routes.verdicts = verdicts;
        let text: Option<Arc<str>> = served.as_ref().map(|p| Arc::from(p.text()));
        let changed = text != self.kube_routes.served;
        // The mesh in force is always the one served (a file whose edit changed only its
        // comments serves the same text, but was just put in force without the routes).
        match served.and_then(|p| p.into_mesh()) {
            Some(mesh) => self.mesh = Arc::new(mesh),
            None if changed => self.mesh = Arc::new(file_mesh),
            None => {}
        }
        self.kube_routes.served = text;
        if changed {
            self.everyone();
        }
    }
}

/// The operator's `file` with `routes` added under their parents' `routes`, as JSON text.
fn overlay(file: &str, mesh: &Mesh, routes: &[&KubeRoute]) -> Result<String, Refused> {
    let tree = yaml::parse(file).map_err(|d| Refused::Invalid(d.to_string()))?;
    // Under each service: the routes to add, as (name, JSON).
    let mut under: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for r in routes {
        let service_of = |name: &str, what: &str| {
            mesh.service_on_kubernetes(&r.namespace, name)
                .map(str::to_owned)
                .ok_or_else(|| {
                    Refused::NotFound(format!(
                        "{what} Service `{name}` in namespace `{}` is no service of the mesh",
                        r.namespace
                    ))
                })
        };
        for backend in backends(&r.route) {
            service_of(&backend, "backend")?;
        }
        for parent in &r.parents {
            let service = service_of(parent, "parent")?;
            if mesh.services[&service].routes.contains(&r.name) {
                return Err(Refused::Invalid(format!(
                    "`{service}` has a route named `{}` in the mesh file already",
                    r.name
                )));
            }
            under
                .entry(service)
                .or_default()
                .push((r.name.clone(), r.route.to_string()));
        }
    }
    let has_routes: BTreeSet<&str> = mesh
        .services
        .iter()
        .filter(|(_, s)| !s.routes.is_empty())
        .map(|(n, _)| n.as_str())
        .collect();
    Ok(yaml::json::write(&tree, &|path| {
        let Some(rest) = path.strip_prefix("services.") else {
            return Vec::new();
        };
        let (service, into_routes) = match rest.strip_suffix(".routes") {
            Some(s) => (s, true),
            None => (rest, false),
        };
        let Some(added) = under.get(service) else {
            return Vec::new();
        };
        match (into_routes, has_routes.contains(service)) {
            (true, true) => added.clone(),
            (false, false) if !service.contains('.') => {
                let entries: Vec<String> = added
                    .iter()
                    .map(|(n, json)| format!("{}:{json}", serde_json::Value::from(n.as_str())))
                    .collect();
                vec![("routes".to_owned(), format!("{{{}}}", entries.join(",")))]
            }
            _ => Vec::new(),
        }
    }))
}

/// The Services a route's rules send to: backends and mirrors.
fn backends(route: &serde_json::Value) -> Vec<String> {
    let rules = route["rules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = Vec::new();
    for rule in rules {
        for b in rule["backends"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            out.extend(b["service"].as_str().map(str::to_owned));
        }
        for f in rule["filters"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            out.extend(
                f["request_mirror"]["backend"]["service"]
                    .as_str()
                    .map(str::to_owned),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests;
