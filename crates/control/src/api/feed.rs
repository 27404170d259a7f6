//! What a service's streams send for one snapshot, computed once and shared: the delta from
//! each version streams last sent. (A whole snapshot — a new stream's first message, or every
//! message to one that asked for no deltas — is made for each stream: it is a copy per stream
//! anyway, and keeping one per service would hold the mesh file's text once per service.) One change of a service's snapshot thus costs
//! one delta per distinct base — usually one: every stream of the service was on the same
//! snapshot — however many streams the service has; each stream then clones the message its
//! own send needs. Pure: no lock, no clock (`api.rs` holds the feeds behind a mutex).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::wire;
use crate::pb;
use crate::plane::Snapshot;

/// The most bases a feed keeps deltas from; a stream further behind gets its own, computed then.
const BASES: usize = 8;

/// The messages for the latest snapshot of one service.
#[derive(Debug, Default)]
pub struct Feed {
    to: Option<Arc<Snapshot>>,
    /// By the version of the base.
    deltas: BTreeMap<u64, Arc<pb::Snapshot>>,
}

impl Feed {
    /// What a stream sends to bring its proxy to `next`: whole, when it sent nothing yet (or
    /// asked for no deltas), else the delta from `last`.
    pub fn message(
        &mut self,
        last: Option<&Arc<Snapshot>>,
        next: &Arc<Snapshot>,
        deltas: bool,
    ) -> Arc<pb::Snapshot> {
        if !self.to.as_ref().is_some_and(|t| Arc::ptr_eq(t, next)) {
            *self = Feed {
                to: Some(next.clone()),
                ..Feed::default()
            };
        }
        match last {
            Some(last) if deltas => {
                if let Some(d) = self.deltas.get(&last.version) {
                    return d.clone();
                }
                let d = Arc::new(wire::delta(last, next));
                if self.deltas.len() < BASES {
                    self.deltas.insert(last.version, d.clone());
                }
                d
            }
            _ => Arc::new(wire::snapshot(next)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::{Fixed, Upstream};

    fn snapshot(version: u64, endpoints: &[&str]) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            version,
            fixed: Arc::new(Fixed::of_a("m", "PEM", Vec::new())),
            upstreams: vec![Arc::new(Upstream {
                service: "b".into(),
                identity: "spiffe://t/service/b".into(),
                endpoints: endpoints.iter().map(|e| (*e).to_owned()).collect(),
                labels: Default::default(),
            })],
        })
    }

    #[test]
    fn every_stream_on_one_base_shares_one_delta() {
        let v1 = snapshot(1, &["10.0.0.1:1"]);
        let v2 = snapshot(2, &["10.0.0.1:1", "10.0.0.2:1"]);
        let mut feed = Feed::default();
        let a = feed.message(Some(&v1), &v2, true);
        let b = feed.message(Some(&v1), &v2, true);
        assert!(Arc::ptr_eq(&a, &b), "computed once");
        assert_eq!(a.base_version, 1);
        assert_eq!(a.upstreams[0].endpoints, ["10.0.0.2:1"]);
        let w1 = feed.message(None, &v2, true);
        let w2 = feed.message(Some(&v1), &v2, false);
        assert_eq!(w1, w2);
        assert_eq!(w1.base_version, 0);
        // The next snapshot starts afresh.
        let v3 = snapshot(3, &[]);
        let c = feed.message(Some(&v2), &v3, true);
        assert_eq!(c.base_version, 2);
        assert_eq!(
            c.upstreams[0].removed_endpoints,
            ["10.0.0.1:1", "10.0.0.2:1"]
        );
        assert!(
            feed.message(None, &v3, true).upstreams[0]
                .endpoints
                .is_empty()
        );
    }
}
