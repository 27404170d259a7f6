//! Tokens another authority vouched for ([`crate::review`]): by the token's digest, the identity
//! it was reviewed as and when. The API layer reviews (outside the plane's lock) and records
//! here; [`Plane::token_service`] then finds the service as it finds a join token's. Bounded:
//! past [`MAX_VOUCHED`] entries, those not reviewed within [`LEASE_FRESHNESS`] are dropped, and
//! if that is not enough, all are (each proxy is reviewed again on its next call).

use std::collections::HashMap;
use std::time::Instant;

use super::{ApiError, Plane};
use crate::review::LEASE_FRESHNESS;
use crate::token::digest;

/// Vouched tokens kept at most.
pub const MAX_VOUCHED: usize = 65_536;

#[derive(Debug, Default)]
pub(super) struct Vouched(HashMap<[u8; 32], Vouch>);

#[derive(Debug)]
struct Vouch {
    identity: String,
    at: Instant,
}

impl Plane {
    /// When `token` was last vouched for, if it was and is still kept.
    pub fn vouched_at(&self, token: &str) -> Option<Instant> {
        self.vouched.0.get(&digest(token)).map(|v| v.at)
    }

    /// Records that `token` was reviewed as `identity` at `now`.
    pub fn vouch(&mut self, token: &str, identity: String, now: Instant) {
        let map = &mut self.vouched.0;
        if map.len() >= MAX_VOUCHED {
            map.retain(|_, v| now.saturating_duration_since(v.at) < LEASE_FRESHNESS);
            if map.len() >= MAX_VOUCHED {
                tracing::warn!(
                    "{MAX_VOUCHED} tokens vouched for within {LEASE_FRESHNESS:?}: forgetting them all"
                );
                map.clear();
            }
        }
        map.insert(digest(token), Vouch { identity, at: now });
    }

    /// Forgets `token` (its review failed).
    pub fn unvouch(&mut self, token: &str) {
        self.vouched.0.remove(&digest(token));
    }

    /// The service a vouched token acts as: the one whose identity (`kubernetes:` in the mesh
    /// file in force) is the token's.
    pub(super) fn vouched_service(&self, token: &str) -> Option<Result<String, ApiError>> {
        let vouch = self.vouched.0.get(&digest(token))?;
        Some(
            self.mesh
                .service_of_identity(&vouch.identity)
                .map(str::to_owned)
                .ok_or_else(|| ApiError::NoServiceRunsAs(vouch.identity.clone())),
        )
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::plane::{ConfigFile, Options};
    use crate::store::Store;

    pub(in crate::plane) const MESH: &str =
        "mesh: { trust_domain: shop.local, kubernetes: { namespace: shop } }
services:
  web: { calls: { api: {} } }
  api: {}
";

    /// A plane of [`MESH`], whose services run on Kubernetes (namespace `shop`).
    pub(in crate::plane) fn plane(dir: &std::path::Path) -> Plane {
        let options = Options {
            config: Some(ConfigFile {
                name: "mesh.yaml".into(),
                text: MESH.into(),
            }),
            ca_files: None,
            cert_lifetime: Duration::from_secs(3600),
        };
        Plane::start(Store::open(dir).unwrap(), options, SystemTime::now())
            .unwrap()
            .plane
    }

    #[test]
    fn a_vouched_token_acts_as_the_service_that_runs_as_its_identity() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = plane(dir.path());
        let now = Instant::now();
        assert_eq!(p.token_service("pod-token"), Err(ApiError::UnknownToken));
        p.vouch(
            "pod-token",
            "spiffe://shop.local/ns/shop/sa/web".into(),
            now,
        );
        assert_eq!(p.vouched_at("pod-token"), Some(now));
        assert_eq!(p.token_service("pod-token"), Ok("web".into()));
        assert_eq!(p.authorize("pod-token", "web"), Ok("web".into()));
        assert!(matches!(
            p.authorize("pod-token", "api"),
            Err(ApiError::WrongService { .. })
        ));
        assert!(!p.is_join_token("pod-token"));
        // A ServiceAccount no service runs as.
        p.vouch(
            "other",
            "spiffe://shop.local/ns/shop/sa/intruder".into(),
            now,
        );
        assert_eq!(
            p.token_service("other"),
            Err(ApiError::NoServiceRunsAs(
                "spiffe://shop.local/ns/shop/sa/intruder".into()
            ))
        );
        p.unvouch("pod-token");
        assert_eq!(p.token_service("pod-token"), Err(ApiError::UnknownToken));
    }

    #[test]
    fn the_cache_stays_bounded_dropping_stale_reviews_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = plane(dir.path());
        let start = Instant::now();
        let web = "spiffe://shop.local/ns/shop/sa/web";
        for i in 0..MAX_VOUCHED - 1 {
            p.vouch(&format!("old-{i}"), web.into(), start);
        }
        let later = start + LEASE_FRESHNESS + Duration::from_secs(1);
        p.vouch("fresh", web.into(), later);
        assert_eq!(p.vouched.0.len(), MAX_VOUCHED);
        // Full: the stale ones go, the fresh one stays.
        p.vouch("newest", web.into(), later);
        assert_eq!(p.vouched.0.len(), 2);
        assert_eq!(p.vouched_at("fresh"), Some(later));
        assert_eq!(p.vouched_at("old-1"), None);
        // Full of fresh ones: all are forgotten rather than growing.
        for i in 0..MAX_VOUCHED {
            p.vouch(&format!("new-{i}"), web.into(), later);
        }
        assert!(p.vouched.0.len() <= MAX_VOUCHED);
    }
}
