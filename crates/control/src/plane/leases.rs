//! The registry's calls as the API offers them: which service a token names, issuance tickets,
//! registrations checked (address, TTL, the cap on copies), renewals, health, goodbyes and expiry.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{ApiError, DEFAULT_TTL, MAX_COPIES_PER_SERVICE, MAX_TTL, Plane, inbound_addr};
use crate::ca::{Ca, IssueError, Issued};
use crate::registry::{LeaseId, RegistryError};
use hopwise_model::labels::Labels;

/// What a caller needs to sign a certificate outside the plane's lock.
#[derive(Debug, Clone)]
pub struct IssueTicket {
    pub service: String,
    pub identity: String,
    pub ca: Arc<Ca>,
    /// The generation of `ca`'s signing root.
    pub generation: u64,
    pub lifetime: Duration,
}

impl Plane {
    /// A join token's service, or a vouched token's ([`crate::review`]).
    pub(super) fn token_service(&self, token: &str) -> Result<String, ApiError> {
        match self
            .token_index
            .service_of(&self.store.state().tokens, token)
        {
            Some(service) => Ok(service.to_owned()),
            None => self
                .vouched_service(token)
                .unwrap_or(Err(ApiError::UnknownToken)),
        }
    }

    /// Whether `token` is a join token of this mesh (it needs no review).
    pub fn is_join_token(&self, token: &str) -> bool {
        self.token_index
            .service_of(&self.store.state().tokens, token)
            .is_some()
    }

    /// The service a token names, which must be a service of the mesh in force that runs a
    /// proxy.
    pub(super) fn proxied_service(&self, token: &str) -> Result<String, ApiError> {
        let service = self.token_service(token)?;
        match self.mesh.services.get(&service) {
            None => Err(ApiError::UnknownService(service)),
            Some(s) if s.external.is_some() => Err(ApiError::External(service)),
            Some(_) => Ok(service),
        }
    }

    /// Checks a token for issuance and returns what signing needs.
    pub fn issue_ticket(&self, token: &str) -> Result<IssueTicket, IssueError> {
        let service = self.proxied_service(token).map_err(|e| match e {
            ApiError::UnknownService(s) => IssueError::UnknownService(s),
            ApiError::External(s) => IssueError::External(s),
            ApiError::NoServiceRunsAs(identity) => IssueError::NoServiceRunsAs(identity),
            _ => IssueError::UnknownToken,
        })?;
        Ok(IssueTicket {
            identity: self.mesh.identity(&service),
            service,
            ca: self.ca.clone(),
            generation: self.ca_generation,
            lifetime: self.lifetime,
        })
    }

    /// Issuance in one step (token, CSR, signature, record), for callers without a lock to
    /// avoid.
    pub fn issue(
        &mut self,
        token: &str,
        csr_pem: &str,
        proxy: &str,
        now: SystemTime,
    ) -> Result<Issued, IssueError> {
        let ticket = self.issue_ticket(token)?;
        let issued = ticket
            .ca
            .issue(csr_pem, &ticket.identity, ticket.lifetime, now)?;
        self.record_issued(&ticket.service, proxy, issued.not_after, ticket.generation);
        Ok(issued)
    }

    pub(super) fn registry_changed(&mut self, before: u64) -> bool {
        if self.registry.version() != before {
            self.bump(None);
            true
        } else {
            false
        }
    }

    pub(super) fn lease_of(&self, token: &str, lease: u64) -> Result<LeaseId, ApiError> {
        let service = self.token_service(token)?;
        let id = LeaseId(lease);
        match self.registry.copy(id) {
            None => Err(ApiError::UnknownLease(lease)),
            Some(c) if c.service != service => Err(ApiError::NotYourLease(lease)),
            Some(_) => Ok(id),
        }
    }

    pub(super) fn registry_error(e: RegistryError) -> ApiError {
        match e {
            RegistryError::UnknownLease(id) => ApiError::UnknownLease(id.0),
            RegistryError::TtlTooShort(ttl) => ApiError::Ttl(ttl),
        }
    }

    /// Registers a copy of the token's service. Returns the lease, its TTL, and whether the
    /// endpoint sets changed (a healthy copy at the same address was replaced).
    pub fn register(
        &mut self,
        token: &str,
        inbound: &str,
        ttl_ms: u64,
        now: Instant,
    ) -> Result<(LeaseId, Duration, bool), ApiError> {
        let (service, addr, ttl) = self.lease_terms(token, inbound, ttl_ms)?;
        let before = self.registry.version();
        let id = self
            .registry
            .register(&service, addr, ttl, now)
            .map_err(Self::registry_error)?;
        Ok((id, ttl, self.registry_changed(before)))
    }

