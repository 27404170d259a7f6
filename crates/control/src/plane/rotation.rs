//! CA rotation in three stages, each refused until it is safe, and the rotation of a service's
//! join token.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::{ApiError, Plane, RECONNECT_GRACE, proxies, unix_ms};
use crate::ca::{self, Ca, CaError, Place};
use crate::pb;
use crate::store::{CaState, Rotation, Secret};
use crate::token::{self};

/// A stage of a CA rotation (`hopwise control rotate-ca --stage …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotateStage {
    /// A new root is generated and trusted after the old one; the old one still signs.
    Add,
    /// The new root signs; every proxy renews at once.
    Reissue,
    /// The old root leaves the trust bundle.
    Retire,
}

impl RotateStage {
    pub fn name(self) -> &'static str {
        match self {
            RotateStage::Add => "add",
            RotateStage::Reissue => "reissue",
            RotateStage::Retire => "retire",
        }
    }

    pub fn parse(text: &str) -> Result<RotateStage, ApiError> {
        match text {
            "add" => Ok(RotateStage::Add),
            "reissue" => Ok(RotateStage::Reissue),
            "retire" => Ok(RotateStage::Retire),
            other => Err(ApiError::BadStage(other.to_owned())),
        }
    }
}

/// The name of a rotation's stage in the API (`""`: none in progress).
pub(super) fn rotation_name(r: Option<&Rotation>) -> &'static str {
    match r {
        None => "",
        Some(Rotation::Added { .. }) => "added",
        Some(Rotation::Reissued { .. }) => "reissued",
    }
}

impl Plane {
    /// The rotation in progress, if any.
    pub fn rotation(&self) -> Option<&Rotation> {
        self.store.state().rotation.as_ref()
    }

    /// The proxies that may still be serving and are not ready for `stage`, with the reason:
    /// every proxy of the mesh, whichever replica it is connected to.
    pub(super) fn not_ready(&self, stage: RotateStage, now: SystemTime) -> Vec<pb::PendingProxy> {
        let now_unix = ca::unix_seconds(now);
        let mut pending = Vec::new();
        for ((service, proxy), p) in self.all_proxies() {
            // A service that left the mesh file has no snapshots, certificates or copies.
            let in_mesh = self
                .mesh
                .services
                .get(&service)
                .is_some_and(|s| s.external.is_none());
            if !in_mesh || !proxies::live(&p, now_unix) {
                continue;
            }
            if let Some(reason) =
                proxies::not_ready(&p, stage, self.ca_generation, self.bundle_version)
            {
                pending.push(pb::PendingProxy {
                    service,
                    proxy,
                    connected: p.connected,
                    reason,
                    replica: p.replica,
                });
            }
        }
        pending
    }

    pub(super) fn rotate_response(
        &self,
        done: bool,
        unchanged: bool,
        message: String,
    ) -> pb::RotateCaResponse {
        pb::RotateCaResponse {
            done,
            unchanged,
            rotation: rotation_name(self.rotation()).to_owned(),
            ca_generation: self.ca_generation,
            version: self.version(),
            trust_bundle: self.ca.root_names(),
            pending: Vec::new(),
            message,
            retry: false,
        }
    }

