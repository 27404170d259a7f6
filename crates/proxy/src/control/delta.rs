//! The proxy's side of incremental snapshots: what it last received on the current stream
//! (whole, merged; separate from what it accepted and runs), and each new message merged onto
//! it with `hopwise-api`'s `apply` (the control plane's streams make deltas with its `diff`).
//! Pure: no I/O.

use hopwise_api::delta::{DeltaError, apply};

use super::pb;

/// Why a message does not give a whole snapshot: the proxy refuses that version in its
/// acknowledgement and opens a new stream, which starts whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Resync {
    #[error(
        "delta {version} is on version {base}, but the last snapshot received on this stream is {}",
        received_text(*received)
    )]
    Base {
        version: u64,
        base: u64,
        /// 0: none yet.
        received: u64,
    },
    #[error("delta {version} does not apply to version {base}: {source}")]
    Apply {
        version: u64,
        base: u64,
        source: DeltaError,
    },
}

fn received_text(v: u64) -> String {
    if v == 0 { "none".into() } else { v.to_string() }
}

impl Resync {
    /// The version refused.
    pub fn version(&self) -> u64 {
        match self {
            Resync::Base { version, .. } | Resync::Apply { version, .. } => *version,
        }
    }
}

/// The last snapshot received on one stream, whole. A new stream starts with a new one.
#[derive(Debug, Default)]
pub struct Received {
    last: Option<pb::Snapshot>,
}

impl Received {
    /// The whole snapshot `message` gives — itself when whole, else merged onto the last one
    /// received, which it must name as its base — and keeps it as the last. On an error nothing
    /// is kept: the stream's state is lost, and only a new stream (whole first) restores it.
    pub fn merge(&mut self, message: pb::Snapshot) -> Result<&pb::Snapshot, Resync> {
        let (version, base) = (message.version, message.base_version);
        let last = self.last.take();
        let whole = match last {
            _ if base == 0 => message,
            Some(last) if last.version == base => {
                apply(&last, message).map_err(|source| Resync::Apply {
                    version,
                    base,
                    source,
                })?
            }
            last => {
                return Err(Resync::Base {
                    version,
                    base,
                    received: last.map_or(0, |l| l.version),
                });
            }
        };
        Ok(self.last.insert(whole))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hopwise_api::delta::diff;

    fn whole(version: u64, endpoints: &[&str]) -> pb::Snapshot {
        pb::Snapshot {
            version,
            config_version: 1,
            service: "a".into(),
            identity: "spiffe://t/service/a".into(),
            mesh_yaml: Some("mesh".into()),
            policy_json: Some("{}".into()),
            upstreams: vec![pb::Upstream {
                service: "b".into(),
                identity: "spiffe://t/service/b".into(),
                endpoints: endpoints.iter().map(|e| (*e).to_owned()).collect(),
                ..Default::default()
            }],
            trust_bundle_pem: Some("PEM".into()),
            allowed_callers: vec!["spiffe://t/service/z".into()],
            ca_generation: 1,
            ..Default::default()
        }
    }

    #[test]
    fn deltas_merge_onto_the_last_snapshot_received() {
        let (v1, v2, v3) = (
            whole(1, &["10.0.0.1:1"]),
            whole(2, &["10.0.0.1:1", "10.0.0.2:1"]),
            whole(3, &["10.0.0.2:1"]),
        );
        let mut r = Received::default();
        assert_eq!(r.merge(v1.clone()).unwrap(), &v1);
        let d = diff(&v1, &v2);
        assert_eq!(d.mesh_yaml, None, "the mesh file did not change");
        assert_eq!(d.upstreams[0].endpoints, ["10.0.0.2:1"]);
        assert_eq!(r.merge(d).unwrap(), &v2);
        assert_eq!(r.merge(diff(&v2, &v3)).unwrap(), &v3);
    }

    #[test]
    fn a_delta_on_another_base_is_refused_and_only_a_whole_snapshot_resyncs() {
        let (v1, v2, v3) = (
            whole(1, &["10.0.0.1:1"]),
            whole(2, &["10.0.0.2:1"]),
            whole(3, &["10.0.0.3:1"]),
        );
        let mut r = Received::default();
        r.merge(v1.clone()).unwrap();
        // A delta on version 2, which this stream never received.
        let err = r.merge(diff(&v2, &v3)).unwrap_err();
        assert_eq!(
            err,
            Resync::Base {
                version: 3,
                base: 2,
                received: 1
            }
        );
        assert_eq!(err.version(), 3);
        assert_eq!(
            err.to_string(),
            "delta 3 is on version 2, but the last snapshot received on this stream is 1"
        );
        // The state is gone: even the right base's delta is refused until a whole snapshot.
        let err = r.merge(diff(&v1, &v2)).unwrap_err();
        assert!(
            err.to_string().ends_with("received on this stream is none"),
            "{err}"
        );
        assert_eq!(r.merge(v3.clone()).unwrap(), &v3);
    }

    #[test]
    fn a_delta_that_does_not_fit_its_base_is_refused_with_the_reason() {
        let v1 = whole(1, &["10.0.0.1:1"]);
        let mut r = Received::default();
        r.merge(v1).unwrap();
        // Claims version 1 as its base, but removes an address version 1 never had.
        let other = whole(1, &["10.0.0.9:1"]);
        let err = r.merge(diff(&other, &whole(2, &[]))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "delta 2 does not apply to version 1: delta removes `10.0.0.9:1`, which the base does not hold"
        );
    }
}
