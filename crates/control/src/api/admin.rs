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
    // The name is printed in answers and logs: escaped and bounded first.
    let file_name = plane::request::file_name(&r.file_name);
    let handle = super::PlaneHandle::of(svc.shared.clone());
    let response = handle
        .apply(r.mesh_yaml, file_name)
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
    let ask = wire::token(request.into_inner()).map_err(|e| api_status(&e))?;
    let shared = svc.shared.clone();
    let service = ask.service.clone();
    // Random bytes and the store's fsync stay off the async threads.
    let (token, file) = tokio::task::spawn_blocking(move || shared.plane().rotate_token(&service))
        .await
        .map_err(|e| Status::internal(format!("token failed: {e}")))?
        .map_err(|e| api_status(&e))?;
    svc.shared.publish();
    let what = if ask.revoke { "revoked" } else { "rotated" };
    tracing::warn!(service = %ask.service, "join token {what}; the old one is refused from now on");
    Ok(Response::new(wire::token_response(ask, token, &file)))
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
