//! The Gateway API's HTTPRoute and GRPCRoute as CustomResourceDefinitions, for tests: the
//! kinds, versions, scope and status subresource of the official ones (gateway-api's
//! standard-install), with a schema that keeps every field rather than the official
//! validation — what the control plane reads and refuses is its own to test.

use super::{ApiServer, Error};

impl ApiServer {
    /// Creates the HTTPRoute and GRPCRoute CRDs and waits until the API server serves them.
    pub async fn install_route_crds(&self) -> Result<(), Error> {
        self.install_crds(&[
            definition("HTTPRoute", "httproutes"),
            definition("GRPCRoute", "grpcroutes"),
        ])
        .await
    }
}

fn definition(kind: &str, plural: &str) -> serde_json::Value {
    let open =
        serde_json::json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.gateway.networking.k8s.io"),
            // A *.k8s.io group needs it; the official CRDs carry this one.
            "annotations": { "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api/pull/2466" },
        },
        "spec": {
            "group": "gateway.networking.k8s.io",
            "scope": "Namespaced",
            "names": { "kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List") },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": { "spec": open, "status": open },
                }},
            }],
        },
    })
}
