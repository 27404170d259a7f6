//! hopwise on Kubernetes. Today: sidecar injection (`inject`: the decision and the JSON patch,
//! pure; `webhook`: the mutating admission webhook's HTTPS server; `registration`: the
//! `MutatingWebhookConfiguration` that sends pods to it), its serving certificate (`cert`) and
//! the manifests `hopwise install` prints (`install`); under feature `testing`, a real etcd and
//! kube-apiserver on loopback with `kube` clients for them; `identity`: a pod's ServiceAccount
//! from its token, by TokenReview; `discovery`: Services' EndpointSlices as the control plane's
//! typed input; `routes`: HTTPRoutes and GRPCRoutes whose parent is a Service, read into the mesh
//! file's words, their status written back; `mesh_resource`: the mesh file as a cluster-wide `Mesh`
//! custom resource, its schema from `hopwise schema`, its status what the control plane made of
//! it. Of hopwise's crates it depends on `hopwise-model` only
//! (the typed input's types); the `hopwise` binary uses it, and the `hopwise-proxy` sidecar
//! never links it (scripts/test checks).

pub mod cert;
pub mod discovery;
pub mod identity;
pub mod inject;
pub mod install;
pub mod mesh_resource;
pub mod registration;
pub mod review;
pub mod routes;
#[cfg(feature = "testing")]
pub mod testing;
pub mod webhook;

/// The API server's client the watches take (the binary names it without a dependency on kube).
pub use kube::Client;
