//! Identity vouched for by another authority: on Kubernetes, a pod's projected ServiceAccount
//! token, which the API server checks (`TokenReview`, audience `hopwise`). The control plane
//! never reads such a token itself; it asks a [`TokenReviewer`] (the `hopwise` binary plugs in
//! `hopwise-kube`'s, so this crate depends on no Kubernetes client) and signs the
//! ServiceAccount's identity, `spiffe://<td>/ns/<namespace>/sa/<name>`, taken from the review and
//! never from the CSR. The mesh file says which service runs as that ServiceAccount
//! (`kubernetes: { namespace, service_account }`); a ServiceAccount no service runs as gets
//! nothing.
//!
//! How fresh a review must be: issuing a certificate always asks the API server again (a token of
//! a deleted pod, or one revoked, gets no certificate); the lease and stream calls a proxy makes
//! every few seconds ride on a review of the last [`LEASE_FRESHNESS`], so a fleet costs the API
//! server one review per proxy per five minutes, not one per call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How long a review answers for the lease and stream calls (not for issuance).
pub const LEASE_FRESHNESS: Duration = Duration::from_secs(300);

/// A token longer than this is refused without asking anyone (projected tokens are ~1 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Reviews asked at once; past it a call waits its turn, so a flood of made-up tokens costs the
/// API server at most this many requests in flight.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 32;

/// Who the authority says a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewed {
    pub namespace: String,
    pub service_account: String,
    /// The pod the token is bound to, when it is bound to one.
    pub pod: Option<String>,
}

impl Reviewed {
    /// The ServiceAccount's SPIFFE ID in `trust_domain`, as the mesh model writes it.
    pub fn identity(&self, trust_domain: &str) -> String {
        hopwise_model::kubernetes::ServiceAccount {
            namespace: self.namespace.clone(),
            name: self.service_account.clone(),
        }
        .identity(trust_domain)
    }
}

/// Why a token was not vouched for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// The authority answered: not this token (expired, another audience, a deleted pod's, not
    /// a ServiceAccount's).
    #[error("the token was refused: {0}")]
    Refused(String),
    /// The authority could not be asked; the caller should try again.
    #[error("the token could not be checked now: {0}")]
    Unavailable(String),
}

/// The future a review returns.
pub type ReviewFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Reviewed, ReviewError>> + Send + 'a>>;

/// Asks an authority who a token belongs to.
pub trait TokenReviewer: Send + Sync + 'static {
    fn review<'a>(&'a self, token: &'a str) -> ReviewFuture<'a>;
}

/// A reviewer with the bounds above: length, and reviews in flight.
#[derive(Clone)]
pub struct Reviews {
    inner: Arc<dyn TokenReviewer>,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Reviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviews").finish_non_exhaustive()
    }
}

impl Reviews {
    pub fn new(inner: Arc<dyn TokenReviewer>) -> Reviews {
        Reviews {
            inner,
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT)),
        }
    }

    pub async fn review(&self, token: &str) -> Result<Reviewed, ReviewError> {
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(ReviewError::Refused(format!(
                "a token of {} bytes is not a ServiceAccount token",
                token.len()
            )));
        }
        let _turn = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| ReviewError::Unavailable("the reviewer stopped".to_owned()))?;
        self.inner.review(token).await
    }
}
