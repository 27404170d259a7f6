//! `mesh.kubernetes` and `services.<name>.kubernetes` as written: which namespace and
//! ServiceAccount a service's pods run as, so its identity is the ServiceAccount's
//! (`spiffe://<trust domain>/ns/<namespace>/sa/<name>`). Each name is checked where it stands;
//! the meaning is [`crate::kubernetes`]'s.

use schemars::JsonSchema;
use serde::Serialize;

use crate::kubernetes::{check_namespace, check_service_account};
use crate::read::Reader;
use crate::yaml::Node;

/// `mesh.kubernetes`: the mesh runs on Kubernetes; every service's identity is its
/// ServiceAccount's (docs/kubernetes.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMeshKubernetes {
    /// The namespace of every service that names none. Default `default`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `services.<name>.kubernetes`: where the service's pods run and as whom.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawKubernetes {
    /// Its pods' namespace. Default: `mesh.kubernetes.namespace`, else `default`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its pods' ServiceAccount, whose token proves who they are. Default: the service's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
}

fn name(
    check: fn(&str) -> Result<(), String>,
) -> impl Fn(&mut Reader, &Node, &str) -> Option<String> {
    move |r, n, p| {
        let text = r.string(n, p)?;
        match check(&text) {
            Ok(()) => Some(text),
            Err(message) => {
                r.error(p, n.pos, message);
                None
            }
        }
    }
}

pub(super) fn read_mesh_kubernetes(
    r: &mut Reader,
    node: &Node,
    path: &str,
) -> Option<RawMeshKubernetes> {
    let mut f = r.fields(node, path)?;
    let k = RawMeshKubernetes {
        namespace: f.get(r, "namespace", name(check_namespace)),
    };
    f.finish(r);
    Some(k)
}

pub(super) fn read_kubernetes(r: &mut Reader, node: &Node, path: &str) -> Option<RawKubernetes> {
    let mut f = r.fields(node, path)?;
    let k = RawKubernetes {
        namespace: f.get(r, "namespace", name(check_namespace)),
        service_account: f.get(r, "service_account", name(check_service_account)),
    };
    f.finish(r);
    Some(k)
}
