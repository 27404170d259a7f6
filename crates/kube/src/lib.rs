//! hopwise on Kubernetes. It will hold what feeds the control plane from an API server: the
//! watchers (Services, EndpointSlices, HTTPRoutes), the injection webhook and identity from
//! ServiceAccount tokens (TokenReview). Today it holds only what tests need: `testing` (feature
//! `testing`), a real etcd and kube-apiserver on loopback and `kube` clients for them. It
//! depends on nothing of hopwise's yet, and nothing of hopwise's depends on it.

#[cfg(feature = "testing")]
pub mod testing;
