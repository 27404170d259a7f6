//! Before a call that carries a token the plane does not know as a join token, the reviewing
//! authority is asked who it belongs to ([`crate::review`]), outside the plane's lock, and the
//! answer recorded in the plane, where every call finds its service as it finds a join token's.

use std::time::{Duration, Instant};

use tonic::Status;

use super::Shared;
use super::refusal::review_status;
use crate::review::ReviewError;

impl Shared {
    /// Makes sure `token`, unless it is a join token, was vouched for within `within` (`None`:
    /// ask again now — issuance). Without a reviewer, nothing is asked and the plane refuses an
    /// unknown token as always. When the authority cannot be asked, a lease or stream call keeps
    /// riding on the last review it had (the plane serves its last state while the API server is
    /// away); issuance is refused.
    pub(super) async fn vouch(&self, token: &str, within: Option<Duration>) -> Result<(), Status> {
        let Some(reviews) = &self.reviews else {
            return Ok(());
        };
        let last = {
            let plane = self.plane();
            if plane.is_join_token(token) {
                return Ok(());
            }
            plane.vouched_at(token)
        };
        let now = Instant::now();
        if let (Some(within), Some(at)) = (within, last)
            && now.saturating_duration_since(at) < within
        {
            return Ok(());
        }
        match reviews.review(token).await {
            Ok(reviewed) => {
                let mut plane = self.plane();
                let identity = reviewed.identity(&plane.mesh().trust_domain);
                tracing::debug!(%identity, pod = ?reviewed.pod, "a token was vouched for");
                plane.vouch(token, identity, Instant::now());
                Ok(())
            }
            Err(e @ ReviewError::Unavailable(_)) if within.is_some() && last.is_some() => {
                tracing::warn!("keeping the last review of a token: {e}");
                Ok(())
            }
            Err(e) => {
                if matches!(e, ReviewError::Refused(_)) {
                    self.plane().unvouch(token);
                }
                tracing::info!("refused a token: {e}");
                Err(review_status(&e))
            }
        }
    }
}
