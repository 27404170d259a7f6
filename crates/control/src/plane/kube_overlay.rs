//! What Kubernetes adds to the mesh file the plane serves: Services' ClusterIPs as their mesh
//! services' `address` (what captured apps reach a service at, since its name resolves there)
//! and their ports as its `ports` (named target ports as its EndpointSlices resolved them),
//! and HTTPRoutes and GRPCRoutes whose parent is a Service under that service's `routes` — the
//! plane's typed inputs, and the operator's file with them in, as JSON text (YAML reads it; keys
//! in file order). Each route is checked as `hopwise control apply` checks a file, on top of the
//! addresses and the routes accepted before it (by namespace and name): one that `hopwise
//! check` refuses, or that names a Service the mesh does not have, is refused alone with the
//! reason, and the rest serve. The store keeps only the operator's file; what Kubernetes says
//! comes back from it after a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use hopwise_model::kubernetes::{Front, KubeRoute};
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

/// What Kubernetes holds, by namespace and name, and what was made of each route.
#[derive(Debug)]
pub(super) struct Overlay {
    /// Services' ClusterIPs and ports.
    fronts: BTreeMap<(String, String), Front>,
    routes: BTreeMap<(String, String), KubeRoute>,
    verdicts: BTreeMap<(String, String), Verdict>,
    /// Counts the times any route's verdict changed, so the routes' watch writes their status
    /// again when a new mesh file (not the route) changed what was made of them.
    verdicts_changed: tokio::sync::watch::Sender<u64>,
    /// The text served with the accepted routes in (`None`: the operator's file as it is).
    pub(super) served: Option<Arc<str>>,
}

