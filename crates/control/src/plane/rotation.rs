//! CA rotation in three stages, each refused until it is safe, and the rotation of a service's
//! join token.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::{ApiError, Plane, RECONNECT_GRACE, proxies, unix_ms};
use crate::ca::{self, Ca, CaError, Place};
use crate::store::{CaState, Rotation, Secret, State};
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

/// What a stage of a CA rotation did, or why it did nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// The stage is done (now, or before: `unchanged`).
    pub done: bool,
    pub unchanged: bool,
    /// The rotation's stage done (`added`, `reissued`), or empty.
    pub rotation: String,
    pub ca_generation: u64,
    pub version: u64,
    /// The common names of the roots in the trust bundle.
    pub trust_bundle: Vec<String>,
    /// The proxies not ready for the stage (it waits for them, or `--force` ran it anyway).
    pub pending: Vec<PendingProxy>,
    pub message: String,
    /// Asking again later may succeed (the stage waits for proxies).
    pub retry: bool,
}

/// A proxy that a stage waits for, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingProxy {
    pub service: String,
    pub proxy: String,
    pub connected: bool,
    pub reason: String,
    /// The replica it is connected to.
    pub replica: String,
}

/// The next state and CA a stage leads to, before it is saved.
struct Step {
    next: State,
    ca: Ca,
    generation: u64,
    /// The trust bundle changes (`add`, `retire`).
    bundle_changed: bool,
    /// What the stage did, for the message.
    what: String,
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
    pub(super) fn not_ready(&self, stage: RotateStage, now: SystemTime) -> Vec<PendingProxy> {
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
                pending.push(PendingProxy {
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

    fn rotated(&self, done: bool, unchanged: bool, message: String) -> Rotated {
        Rotated {
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

    /// Refused for now, worth asking again: `pending` are what it waits for.
    fn waiting(&self, message: String, pending: Vec<PendingProxy>) -> Rotated {
        Rotated {
            pending,
            retry: true,
            ..self.rotated(false, false, message)
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
    ) -> Result<Rotated, ApiError> {
        if let Some(answer) = self.out_of_order(stage) {
            return Ok(answer);
        }
        let since_start = now.duration_since(self.started_at).unwrap_or_default();
        if stage != RotateStage::Add && since_start < RECONNECT_GRACE && !force {
            let message = format!(
                "the control plane started {}s ago and proxies may still be reconnecting: \
                 ask again in {}s",
                since_start.as_secs(),
                (RECONNECT_GRACE - since_start).as_secs().max(1)
            );
            return Ok(self.waiting(message, Vec::new()));
        }
        let pending = self.not_ready(stage, now);
        if !pending.is_empty() && !force {
            let message = format!(
                "{} proxy(ies) not ready for {}; nothing changed (wait, or --force)",
                pending.len(),
                stage.name()
            );
            return Ok(self.waiting(message, pending));
        }
        let Some(step) = self.step(stage, now)? else {
            // Every other pair was answered by `out_of_order`.
            return Ok(self.rotated(
                false,
                false,
                "the rotation is not at a stage where this applies".to_owned(),
            ));
        };
        self.take_step(step, pending)
    }

    /// The answer to a stage that does not follow the one done last: refused, or done already.
    fn out_of_order(&self, stage: RotateStage) -> Option<Rotated> {
        let (done, message) = match (stage, self.rotation()) {
            (RotateStage::Add, Some(Rotation::Added { .. })) => (
                true,
                "the new root is already in the trust bundle; next: reissue",
            ),
            (RotateStage::Add, Some(Rotation::Reissued { .. })) => (
                false,
                "a rotation is in progress (reissue done): retire the old root before adding another",
            ),
            (RotateStage::Reissue, None) => {
                (false, "no rotation in progress: add a new root first")
            }
            (RotateStage::Reissue, Some(Rotation::Reissued { .. })) => {
                (true, "the new root already signs; next: retire")
            }
            (RotateStage::Retire, None) => (
                false,
                "no rotation in progress: the trust bundle holds one root, nothing to retire",
            ),
            (RotateStage::Retire, Some(Rotation::Added { .. })) => (
                false,
                "the new root does not sign yet: reissue before retiring the old root",
            ),
            _ => return None,
        };
        Some(self.rotated(done, done, message.to_owned()))
    }

    /// The state and CA `stage` leads to (`None`: the stage does not apply).
    fn step(&self, stage: RotateStage, now: SystemTime) -> Result<Option<Step>, ApiError> {
        let mut next = self.store.state().clone();
        let at_unix_ms = unix_ms(now);
        let (ca, generation, bundle_changed, what) = match (stage, next.rotation.take()) {
            (RotateStage::Add, _) => {
                let (ca, rotation, what) = self.add_root(now, at_unix_ms)?;
                next.rotation = Some(rotation);
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
                let (ca, what) = self.reissue(&next_cert_pem, &next_key_pem, now)?;
                let generation = self.ca_generation + 1;
                next.ca = Some(CaState::Generated {
                    cert_pem: next_cert_pem,
                    key_pem: next_key_pem,
                });
                next.ca_generation = generation;
                next.rotation = Some(Rotation::Reissued {
                    previous_cert_pem: self.ca.signer_pem().to_owned(),
                    at_unix_ms,
                });
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
                    ca::common_name(&previous_cert_pem),
                    ca::common_name(self.ca.signer_pem())
                );
                (self.ca.alone(), self.ca_generation, true, what)
            }
            _ => return Ok(None),
        };
        Ok(Some(Step {
            next,
            ca,
            generation,
            bundle_changed,
            what,
        }))
    }

    /// `add`: a new root, trusted after the signing one.
    fn add_root(
        &self,
        now: SystemTime,
        at_unix_ms: i64,
    ) -> Result<(Ca, Rotation, String), ApiError> {
        let ca_error = |e: CaError| ApiError::Ca(e.to_string());
        let generation = self.ca_generation + 1;
        let name = format!("hopwise CA ({}) #{generation}", self.mesh.name);
        let (_, root) = Ca::generate_named(&name, now).map_err(ca_error)?;
        let ca = self
            .ca
            .trusting(&root.cert_pem, Place::After, "the new root")
            .map_err(ca_error)?;
        let rotation = Rotation::Added {
            next_cert_pem: root.cert_pem,
            next_key_pem: Secret(root.key_pem),
            at_unix_ms,
        };
        let what = format!(
            "added `{name}` to the trust bundle; `{}` still signs",
            ca::common_name(self.ca.signer_pem())
        );
        Ok((ca, rotation, what))
    }

    /// `reissue`: the new root signs, the old one still trusted before it.
    fn reissue(
        &self,
        cert_pem: &str,
        key_pem: &Secret,
        now: SystemTime,
    ) -> Result<(Ca, String), ApiError> {
        let ca_error = |e: CaError| ApiError::Ca(e.to_string());
        let what = format!("the new root stored in {}", self.store.location());
        let signer = Ca::from_pem(cert_pem, &key_pem.0, &what, now).map_err(ca_error)?;
        let ca = signer
            .trusting(self.ca.signer_pem(), Place::Before, "the old root")
            .map_err(ca_error)?;
        let what = format!(
            "`{}` signs now (CA generation {}); every proxy renews its certificate",
            ca::common_name(signer.signer_pem()),
            self.ca_generation + 1
        );
        Ok((ca, what))
    }

    /// Saves a stage's state, then puts its CA in force and wakes every stream.
    fn take_step(&mut self, step: Step, pending: Vec<PendingProxy>) -> Result<Rotated, ApiError> {
        let written = self
            .store
            .commit(step.next)
            .map_err(|e| ApiError::Store(e.to_string()))?;
        self.ca = Arc::new(step.ca);
        self.ca_generation = step.generation;
        self.bump(written);
        self.everyone();
        let mut message = step.what;
        if step.bundle_changed {
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
        Ok(Rotated {
            pending,
            ..self.rotated(true, false, message)
        })
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
        self.everyone();
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