    /// One stage of a CA rotation. Refused (`done: false`, nothing changes) when the stage does
    /// not follow the one done last, or — unless `force` — when a proxy that may be serving is
    /// not ready: `reissue` waits until every proxy has confirmed the bundle with the new root,
    /// `retire` until every proxy's certificate is from the new root. `Err` only when the state
    /// could not be saved or the CA could not be made (then nothing changed either).
    pub fn rotate_ca(
        &mut self,
        stage: RotateStage,
        force: bool,
        now: SystemTime,
    ) -> Result<pb::RotateCaResponse, ApiError> {
        let refused = |plane: &Plane, message: &str| {
            Ok(plane.rotate_response(false, false, message.to_owned()))
        };
        let unchanged = |plane: &Plane, message: &str| {
            Ok(plane.rotate_response(true, true, message.to_owned()))
        };
        match (stage, self.rotation()) {
            (RotateStage::Add, Some(Rotation::Added { .. })) => {
                return unchanged(
                    self,
                    "the new root is already in the trust bundle; next: reissue",
                );
            }
            (RotateStage::Add, Some(Rotation::Reissued { .. })) => {
                return refused(
                    self,
                    "a rotation is in progress (reissue done): retire the old root before adding another",
                );
            }
            (RotateStage::Reissue, None) => {
                return refused(self, "no rotation in progress: add a new root first");
            }
            (RotateStage::Reissue, Some(Rotation::Reissued { .. })) => {
                return unchanged(self, "the new root already signs; next: retire");
            }
            (RotateStage::Retire, None) => {
                return refused(
                    self,
                    "no rotation in progress: the trust bundle holds one root, nothing to retire",
                );
            }
            (RotateStage::Retire, Some(Rotation::Added { .. })) => {
                return refused(
                    self,
                    "the new root does not sign yet: reissue before retiring the old root",
                );
            }
            _ => {}
        }
        let since_start = now.duration_since(self.started_at).unwrap_or_default();
        if stage != RotateStage::Add && since_start < RECONNECT_GRACE && !force {
            let mut r = self.rotate_response(
                false,
                false,
                format!(
                    "the control plane started {}s ago and proxies may still be reconnecting: \
                     ask again in {}s",
                    since_start.as_secs(),
                    (RECONNECT_GRACE - since_start).as_secs().max(1)
                ),
            );
            r.retry = true;
            return Ok(r);
        }
        let pending = self.not_ready(stage, now);
        if !pending.is_empty() && !force {
            let mut r = self.rotate_response(
                false,
                false,
                format!(
                    "{} proxy(ies) not ready for {}; nothing changed (wait, or --force)",
                    pending.len(),
                    stage.name()
                ),
            );
            r.pending = pending;
            r.retry = true;
            return Ok(r);
        }
        let dir = self.store.location();
        let at_unix_ms = unix_ms(now);
        let ca_error = |e: CaError| ApiError::Ca(e.to_string());
        let mut next = self.store.state().clone();
        let current = next.rotation.clone();
        let (ca, generation, bundle_changed, what) = match (stage, current.as_ref()) {
            (RotateStage::Add, _) => {
                let generation = self.ca_generation + 1;
                let name = format!("hopwise CA ({}) #{generation}", self.mesh.name);
                let (_, root) = Ca::generate_named(&name, now).map_err(ca_error)?;
                let ca = self
                    .ca
                    .trusting(&root.cert_pem, Place::After, "the new root")
                    .map_err(ca_error)?;
                next.rotation = Some(Rotation::Added {
                    next_cert_pem: root.cert_pem,
                    next_key_pem: Secret(root.key_pem),
                    at_unix_ms,
                });
                let what = format!(
                    "added `{name}` to the trust bundle; `{}` still signs",
                    ca::common_name(self.ca.signer_pem())
                );
                (ca, self.ca_generation, true, what)
            }
            (
                RotateStage::Reissue,
                Some(Rotation::Added {
                    next_cert_pem,
                    next_key_pem,
                    ..
                }),
            ) => {
                let what = format!("the new root stored in {dir}");
                let signer =
                    Ca::from_pem(next_cert_pem, &next_key_pem.0, &what, now).map_err(ca_error)?;
                let ca = signer
                    .trusting(self.ca.signer_pem(), Place::Before, "the old root")
                    .map_err(ca_error)?;
                let generation = self.ca_generation + 1;
                next.ca = Some(CaState::Generated {
                    cert_pem: next_cert_pem.clone(),
                    key_pem: next_key_pem.clone(),
                });
                next.ca_generation = generation;
                next.rotation = Some(Rotation::Reissued {
                    previous_cert_pem: self.ca.signer_pem().to_owned(),
                    at_unix_ms,
                });
                let what = format!(
                    "`{}` signs now (CA generation {generation}); every proxy renews its certificate",
                    ca::common_name(signer.signer_pem())
                );
                (ca, generation, false, what)
            }
            (
                RotateStage::Retire,
                Some(Rotation::Reissued {
                    previous_cert_pem, ..
                }),
            ) => {
                let what = format!(
                    "retired `{}`; the trust bundle holds `{}` only",
                    ca::common_name(previous_cert_pem),
                    ca::common_name(self.ca.signer_pem())
                );
                next.rotation = None;
                (self.ca.alone(), self.ca_generation, true, what)
            }
            // Every other pair was answered above.
            _ => return refused(self, "the rotation is not at a stage where this applies"),
        };
        let written = self
            .store
            .commit(next)
            .map_err(|e| ApiError::Store(e.to_string()))?;
        self.ca = Arc::new(ca);
        self.ca_generation = generation;
        self.bump(written);
        self.wake_everyone = true;
        let mut message = what;
        if bundle_changed {
            self.bundle_version = self.version();
            // The state is saved, so the change is in force even if this file is not written
            // (it is rewritten on every start).
            if let Err(e) = self.store.write_bundle(&self.ca.trust_bundle_pem()) {
                message.push_str(&format!("; the trust bundle file was not written: {e}"));
            }
        }
        if !pending.is_empty() {
            message.push_str(&format!(
                " (forced: {} proxy(ies) were not ready)",
                pending.len()
            ));
        }
        let mut r = self.rotate_response(true, false, message);
        r.pending = pending;
        Ok(r)
    }

    /// Replaces `service`'s join token with a new one: in the store first, then the token files.
    /// The old token is refused from the next call on, and the streams opened with it are woken
    /// to end ([`Plane::take_wake`]). Returns the new token and its file.
    pub fn rotate_token(&mut self, service: &str) -> Result<(String, PathBuf), ApiError> {
        match self.mesh.services.get(service) {
            None => return Err(ApiError::UnknownService(service.to_owned())),
            Some(s) if s.external.is_some() => {
                return Err(ApiError::External(service.to_owned()));
            }
            Some(_) => {}
        }
        let fresh = token::new_token().map_err(|e| ApiError::Store(e.to_string()))?;
        let mut next = self.store.state().clone();
        next.tokens
            .insert(service.to_owned(), Secret(fresh.clone()));
        let written = self
            .store
            .commit(next)
            .map_err(|e| ApiError::Store(e.to_string()))?;
        self.tokens_seen = self.store.state().tokens.clone();
        self.bump(written);
        self.wake_everyone = true;
        let file = self
            .store
            .dir()
            .join(crate::store::TOKENS_DIR)
            .join(service);
        // Saved, so in force even if the file cannot be written (it is at the next start).
        self.store
            .write_tokens()
            .map_err(|e| ApiError::Store(format!("the new token is in force, but {e}")))?;
        Ok((fresh, file))
    }
}
