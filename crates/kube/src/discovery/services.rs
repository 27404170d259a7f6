//! The watch on every namespace's Services: each one's ClusterIP (none for a headless one),
//! which the control plane serves as its mesh service's address — where a captured app's
//! connection to the name (resolved by the cluster's DNS) goes. Breaks are retried with kube's
//! back-off; the relist after one tells of Services deleted meanwhile.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio_stream::StreamExt;

use super::ServiceKey;

/// A Service's ClusterIP, when it has one (`None` for a headless Service, `clusterIP: None`).
pub fn cluster_ip(service: &Service) -> Option<IpAddr> {
    service.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()
}

/// Watches Services and tells `sink` each change of one's ClusterIP (`None`: gone or none).
pub async fn watch_services(client: Client, mut sink: impl FnMut(&ServiceKey, Option<IpAddr>)) {
    let stream =
        watcher::watcher(Api::<Service>::all(client), watcher::Config::default()).default_backoff();
    tokio::pin!(stream);
    let mut told: BTreeMap<ServiceKey, IpAddr> = BTreeMap::new();
    let mut relisted: Option<BTreeMap<ServiceKey, IpAddr>> = None;
    let mut tell =
        |told: &mut BTreeMap<ServiceKey, IpAddr>, key: ServiceKey, ip: Option<IpAddr>| {
            if told.get(&key).copied() != ip {
                match ip {
                    Some(ip) => told.insert(key.clone(), ip),
                    None => told.remove(&key),
                };
                sink(&key, ip);
            }
        };
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(s)) => {
                if let Some(key) = key_of(&s) {
                    tell(&mut told, key, cluster_ip(&s));
                }
            }
            Ok(Event::Delete(s)) => {
                if let Some(key) = key_of(&s) {
                    tell(&mut told, key, None);
                }
            }
            Ok(Event::Init) => relisted = Some(BTreeMap::new()),
            Ok(Event::InitApply(s)) => {
                if let (Some(list), Some(key), Some(ip)) =
                    (relisted.as_mut(), key_of(&s), cluster_ip(&s))
                {
                    list.insert(key, ip);
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
                for (key, ip) in list {
                    tell(&mut told, key, Some(ip));
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
