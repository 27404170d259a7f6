//! Discovery: what each Kubernetes Service's EndpointSlices say of its pods, as the control
//! plane's typed input ([`Endpoints`]: ready addresses take traffic, terminating ones drain).
//! [`Slices`] is the pure part — the slices seen, merged per Service, and the changes they
//! make — fed by the watch in [`watch`], which relists after every break (the API server away,
//! a watch expired) and so catches up with whatever changed meanwhile; until then the control
//! plane keeps what it was last told.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hopwise_model::kubernetes::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;

mod services;
mod watch;
pub use services::{cluster_ip, front, watch_services};
pub use watch::{client, watch};

/// The label that names a slice's Service (set by the EndpointSlice controller).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

/// What a Service's slices now say (`None`: it has no slice left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub service: ServiceKey,
    pub endpoints: Option<Endpoints>,
}

/// One slice, read: its Service and what it lists.
fn read(slice: &EndpointSlice) -> Option<(ServiceKey, Endpoints)> {
    let service = ServiceKey {
        namespace: slice.metadata.namespace.clone()?,
        name: slice
            .metadata
            .labels
            .as_ref()?
            .get(SERVICE_NAME_LABEL)?
            .clone(),
    };
    let mut listed = Endpoints::default();
    // The TCP ports, each named as its Service port (UDP and SCTP are not the mesh's).
    for p in slice.ports.iter().flatten() {
        let tcp = p.protocol.as_deref().is_none_or(|t| t == "TCP");
        if let (true, Some(port)) = (tcp, p.port.and_then(|n| u16::try_from(n).ok())) {
            // A name given twice (the API server refuses it): the first stands.
            let name = p.name.clone().unwrap_or_default();
            listed.ports.entry(name).or_insert(port);
        }
    }
    // FQDN slices name no pod address.
    if slice.address_type != "IPv4" && slice.address_type != "IPv6" {
        return Some((service, listed));
    }
    for endpoint in slice.endpoints.iter().flatten() {
        let conditions = endpoint.conditions.clone().unwrap_or_default();
        // The API's rule: an unknown `ready` counts as ready, an unknown `terminating` as not.
        let set = if conditions.terminating.unwrap_or(false) {
            &mut listed.terminating
        } else if conditions.ready.unwrap_or(true) {
            &mut listed.ready
        } else {
            continue;
        };
        set.extend(
            endpoint
                .addresses
                .iter()
                .filter_map(|a| a.parse::<IpAddr>().ok()),
        );
    }
    Some((service, listed))
}

/// The slices seen, by namespace and name, and what each Service was last said to list.
#[derive(Debug, Default)]
pub struct Slices {
    seen: BTreeMap<(String, String), (ServiceKey, Endpoints)>,
    /// A relist in progress: the slices listed so far.
    relist: Option<BTreeMap<(String, String), (ServiceKey, Endpoints)>>,
    told: BTreeMap<ServiceKey, Endpoints>,
}

fn key(slice: &EndpointSlice) -> Option<(String, String)> {
    Some((
        slice.metadata.namespace.clone()?,
        slice.metadata.name.clone()?,
    ))
}

impl Slices {
    /// A slice was added or changed.
    pub fn apply(&mut self, slice: &EndpointSlice) -> Vec<Change> {
        let Some(k) = key(slice) else {
            return Vec::new();
        };
        let mut touched: BTreeSet<ServiceKey> =
            self.seen.get(&k).map(|s| s.0.clone()).into_iter().collect();
        match read(slice) {
            Some(read) => {
                touched.insert(read.0.clone());
                self.seen.insert(k, read);
            }
            None => {
                self.seen.remove(&k);
            }
        }
        self.changes(touched)
    }

    /// A slice was deleted.
    pub fn delete(&mut self, slice: &EndpointSlice) -> Vec<Change> {
        let touched = key(slice)
            .and_then(|k| self.seen.remove(&k))
            .map(|(service, _)| service);
        self.changes(touched.into_iter().collect())
    }

    /// The watch restarted: a full list follows.
    pub fn relist(&mut self) {
        self.relist = Some(BTreeMap::new());
    }

    /// A slice of the list in progress. Read as [`Slices::apply`] reads it: the last word on a
    /// slice stands, so one listed again as not a Service's leaves the list.
    pub fn listed(&mut self, slice: &EndpointSlice) {
        let (Some(list), Some(k)) = (self.relist.as_mut(), key(slice)) else {
            return;
        };
        match read(slice) {
            Some(read) => list.insert(k, read),
            None => list.remove(&k),
        };
    }

    /// The list is complete: it replaces what was seen, and every Service it changed (one
    /// whose slices went while the watch was away among them) is told.
    pub fn listed_all(&mut self) -> Vec<Change> {
        let Some(list) = self.relist.take() else {
            return Vec::new();
        };
        self.seen = list;
        let mut touched: BTreeSet<ServiceKey> = self.told.keys().cloned().collect();
        touched.extend(self.seen.values().map(|(s, _)| s.clone()));
        self.changes(touched)
    }

    /// What `service`'s slices list together (`None`: no slice).
    fn merged(&self, service: &ServiceKey) -> Option<Endpoints> {
        let mut merged: Option<Endpoints> = None;
        for (s, listed) in self.seen.values() {
            if s == service {
                let m = merged.get_or_insert_with(Endpoints::default);
                m.ready.extend(&listed.ready);
                m.terminating.extend(&listed.terminating);
                // Pods that resolve a named port differently get slices of their own: the
                // first slice's number stands (slices are kept in name order).
                for (name, port) in &listed.ports {
                    m.ports.entry(name.clone()).or_insert(*port);
                }
            }
        }
        if let Some(m) = merged.as_mut() {
            // Ready in one slice and terminating in another (a pod moving): ready wins.
            let ready = m.ready.clone();
            m.terminating.retain(|ip| !ready.contains(ip));
        }
        merged
    }

    /// The changes to tell for `touched`: those whose merged list differs from what was told.
    fn changes(&mut self, touched: BTreeSet<ServiceKey>) -> Vec<Change> {
        let mut out = Vec::new();
        for service in touched {
            let now = self.merged(&service);
            if self.told.get(&service) == now.as_ref() {
                continue;
            }
            match &now {
                Some(e) => self.told.insert(service.clone(), e.clone()),
                None => self.told.remove(&service),
            };
            out.push(Change {
                service,
                endpoints: now,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests;
