//! Stands in for `etcd.rs` in a build without the `etcd` feature: [`SharedEtcd`] has the same
//! signatures but cannot be constructed (there is no [`EtcdStore`] to build it from), so the
//! server always takes the embedded store's paths.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Shared;
use crate::pb;
use crate::plane::ApiError;
use crate::store::etcd::EtcdStore;

/// A shared store that cannot exist in this build.
pub(super) struct SharedEtcd(Infallible);

impl SharedEtcd {
    pub(super) fn new(store: &EtcdStore) -> SharedEtcd {
        match store.0 {}
    }

    pub(super) async fn register(
        &self,
        _shared: &Shared,
        _r: &pb::RegisterRequest,
        _admin: Option<SocketAddr>,
        _labels: hopwise_model::labels::Labels,
    ) -> Result<(u64, Duration), ApiError> {
        match self.0 {}
    }

    pub(super) async fn renew(
        &self,
        _shared: &Shared,
        _token: &str,
        _lease: u64,
    ) -> Result<(), ApiError> {
        match self.0 {}
    }

    pub(super) async fn set_health(
        &self,
        _shared: &Shared,
        _token: &str,
        _lease: u64,
        _healthy: bool,
    ) -> Result<(), ApiError> {
        match self.0 {}
    }

    pub(super) async fn deregister(
        &self,
        _shared: &Shared,
        _token: &str,
        _lease: u64,
    ) -> Result<(), ApiError> {
        match self.0 {}
    }
}

/// Nothing to follow: without a shared store, leases expire in the plane.
pub(super) async fn follow(_shared: Arc<Shared>, _shutdown: watch::Receiver<bool>) {}
