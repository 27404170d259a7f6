//! Kubernetes discovery's bookkeeping (`hopwise_kube::discovery::Slices`) on any run of watch
//! events: one a line, its first byte the event (`+` applied, `-` deleted, `r` a relist begins,
//! `l` a slice of the relist, `L` the relist is complete), the rest an `EndpointSlice` as JSON
//! (lines that do not decode are skipped, as the watcher would fail them). Never a panic, and:
//! - after every event, what the changes told so far say of each Service equals what its slices
//!   now say, recomputed from scratch here by the API's rules (an unknown `ready` is ready, an
//!   unknown `terminating` is not; only IPv4 and IPv6 slices list addresses; ready in one slice
//!   wins over terminating in another; TCP ports by name, the first slice's number standing) —
//!   the watch's consumer never drifts from the cluster;
//! - no change tells what was already told, and one event tells a Service at most once;
//! - at the end, a relist that finds the same slices tells nothing, and a fresh `Slices` fed
//!   them as a relist tells exactly the recomputed Services.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hopwise_kube::discovery::{Change, SERVICE_NAME_LABEL, ServiceKey, Slices};
use hopwise_model::kubernetes::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use libfuzzer_sys::fuzz_target;

/// Slices by namespace and name, as the cluster holds them.
type Cluster = BTreeMap<(String, String), EndpointSlice>;

fuzz_target!(|data: &[u8]| {
    let mut slices = Slices::default();
    let mut cluster = Cluster::new();
    let mut relist: Option<Cluster> = None;
    let mut told: BTreeMap<ServiceKey, Endpoints> = BTreeMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Some((&op, json)) = line.split_first() else {
            continue;
        };
        let slice = serde_json::from_slice::<EndpointSlice>(json).ok();
        let changes = match (op, slice) {
            (b'+', Some(s)) => {
                let changes = slices.apply(&s);
                if let Some(k) = key(&s) {
                    cluster.insert(k, s);
                }
                changes
            }
            (b'-', Some(s)) => {
                let changes = slices.delete(&s);
                if let Some(k) = key(&s) {
                    cluster.remove(&k);
                }
                changes
            }
            (b'r', _) => {
                slices.relist();
                relist = Some(Cluster::new());
                Vec::new()
            }
            (b'l', Some(s)) => {
                slices.listed(&s);
                if let (Some(list), Some(k)) = (relist.as_mut(), key(&s)) {
                    list.insert(k, s);
                }
                Vec::new()
            }
            (b'L', _) => {
                let changes = slices.listed_all();
                if let Some(list) = relist.take() {
                    cluster = list;
                }
                changes
            }
            _ => continue,
        };
        tell(&mut told, changes);
        assert_eq!(told, expected(&cluster), "told drifted from the slices");
    }

    // The same slices relisted: nothing new.
    slices.relist();
    for s in cluster.values() {
        slices.listed(s);
    }
    assert!(
        slices.listed_all().is_empty(),
        "a relist of the same slices told something"
    );

    // From scratch: a relist tells every Service the slices list, as recomputed.
    let mut fresh = Slices::default();
    fresh.relist();
    for s in cluster.values() {
        fresh.listed(s);
    }
    let mut from_scratch = BTreeMap::new();
    tell(&mut from_scratch, fresh.listed_all());
    assert_eq!(from_scratch, expected(&cluster));
});

/// Applies one event's changes to what the consumer was told, checking each is news.
fn tell(told: &mut BTreeMap<ServiceKey, Endpoints>, changes: Vec<Change>) {
    let mut once = BTreeSet::new();
    for c in changes {
        assert!(once.insert(c.service.clone()), "{:?} told twice", c.service);
        assert_ne!(
            told.get(&c.service),
            c.endpoints.as_ref(),
            "told nothing new"
        );
        match c.endpoints {
            Some(e) => told.insert(c.service, e),
            None => told.remove(&c.service),
        };
    }
}

fn key(s: &EndpointSlice) -> Option<(String, String)> {
    Some((s.metadata.namespace.clone()?, s.metadata.name.clone()?))
}

/// What every Service's slices list together, by the API's rules.
fn expected(cluster: &Cluster) -> BTreeMap<ServiceKey, Endpoints> {
    let mut out: BTreeMap<ServiceKey, Endpoints> = BTreeMap::new();
    for s in cluster.values() {
        let labels = s.metadata.labels.as_ref();
        let (Some(namespace), Some(name)) = (
            s.metadata.namespace.clone(),
            labels.and_then(|l| l.get(SERVICE_NAME_LABEL)).cloned(),
        ) else {
            continue;
        };
        let e = out.entry(ServiceKey { namespace, name }).or_default();
        // TCP ports by name, in any slice: the first slice (by name) and the first of a name in
        // it stand.
        for p in s.ports.iter().flatten() {
            let tcp = matches!(p.protocol.as_deref(), None | Some("TCP"));
            if let (true, Some(port)) = (tcp, p.port.and_then(|n| u16::try_from(n).ok())) {
                let name = p.name.clone().unwrap_or_default();
                e.ports.entry(name).or_insert(port);
            }
        }
        if !matches!(s.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        for endpoint in s.endpoints.iter().flatten() {
            let c = endpoint.conditions.as_ref();
            let terminating = c.and_then(|c| c.terminating) == Some(true);
            let ready = c.and_then(|c| c.ready) != Some(false);
            let ips = endpoint
                .addresses
                .iter()
                .filter_map(|a| a.parse::<IpAddr>().ok());
            if terminating {
                e.terminating.extend(ips);
            } else if ready {
                e.ready.extend(ips);
            }
        }
    }
    for e in out.values_mut() {
        let ready = e.ready.clone();
        e.terminating.retain(|ip| !ready.contains(ip));
    }
    out
}
