//! The watch on every namespace's Services: each one's ClusterIP (none for a headless one) and
//! TCP ports, which the control plane serves as its mesh service's `address` — where a captured
//! app's connection to the name (resolved by the cluster's DNS) goes — and `ports`. Breaks are
//! retried with kube's back-off; the relist after one tells of Services deleted meanwhile.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hopwise_model::kubernetes::{Front, PortTarget, ServicePort};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio_stream::StreamExt;

use super::ServiceKey;

/// A Service's ClusterIP, when it has one (`None` for a headless Service, `clusterIP: None`).
pub fn cluster_ip(service: &Service) -> Option<IpAddr> {
    service.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()
}

/// What a Service says of itself to the mesh: its ClusterIP and TCP ports (a `targetPort` left
/// out is the `port`, as the API server defaults it; one out of range is skipped).
pub fn front(service: &Service) -> Front {
    let ports = (service.spec.as_ref())
        .and_then(|s| s.ports.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let ports = ports
        .iter()
        .filter(|p| p.protocol.as_deref().is_none_or(|t| t == "TCP"))
        .filter_map(|p| {
            let port = u16::try_from(p.port).ok()?;
            let target = match &p.target_port {
                None => PortTarget::Number(port),
                Some(IntOrString::Int(n)) => PortTarget::Number(u16::try_from(*n).ok()?),
                Some(IntOrString::String(name)) => PortTarget::Name(name.clone()),
            };
            Some(ServicePort {
                name: p.name.clone().unwrap_or_default(),
                port,
                target,
            })
        })
        .collect();
    Front {
        cluster_ip: cluster_ip(service),
        ports,
    }
}

/// Watches Services and tells `sink` each change of one's front (`None`: gone).
pub async fn watch_services(client: Client, mut sink: impl FnMut(&ServiceKey, Option<Front>)) {
    let stream =
        watcher::watcher(Api::<Service>::all(client), watcher::Config::default()).default_backoff();
    tokio::pin!(stream);
    let mut told: BTreeMap<ServiceKey, Front> = BTreeMap::new();
    let mut relisted: Option<BTreeMap<ServiceKey, Front>> = None;
    let mut tell = |told: &mut BTreeMap<ServiceKey, Front>, key: ServiceKey, f: Option<Front>| {
        if told.get(&key) != f.as_ref() {
            match &f {
                Some(f) => told.insert(key.clone(), f.clone()),
                None => told.remove(&key),
            };
            sink(&key, f);
        }
    };
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(s)) => {
                if let Some(key) = key_of(&s) {
                    tell(&mut told, key, Some(front(&s)));
                }
            }
            Ok(Event::Delete(s)) => {
                if let Some(key) = key_of(&s) {
                    tell(&mut told, key, None);
                }
            }
            Ok(Event::Init) => relisted = Some(BTreeMap::new()),
            Ok(Event::InitApply(s)) => {
                if let (Some(list), Some(key)) = (relisted.as_mut(), key_of(&s)) {
                    list.insert(key, front(&s));
                }
            }
            Ok(Event::InitDone) => {
                let list = relisted.take().unwrap_or_default();
                let gone: Vec<ServiceKey> = told
                    .keys()
                    .filter(|k| !list.contains_key(k))
                    .cloned()
                    .collect();
                for key in gone {
                    tell(&mut told, key, None);
                }
                for (key, f) in list {
                    tell(&mut told, key, Some(f));
                }
            }
            Err(e) => tracing::debug!("Services: the watch broke ({e}); retrying"),
        }
    }
}

fn key_of(s: &Service) -> Option<ServiceKey> {
    Some(ServiceKey {
        namespace: s.metadata.namespace.clone()?,
        name: s.metadata.name.clone()?,
    })
}