    /// Records where a copy's admin endpoint is (`RegisterRequest.admin_addr`, read by
    /// [`admin_addr`]): the dashboard reads its `/metrics` there.
    pub fn set_admin(&mut self, lease: LeaseId, admin: SocketAddr) -> Result<(), ApiError> {
        self.registry
            .set_admin(lease, admin)
            .map_err(Self::registry_error)
    }

    /// Records the labels a copy registered with (`RegisterRequest.labels`, checked by
    /// [`super::request::labels`]). Returns whether the endpoint sets changed.
    pub fn set_labels(&mut self, lease: LeaseId, labels: Labels) -> Result<bool, ApiError> {
        let before = self.registry.version();
        self.registry
            .set_labels(lease, labels)
            .map_err(Self::registry_error)?;
        Ok(self.registry_changed(before))
    }

    /// Renews a lease. Renewing changes no endpoint set.
    pub fn renew(&mut self, token: &str, lease: u64, now: Instant) -> Result<bool, ApiError> {
        self.expire(now);
        let id = self.lease_of(token, lease)?;
        let before = self.registry.version();
        self.registry.renew(id, now).map_err(Self::registry_error)?;
        Ok(self.registry_changed(before))
    }

    /// Records a copy's health. Returns whether the endpoint sets changed.
    pub fn set_health(
        &mut self,
        token: &str,
        lease: u64,
        healthy: bool,
        now: Instant,
    ) -> Result<bool, ApiError> {
        let expired = self.expire(now);
        let id = self.lease_of(token, lease)?;
        let before = self.registry.version();
        self.registry
            .set_health(id, healthy, now)
            .map_err(Self::registry_error)?;
        Ok(self.registry_changed(before) || expired)
    }

    /// Removes a copy at once. Returns whether the endpoint sets changed.
    pub fn deregister(&mut self, token: &str, lease: u64) -> Result<bool, ApiError> {
        let id = self.lease_of(token, lease)?;
        let before = self.registry.version();
        self.registry.deregister(id);
        Ok(self.registry_changed(before))
    }

    /// Drops the leases expired by `now`. Returns whether the endpoint sets changed.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = self.registry.version();
        self.registry.expire(now);
        self.registry_changed(before)
    }

    /// When the next lease expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.registry.next_expiry()
    }

    /// The service a subscriber may watch: the token's, which must be `asked` when `asked` is
    /// given.
    pub fn authorize(&self, token: &str, asked: &str) -> Result<String, ApiError> {
        let service = self.token_service(token)?;
        if !asked.is_empty() && asked != service {
            return Err(ApiError::WrongService {
                token_for: service,
                asked: asked.to_owned(),
            });
        }
        Ok(service)
    }

    /// Validates a registration: the token's service, the address and the TTL (0: the
    /// default). Shared by both stores.
    pub fn lease_terms(
        &self,
        token: &str,
        inbound: &str,
        ttl_ms: u64,
    ) -> Result<(String, SocketAddr, Duration), ApiError> {
        let service = self.proxied_service(token)?;
        let addr = inbound_addr(inbound)?;
        let ttl = if ttl_ms == 0 {
            DEFAULT_TTL
        } else {
            Duration::from_millis(ttl_ms)
        };
        if ttl > MAX_TTL || ttl < Duration::from_secs(1) {
            return Err(ApiError::Ttl(ttl));
        }
        let held = self.registry.held_besides(&service, addr);
        if held >= MAX_COPIES_PER_SERVICE {
            return Err(ApiError::TooManyCopies {
                service,
                cap: MAX_COPIES_PER_SERVICE,
            });
        }
        Ok((service, addr, ttl))
    }

    /// The leases that hold `service` at `addr` (a registration there replaces them).
    pub fn leases_at(&self, service: &str, addr: SocketAddr) -> Vec<u64> {
        self.registry
            .leases_at(service, addr)
            .into_iter()
            .map(|id| id.0)
            .collect()
    }

    /// The copy holding `lease`, which must be of the token's service.
    pub fn leased_copy(&self, token: &str, lease: u64) -> Result<crate::registry::Copy, ApiError> {
        let id = self.lease_of(token, lease)?;
        self.registry
            .copy(id)
            .cloned()
            .ok_or(ApiError::UnknownLease(lease))
    }
}
