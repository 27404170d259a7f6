//! Stands in for `client.rs` in a build without the `etcd` feature (which needs `protoc` to
//! build the etcd client). [`EtcdStore`] has the same signatures but cannot be constructed:
//! [`EtcdStore::open`] refuses at once, saying how to get a build that has etcd, and every other
//! method is unreachable by construction.

use std::convert::Infallible;
use std::path::Path;

use super::{Access, Effect, EtcdSpec, Keys, View};
use crate::store::{State, StoreError};

/// A store that cannot exist in this build.
#[derive(Debug)]
pub struct EtcdStore(pub(crate) Infallible);

impl EtcdStore {
    /// Always refuses: this build has no etcd client.
    pub async fn open(
        spec: EtcdSpec,
        _access: &Access,
        _keys: Keys,
        _dir: &Path,
    ) -> Result<EtcdStore, StoreError> {
        Err(StoreError::NoEtcd { url: spec.url() })
    }

    pub fn spec(&self) -> &EtcdSpec {
        match self.0 {}
    }

    pub fn dir(&self) -> &Path {
        match self.0 {}
    }

    pub fn view(&self) -> &View {
        match self.0 {}
    }

    pub fn view_mut(&mut self) -> &mut View {
        match self.0 {}
    }

    pub fn take_initial_copies(&mut self) -> (Vec<Effect>, std::time::Instant) {
        match self.0 {}
    }

    pub fn commit(&mut self, _next: State) -> Result<Option<u64>, StoreError> {
        match self.0 {}
    }
}
