//! The calls that need the admin token: `Apply`, `Status`, `Token` and `RotateCa`; the slow parts
//! (checking a file, generating a key, the store's fsync) run off the async threads.

use std::time::{Instant, SystemTime};

use tonic::{Request, Response, Status};

use super::refusal::api_status;
use super::{ControlService, wire};
use crate::pb;
use crate::plane::{self};
use crate::token;

impl ControlService {
    /// Refuses a call that does not carry the admin token (`authorization: Bearer <token>`).
    pub(super) fn admin<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if token::is_admin(self.shared.plane().admin_token(), presented) {
            return Ok(());
        }
        let what = if presented.is_none() {
            "this call needs the control plane's admin token"
        } else {
            "wrong admin token"
        };
        Err(Status::unauthenticated(format!(
            "admin-token: {what} (gRPC metadata `authorization: Bearer <token>`; the command \
             line reads it from --admin-token FILE, or DIR/admin-token with --state DIR)"
        )))
    }
}

pub(super) async fn apply(
    svc: &ControlService,
    request: Request<pb::ApplyRequest>,
) -> Result<Response<pb::ApplyResponse>, Status> {
    svc.admin(&request)?;
    let r = request.into_inner();
    let handle = super::PlaneHandle::of(svc.shared.clone());
    let response = handle
        .apply(r.mesh_yaml, r.file_name)
        .await
        .map_err(|e| api_status(&e))?;
    Ok(Response::new(wire::applied(response)))
}

pub(super) async fn status(
    svc: &ControlService,
    request: Request<pb::StatusRequest>,
) -> Result<Response<pb::StatusResponse>, Status> {
    svc.admin(&request)?;
    let status = svc.shared.plane().status(Instant::now());
    Ok(Response::new(wire::status(status)))
}

pub(super) async fn token(
    svc: &ControlService,
    request: Request<pb::TokenRequest>,
) -> Result<Response<pb::TokenResponse>, Status> {
    svc.admin(&request)?;
    let r = request.into_inner();
    let shared = svc.shared.clone();
    let service = r.service.clone();
    // Random bytes and the store's fsync stay off the async threads.
    let (token, file) = tokio::task::spawn_blocking(move || shared.plane().rotate_token(&service))
        .await
        .map_err(|e| Status::internal(format!("token failed: {e}")))?
        .map_err(|e| api_status(&e))?;
    svc.shared.publish();
    let what = if r.revoke { "revoked" } else { "rotated" };
    tracing::warn!(service = %r.service, "join token {what}; the old one is refused from now on");
    let file = file.display().to_string();
    let message = if r.revoke {
        format!(
            "`{}`'s join token is revoked: refused from the next call on, and its open \
             streams end. A new token is in {file} on the control plane's host only; its \
             proxies need it (or `token rotate`) to connect again",
            r.service
        )
    } else {
        format!(
            "`{}`'s join token is replaced: the old one is refused from the next call on, \
             and its open streams end. The new one is in {file} on the control plane's host",
            r.service
        )
    };
    Ok(Response::new(pb::TokenResponse {
        service: r.service,
        token: if r.revoke { String::new() } else { token },
        token_file: file,
        message,
    }))
}

pub(super) async fn rotate_ca(
    svc: &ControlService,
    request: Request<pb::RotateCaRequest>,
) -> Result<Response<pb::RotateCaResponse>, Status> {
    svc.admin(&request)?;
    let r = request.into_inner();
    let stage = plane::RotateStage::parse(&r.stage).map_err(|e| api_status(&e))?;
    let shared = svc.shared.clone();
    // Generating a key and the store's fsync stay off the async threads.
    let response = tokio::task::spawn_blocking(move || {
        shared.plane().rotate_ca(stage, r.force, SystemTime::now())
    })
    .await
    .map_err(|e| Status::internal(format!("rotate-ca failed: {e}")))?
    .map_err(|e| api_status(&e))?;
    if response.done && !response.unchanged {
        tracing::info!(
            version = response.version,
            "rotate-ca {}: {}",
            stage.name(),
            response.message
        );
        svc.shared.publish();
    } else if !response.done {
        tracing::warn!("rotate-ca {} refused: {}", stage.name(), response.message);
    }
    Ok(Response::new(wire::rotated(response)))
}
