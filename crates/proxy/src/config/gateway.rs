//! A gateway's part of a proxy's configuration (`services.<name>.gateway`, docs/routes.md
//! "Gateway"): its listeners, certificates and limits as the model resolved them, with the
//! directory the certificate files are relative to, and the cluster that stands for the gateway
//! itself — the parent of its routes, so the outbound path routes a stranger's request exactly
//! as a caller's request to a service with routes (GAMMA's parent swapped for a Gateway).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hopwise_model::gateway::Gateway;
use hopwise_model::{Mesh, Protocol, Service};
use serde::Serialize;

use super::{Cluster, Target};
use crate::route::RouteTable;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GatewayConfig {
    /// Listeners, certificates (files as written), rate limits, body limit.
    #[serde(flatten)]
    pub gateway: Gateway,
    /// The certificate files are relative to it (the mesh file's directory).
    pub base: PathBuf,
}

impl GatewayConfig {
    /// The gateway of `service`, if it is one.
    pub fn of(service: &Service, base: &Path) -> Option<GatewayConfig> {
        Some(GatewayConfig {
            gateway: service.gateway.clone()?,
            base: base.to_owned(),
        })
    }

    /// The cluster a gateway's listeners dispatch to: the gateway itself, with no copies (no
    /// request is ever sent to it), whose routes pick the backend among its calls.
    pub fn parent(mesh: &Mesh, service: &Service) -> Cluster {
        Cluster {
            service: service.name.clone(),
            protocol: Protocol::Http,
            target: Target::Mesh {
                endpoints: Vec::new(),
                labels: Default::default(),
                identity: mesh.identity(&service.name),
            },
            routes: Vec::new(),
            tcp: None,
            ports: Default::default(),
            upgrade: None,
            table: RouteTable::of(&service.routes).map(Arc::new),
        }
    }
}
