//! How a refusal reaches the caller: a gRPC status whose message starts with a short, stable
//! name (`wrong-identity: …`); and the address a call comes from, and the admin address it names.

use std::net::SocketAddr;

use tonic::{Request, Status};

use crate::ca::IssueError;
use crate::conn::ConnInfo;
use crate::plane::{self, ApiError};

/// A short, stable name for each refusal, first in the status message (`wrong-identity: …`).
pub(super) fn issue_status(e: &IssueError) -> Status {
    let (code, name) = match e {
        IssueError::UnknownToken => (tonic::Code::Unauthenticated, "unknown-token"),
        IssueError::UnknownService(_) => (tonic::Code::FailedPrecondition, "unknown-service"),
        IssueError::External(_) => (tonic::Code::FailedPrecondition, "external-service"),
        IssueError::Malformed(_) => (tonic::Code::InvalidArgument, "malformed-csr"),
        IssueError::BadSignature => (tonic::Code::InvalidArgument, "bad-signature"),
        IssueError::WrongIdentity { .. } => (tonic::Code::PermissionDenied, "wrong-identity"),
        IssueError::ForbiddenName { .. } => (tonic::Code::PermissionDenied, "forbidden-name"),
        IssueError::AsksForCa => (tonic::Code::PermissionDenied, "asks-for-ca"),
        IssueError::UnsupportedKey(_) => (tonic::Code::InvalidArgument, "unsupported-key"),
        IssueError::Lifetime(_) | IssueError::Sign(_) => (tonic::Code::Internal, "signing-failed"),
        IssueError::NoServiceRunsAs(_) => (tonic::Code::PermissionDenied, "no-service-runs-as"),
        IssueError::Review(e) => return review_status(e),
    };
    Status::new(code, format!("{name}: {e}"))
}

/// A token the reviewing authority refused (UNAUTHENTICATED, like an unknown join token), or
/// could not check now (UNAVAILABLE: the proxy tries again).
pub(super) fn review_status(e: &crate::review::ReviewError) -> Status {
    match e {
        crate::review::ReviewError::Refused(_) => {
            Status::unauthenticated(format!("token-refused: {e}"))
        }
        crate::review::ReviewError::Unavailable(_) => {
            Status::unavailable(format!("review-unavailable: {e}"))
        }
    }
}

/// What a proxy is told by a replica that lost the shared store: UNAVAILABLE, so it moves on.
pub(super) fn fenced_status(why: &str) -> Status {
    Status::unavailable(format!(
        "fenced: this replica lost the shared store (etcd): {why}; it serves no proxies until \
         it holds a lease again (try another replica)"
    ))
}

pub(super) fn api_status(e: &ApiError) -> Status {
    let (code, name) = match e {
        ApiError::UnknownToken => (tonic::Code::Unauthenticated, "unknown-token"),
        ApiError::WrongService { .. } => (tonic::Code::PermissionDenied, "wrong-service"),
        ApiError::NotYourLease(_) => (tonic::Code::PermissionDenied, "not-your-lease"),
        ApiError::UnknownLease(_) => (tonic::Code::NotFound, "unknown-lease"),
        ApiError::UnknownService(_) => (tonic::Code::FailedPrecondition, "unknown-service"),
        ApiError::External(_) => (tonic::Code::FailedPrecondition, "external-service"),
        ApiError::BadAddress(_) => (tonic::Code::InvalidArgument, "bad-address"),
        ApiError::BadProxyName(_) => (tonic::Code::InvalidArgument, "bad-proxy-name"),
        ApiError::BadLabel(_) => (tonic::Code::InvalidArgument, "bad-label"),
        ApiError::ForeignAdmin { .. } => (tonic::Code::InvalidArgument, "foreign-admin-address"),
        ApiError::Ttl(_) => (tonic::Code::InvalidArgument, "bad-ttl"),
        ApiError::TooManyCopies { .. } => (tonic::Code::ResourceExhausted, "too-many-copies"),
        ApiError::TooManyProxies { .. } => (tonic::Code::ResourceExhausted, "too-many-proxies"),
        ApiError::Store(_) => (tonic::Code::Internal, "store"),
        ApiError::BadStage(_) => (tonic::Code::InvalidArgument, "bad-stage"),
        ApiError::Ca(_) => (tonic::Code::Internal, "ca"),
        ApiError::NoServiceRunsAs(_) => (tonic::Code::PermissionDenied, "no-service-runs-as"),
    };
    Status::new(code, format!("{name}: {e}"))
}

/// The IP a call comes from (the control port's connection; `None` only for a call that did
/// not come through it).
pub(super) fn caller<T>(request: &Request<T>) -> Option<std::net::IpAddr> {
    request
        .extensions()
        .get::<ConnInfo>()
        .map(|info| info.remote.ip())
}

/// The admin address a proxy named (`who`, for the log), if the dashboard may read it: one
/// that is not an address is refused; another host's is ignored with a warning, so the
/// dashboard never reads a host the caller chose, and the proxy still registers or subscribes.
pub(super) fn admin_of(
    text: &str,
    from: Option<std::net::IpAddr>,
    who: &str,
) -> Result<Option<SocketAddr>, Status> {
    if text.is_empty() {
        return Ok(None);
    }
    match plane::admin_addr(text, from) {
        Ok(addr) => Ok(Some(addr)),
        Err(e @ ApiError::ForeignAdmin { .. }) => {
            tracing::warn!(%who, "{e}");
            Ok(None)
        }
        Err(e) => Err(api_status(&e)),
    }
}
