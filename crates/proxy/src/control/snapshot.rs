//! A snapshot made the proxy's configuration and put in force: the cached form of a snapshot,
//! the configuration the mesh file gives this copy (through the same code as `hopwise proxy
//! --config`), the registry's copies applied at once, and a new mesh file put in force whole
//! through [`crate::live::next_config`] or refused whole with the reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use hopwise_model::Mesh;
use hopwise_model::labels::Labels;

use super::{Cached, ControlError, ControlOptions, pb};
use crate::config::{ProxyConfig, Target};
use crate::server::State;

/// The mesh's trust domain, which the control plane's identity must be in.
pub(super) fn trust_domain(cached: &Cached) -> Option<String> {
    Mesh::from_yaml(&cached.mesh_yaml)
        .ok()
        .map(|m| m.trust_domain)
}

/// A whole snapshot's trust bundle ("" when the control plane sends none).
pub(super) fn bundle(s: &pb::Snapshot) -> &str {
    s.trust_bundle_pem.as_deref().unwrap_or_default()
}

impl ControlOptions {
    /// What the proxy keeps of a whole snapshot: an endpoint that is no socket address is
    /// dropped.
    pub fn to_cached(&self, s: &pb::Snapshot) -> Cached {
        Cached {
            version: s.version,
            config_version: s.config_version,
            mesh_yaml: s.mesh_yaml.clone().unwrap_or_default(),
            upstreams: s
                .upstreams
                .iter()
                .map(|u| {
                    (
                        u.service.clone(),
                        u.endpoints.iter().filter_map(|e| e.parse().ok()).collect(),
                    )
                })
                .collect(),
            allowed_callers: s.allowed_callers.clone(),
            labels: (s.upstreams.iter())
                .map(|u| (u.service.clone(), labels_of(u)))
                .filter(|(_, l)| !l.is_empty())
                .collect(),
        }
    }

    /// The proxy's configuration from a snapshot: the mesh file through the same code as
    /// `hopwise proxy --config`, with the copies the registry knows.
    pub fn config(&self, cached: &Cached) -> Result<ProxyConfig, ControlError> {
        let mesh = Mesh::from_yaml(&cached.mesh_yaml)
            .map_err(|d| ControlError::Config(d.render("the control plane's mesh file")))?;
        // A copy the file does not list (started by hand, or by `hopwise up`) takes its ports
        // from the command line: adding a copy touches no file.
        let listed = mesh
            .services
            .get(&self.service)
            .is_some_and(|s| s.copies.len() > self.copy);
        let mut config = ProxyConfig::from_mesh(
            &mesh,
            &self.service,
            if listed { self.copy } else { 0 },
            &self.cache,
            Some(&self.cache),
        )
        .map_err(|e| ControlError::Config(e.to_string()))?;
        if !listed {
            config.copy = self.copy;
            config.app = None;
            config.inbound = None;
            config.outbound = None;
            config.admin = None;
            config.upstream_ports.clear();
        }
        config.certs = Some(self.cert_files());
        apply_endpoints(&mut config, cached);
        // Who may call is read from the mesh file itself, by the same code as `--config`.
        Ok(config)
    }
}

/// An upstream's endpoints' labels: an endpoint that is no socket address is dropped, as in
/// `to_cached`.
fn labels_of(u: &pb::Upstream) -> BTreeMap<SocketAddr, Labels> {
    (u.labelled.iter())
        .filter(|l| !l.labels.is_empty())
        .filter_map(|l| Some((l.endpoint.parse().ok()?, l.labels.clone())))
        .collect()
}

/// The registry's copies, with their labels, in place of the file's.
fn apply_endpoints(config: &mut ProxyConfig, cached: &Cached) {
    let none = BTreeMap::new();
    for (name, addrs) in &cached.upstreams {
        if let Some(cluster) = config.clusters.get_mut(name)
            && let Target::Mesh {
                endpoints, labels, ..
            } = &mut cluster.target
        {
            endpoints.clone_from(addrs);
            labels.clone_from(cached.labels.get(name).unwrap_or(&none));
        }
    }
}

/// Applies a new snapshot. New copies of the upstreams in force take effect at once (they are
/// the registry's, not policy: they follow it whatever becomes of the mesh file). A changed mesh
/// file is derived as at start and put in force whole for new requests — or, when something the
/// running process fixed at start would change (see [`crate::live::next_config`]), or it cannot
/// be used, refused whole with the reason, the configuration in force staying as it was.
pub(super) fn apply(
    opts: &ControlOptions,
    state: &State,
    base: &mut ProxyConfig,
    old: &Cached,
    fresh: &Cached,
) -> Result<(), String> {
    let live = state.live();
    let none = BTreeMap::new();
    for (service, addrs) in &fresh.upstreams {
        if let Some(shared) = live.clusters.get(service) {
            shared.update_copies(addrs, fresh.labels.get(service).unwrap_or(&none));
        }
    }
    if fresh.mesh_yaml == old.mesh_yaml {
        return Ok(());
    }
    let keeping = |why: String| {
        format!(
            "mesh version {} not applied, keeping version {}: {why}",
            fresh.config_version, old.config_version
        )
    };
    let new_base = opts.config(fresh).map_err(|e| keeping(e.to_string()))?;
    let next = crate::live::next_config(&live.config, base, new_base.clone())
        .map_err(|e| keeping(e.to_string()))?;
    let next = with_destinations(next, &fresh.mesh_yaml);
    state.replace(next).map_err(|e| keeping(e.to_string()))?;
    tracing::info!(
        "mesh version {} in force (snapshot {})",
        fresh.config_version,
        fresh.version
    );
    *base = new_base;
    Ok(())
}

/// A capture listener's destinations from the new mesh file: its listener and namespace stay
/// (fixed at start), the services' addresses follow the file — on Kubernetes the control plane
/// adds Services' ClusterIPs as they appear, after proxies started.
fn with_destinations(mut next: ProxyConfig, mesh_yaml: &str) -> ProxyConfig {
    if let (Some(capture), Ok(mesh)) = (next.capture.as_mut(), Mesh::from_yaml(mesh_yaml)) {
        capture.destinations = hopwise_model::capture::Destinations::of(&mesh);
    }
    next
}

#[cfg(test)]
mod tests;
