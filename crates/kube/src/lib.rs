//! hopwise on Kubernetes. Today: sidecar injection (`inject`: the decision and the JSON patch,
//! pure; `webhook`: the mutating admission webhook's HTTPS server; `registration`: the
//! `MutatingWebhookConfiguration` that sends pods to it) and its serving certificate (`cert`),
//! and, under feature `testing`, a real etcd and kube-apiserver on loopback with `kube` clients
//! for them. To come: the watchers (Services, EndpointSlices, HTTPRoutes) and identity from
//! ServiceAccount tokens. It depends on nothing of hopwise's, and nothing of hopwise's depends
//! on it yet.

pub mod cert;
pub mod inject;
pub mod registration;
#[cfg(feature = "testing")]
pub mod testing;
pub mod webhook;
