//! A proxy's calls outside its snapshot stream: its certificate (`Issue`, signed outside the
//! plane's lock) and its copy's lease (`Register`, `Renew`, `SetHealth`, `Deregister`), on the
//! plane's registry (embedded) or on etcd leases (shared).

use std::time::{Instant, SystemTime};

use tonic::{Request, Response, Status};

use super::ControlService;
use super::refusal::{admin_of, api_status, caller, issue_status};
use crate::ca;
use crate::pb;
use crate::plane::{self, ApiError, Plane};
use crate::review::LEASE_FRESHNESS;

impl ControlService {
    /// Runs a lease operation; publishes when the endpoint sets changed.
    pub(super) fn lease_op(
        &self,
        op: impl FnOnce(&mut Plane, Instant) -> Result<bool, ApiError>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let published = {
            let mut plane = self.shared.plane();
            let changed = op(&mut plane, Instant::now()).map_err(|e| api_status(&e))?;
            changed.then(|| plane.version())
        };
        if published.is_some() {
            self.shared.publish();
        }
        Ok(Response::new(pb::LeaseResponse {}))
    }
}

pub(super) async fn issue(
    svc: &ControlService,
    request: Request<pb::IssueRequest>,
) -> Result<Response<pb::IssueResponse>, Status> {
    svc.shared.serving()?;
    let r = request.into_inner();
    // Issuance always asks the authority again: a revoked token gets no certificate.
    svc.shared.vouch(&r.token, None).await?;
    let ticket = {
        let plane = svc.shared.plane();
        let ticket = plane.issue_ticket(&r.token).map_err(|e| issue_status(&e))?;
        if !r.proxy.is_empty() {
            plane
                .admit_proxy(&ticket.service, &r.proxy)
                .map_err(|e| api_status(&e))?;
        }
        ticket
    };
    // Parsing, verifying and signing happen outside the lock.
    let issued = ticket
        .ca
        .issue(
            &r.csr_pem,
            &ticket.identity,
            ticket.lifetime,
            SystemTime::now(),
        )
        .map_err(|e| {
            tracing::warn!(service = %ticket.service, proxy = %r.proxy, "refused a CSR: {e}");
            issue_status(&e)
        })?;
    svc.shared.plane().record_issued(
        &ticket.service,
        &r.proxy,
        issued.not_after,
        ticket.generation,
    );
    tracing::info!(service = %ticket.service, proxy = %r.proxy, "issued a certificate");
    Ok(Response::new(pb::IssueResponse {
        cert_chain_pem: issued.cert_chain_pem,
        trust_bundle_pem: issued.trust_bundle_pem,
        not_after_unix: ca::unix_seconds(issued.not_after),
        identity: issued.identity,
        ca_generation: ticket.generation,
    }))
}

pub(super) async fn register(
    svc: &ControlService,
    request: Request<pb::RegisterRequest>,
) -> Result<Response<pb::RegisterResponse>, Status> {
    svc.shared.serving()?;
    let from = caller(&request);
    let r = request.into_inner();
    // A bad admin address or label is refused before anything is registered.
    let admin = admin_of(&r.admin_addr, from, &r.inbound_addr)?;
    let labels = plane::request::labels(&r.labels).map_err(|e| api_status(&e))?;
    svc.shared.vouch(&r.token, Some(LEASE_FRESHNESS)).await?;
    if let Some(etcd) = &svc.shared.etcd {
        let (lease, ttl) = etcd
            .register(&svc.shared, &r, admin, labels)
            .await
            .map_err(|e| api_status(&e))?;
        tracing::info!(lease, addr = %r.inbound_addr, "registered a copy (etcd lease)");
        return Ok(Response::new(pb::RegisterResponse {
            lease_id: lease,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }));
    }
    let (lease, ttl, published) = {
        let mut plane = svc.shared.plane();
        let (lease, ttl, changed) = plane
            .register(&r.token, &r.inbound_addr, r.ttl_ms, Instant::now())
            .map_err(|e| api_status(&e))?;
        if let Some(admin) = admin {
            plane.set_admin(lease, admin).map_err(|e| api_status(&e))?;
        }
        // Not serving yet (healthy only once its probe passes): changes no endpoint set.
        let relabelled = plane
            .set_labels(lease, labels)
            .map_err(|e| api_status(&e))?;
        (lease, ttl, (changed || relabelled).then(|| plane.version()))
    };
    svc.shared.kick.notify_one();
    if published.is_some() {
        svc.shared.publish();
    }
    tracing::info!(lease = lease.0, addr = %r.inbound_addr, "registered a copy");
    Ok(Response::new(pb::RegisterResponse {
        lease_id: lease.0,
        ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
    }))
}

pub(super) async fn renew(
    svc: &ControlService,
    request: Request<pb::LeaseRequest>,
) -> Result<Response<pb::LeaseResponse>, Status> {
    svc.shared.serving()?;
    let r = request.into_inner();
    svc.shared.vouch(&r.token, Some(LEASE_FRESHNESS)).await?;
    if let Some(etcd) = &svc.shared.etcd {
        etcd.renew(&svc.shared, &r.token, r.lease_id)
            .await
            .map_err(|e| api_status(&e))?;
        return Ok(Response::new(pb::LeaseResponse {}));
    }
    svc.lease_op(|plane, now| plane.renew(&r.token, r.lease_id, now))
}

pub(super) async fn set_health(
    svc: &ControlService,
    request: Request<pb::SetHealthRequest>,
) -> Result<Response<pb::LeaseResponse>, Status> {
    let r = request.into_inner();
    svc.shared.vouch(&r.token, Some(LEASE_FRESHNESS)).await?;
    if let Some(etcd) = &svc.shared.etcd {
        etcd.set_health(&svc.shared, &r.token, r.lease_id, r.healthy)
            .await
            .map_err(|e| api_status(&e))?;
        return Ok(Response::new(pb::LeaseResponse {}));
    }
    svc.lease_op(|plane, now| plane.set_health(&r.token, r.lease_id, r.healthy, now))
}

pub(super) async fn deregister(
    svc: &ControlService,
    request: Request<pb::LeaseRequest>,
) -> Result<Response<pb::LeaseResponse>, Status> {
    let r = request.into_inner();
    svc.shared.vouch(&r.token, Some(LEASE_FRESHNESS)).await?;
    if let Some(etcd) = &svc.shared.etcd {
        etcd.deregister(&svc.shared, &r.token, r.lease_id)
            .await
            .map_err(|e| api_status(&e))?;
        return Ok(Response::new(pb::LeaseResponse {}));
    }
    svc.lease_op(|plane, _| plane.deregister(&r.token, r.lease_id))
}