impl Default for Overlay {
    fn default() -> Overlay {
        Overlay {
            fronts: BTreeMap::new(),
            routes: BTreeMap::new(),
            verdicts: BTreeMap::new(),
            verdicts_changed: tokio::sync::watch::Sender::new(0),
            served: None,
        }
    }
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
            Some(r) => self.kube.routes.insert(key.clone(), r),
            None => self.kube.routes.remove(&key),
        };
        self.reoverlay();
        self.kube.verdicts.get(&key).cloned()
    }

    /// Records Service `namespace/name`'s ClusterIP and ports (`None`: deleted) and serves the
    /// mesh file with them as its mesh service's `address` (none for a headless Service) and
    /// `ports`. Returns whether the text served changed (every stream is then woken).
    pub fn set_front(&mut self, namespace: &str, name: &str, front: Option<Front>) -> bool {
        let key = (namespace.to_owned(), name.to_owned());
        if self.kube.fronts.get(&key) == front.as_ref() {
            return false;
        }
        match front {
            Some(f) => self.kube.fronts.insert(key, f),
            None => self.kube.fronts.remove(&key),
        };
        let stamp = self.config_stamp;
        self.reoverlay();
        self.config_stamp != stamp
    }

    /// What was last made of route `namespace/name` (`None`: not known to the plane).
    pub fn kube_route_verdict(&self, namespace: &str, name: &str) -> Option<Verdict> {
        let key = (namespace.to_owned(), name.to_owned());
        self.kube.verdicts.get(&key).cloned()
    }

    /// Changes each time some route's verdict changed, whatever changed it.
    pub fn kube_verdicts_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.kube.verdicts_changed.subscribe()
    }

    /// The text proxies are sent: the operator's file, with what Kubernetes added.
    pub fn served_text(&self) -> &str {
        match &self.kube.served {
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
        let check = |text: String, what: &str| {
            let prepared = prepare(&text, what);
            match prepared.refusal() {
                Some(why) => Err(Refused::Invalid(why)),
                None => Ok(prepared),
            }
        };
        let mut fronts = self.fronts_in(&file_mesh);
        // The Services alone first: if they do not fit the file (an address the file gives
        // another service), they are left out, and said so.
        let mut served = None;
        if !fronts.is_empty() {
            match overlay(&file, &file_mesh, &fronts, &[])
                .and_then(|text| check(text, "the Services' ClusterIPs and ports"))
            {
                Ok(prepared) => served = Some(prepared),
                Err(why) => {
                    tracing::warn!(
                        "Services' ClusterIPs and ports not served as their addresses and ports: {why:?}"
                    );
                    fronts.clear();
                }
            }
        }
        let mut accepted: Vec<&KubeRoute> = Vec::new();
        let mut verdicts = BTreeMap::new();
        for (key, route) in &self.kube.routes {
            let mut with = accepted.clone();
            with.push(route);
            let verdict = overlay(&file, &file_mesh, &fronts, &with)
                .and_then(|text| check(text, &format!("HTTPRoute {}/{}", key.0, key.1)));
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
        if verdicts != self.kube.verdicts {
            self.kube.verdicts = verdicts;
            self.kube.verdicts_changed.send_modify(|n| *n += 1);
        }
        let text: Option<Arc<str>> = served.as_ref().map(|p| Arc::from(p.text()));
        let changed = text != self.kube.served;
        // The mesh in force is always the one served (a file whose edit changed only its
        // comments serves the same text, but was just put in force without the routes).
        match served.and_then(|p| p.into_mesh()) {
            Some(mesh) => self.mesh = Arc::new(mesh),
            None if changed => self.mesh = Arc::new(file_mesh),
            None => {}
        }
        self.kube.served = text;
        if changed {
            self.everyone();
        }
    }
}

/// What a Service adds to its mesh service: its ClusterIP, its ports (port, target port).
#[derive(Debug)]
struct Served {
    address: Option<IpAddr>,
    ports: Vec<(u16, u16)>,
}

impl Plane {
    /// What the Services that are services of `mesh` add to them, by mesh service: named
    /// target ports resolved by what their EndpointSlices list.
    fn fronts_in(&self, mesh: &Mesh) -> BTreeMap<String, Served> {
        (self.kube.fronts.iter())
            .filter_map(|((ns, name), front)| {
                let service = mesh.service_on_kubernetes(ns, name)?.to_owned();
                let slices = (self.discovered.get(&(ns.clone(), name.clone()))).map(|e| &e.ports);
                let served = Served {
                    address: front.cluster_ip,
                    ports: front.ports_with(slices),
                };
                Some((service, served))
            })
            .collect()
    }

    /// Whether Service `namespace/name` names a target port, which its slices resolve.
    pub(super) fn names_targets(&self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_owned(), name.to_owned());
        self.kube.fronts.get(&key).is_some_and(Front::names_targets)
    }
}

/// The operator's `file` with each service's ClusterIP as its `address`, its Service's ports as
/// its `ports` (in place of the file's), and `routes` added under their parents' `routes`, as
/// JSON text.
fn overlay(
    file: &str,
    mesh: &Mesh,
    fronts: &BTreeMap<String, Served>,
    routes: &[&KubeRoute],
) -> Result<String, Refused> {
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
        if service.contains('.') {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let (false, Some(front)) = (into_routes, fronts.get(service)) {
            if let Some(ip) = front.address {
                out.push(("address".to_owned(), format!("\"{ip}\"")));
            }
            if !front.ports.is_empty() {
                let list: Vec<String> = (front.ports.iter())
                    .map(|(port, target)| format!("{{\"port\":{port},\"target_port\":{target}}}"))
                    .collect();
                out.push(("ports".to_owned(), format!("[{}]", list.join(","))));
            }
        }
        let Some(added) = under.get(service) else {
            return out;
        };
        match (into_routes, has_routes.contains(service)) {
            (true, true) => out.extend(added.iter().cloned()),
            (false, false) => {
                let entries: Vec<String> = added
                    .iter()
                    .map(|(n, json)| format!("{}:{json}", serde_json::Value::from(n.as_str())))
                    .collect();
                out.push(("routes".to_owned(), format!("{{{}}}", entries.join(","))));
            }
            _ => {}
        }
        out
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
