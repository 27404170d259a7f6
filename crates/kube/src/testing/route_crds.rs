//! The Gateway API's HTTPRoute and GRPCRoute as CustomResourceDefinitions, for tests: the
//! kinds, versions, scope and status subresource of the official ones (gateway-api's
//! standard-install), with a schema that keeps every field rather than the official
//! validation — what the control plane reads and refuses is its own to test.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

use super::{ApiServer, Error};

impl ApiServer {
    /// Creates the HTTPRoute and GRPCRoute CRDs and waits until the API server serves them.
    pub async fn install_route_crds(&self) -> Result<(), Error> {
        let crds = Api::<CustomResourceDefinition>::all(self.client()?);
        for (kind, plural) in [("HTTPRoute", "httproutes"), ("GRPCRoute", "grpcroutes")] {
            let crd: CustomResourceDefinition = serde_json::from_value(definition(kind, plural))
                .map_err(|e| Error::io("the route CRD", std::io::Error::other(e)))?;
            crds.create(&PostParams::default(), &crd).await?;
        }
        let served = |crd: &CustomResourceDefinition| {
            crd.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
        };
        for _ in 0..200 {
            let http = crds.get("httproutes.gateway.networking.k8s.io").await?;
            let grpc = crds.get("grpcroutes.gateway.networking.k8s.io").await?;
            if served(&http) && served(&grpc) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Error::io(
            "the route CRDs",
            std::io::Error::other("not established within 10 s"),
        ))
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
