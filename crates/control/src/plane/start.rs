//! A start of the control plane: the mesh file (the stored one, or `--config`, which must pass
//! `hopwise check`), the CA (stored, the operator's files, or generated; the other root trusted
//! during a rotation), the tokens, and the first version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hopwise_model::Mesh;

use super::mode::{Begin, Mode};
use super::{Plane, StartError, prepare, proxies, rotation_name, unix_ms};
use crate::ca::{self, Ca, Place};
use crate::store::{self, CaState, MeshState, Rotation, Secret, State, Store};
use crate::token::{self, RandomError, TokenIndex};

/// A mesh file given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// Its name, for diagnostics.
    pub name: String,
    pub text: String,
}

/// The operator's own CA, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// The mesh file: required on the first start; later the stored one is used (see
    /// [`Started::notes`]).
    pub config: Option<ConfigFile>,
    /// The operator's CA; without it a root is generated on the first start.
    pub ca_files: Option<CaFiles>,
    /// Lifetime of issued certificates.
    pub cert_lifetime: Duration,
}

impl Options {
    /// A first start on the mesh file `text` (named `name`), with a generated CA and
    /// certificates of `cert_lifetime`.
    pub fn first(name: &str, text: &str, cert_lifetime: Duration) -> Options {
        Options {
            config: Some(ConfigFile {
                name: name.to_owned(),
                text: text.to_owned(),
            }),
            ca_files: None,
            cert_lifetime,
        }
    }
}

/// What `start` has to say besides the plane itself.
#[derive(Debug)]
pub struct Started {
    pub plane: Plane,
    /// Things the operator should know (e.g. `--config` differs from the stored mesh file).
    pub notes: Vec<String>,
    /// The token files written.
    pub token_files: Vec<PathBuf>,
    /// `<state>/ca.pem`.
    pub bundle_file: PathBuf,
    /// `<state>/admin-token`.
    pub admin_token_file: Option<PathBuf>,
}

pub(super) fn read(path: &Path) -> Result<String, StartError> {
    std::fs::read_to_string(path).map_err(|source| StartError::Read {
        path: path.to_owned(),
        source,
    })
}

pub(super) fn load_ca(
    stored: Option<&CaState>,
    files: Option<&CaFiles>,
    mesh_name: &str,
    dir: &str,
    now: SystemTime,
) -> Result<(Ca, CaState, Option<String>), StartError> {
    let supplied = |f: &CaFiles| -> Result<(Ca, String), StartError> {
        let cert = read(&f.cert)?;
        let key = read(&f.key)?;
        let what = format!("{} and {}", f.cert.display(), f.key.display());
        let ca = Ca::from_pem(&cert, &key, &what, now)?;
        Ok((ca, cert))
    };
    match (stored, files) {
        (None, None) => {
            let (ca, root) = Ca::generate(mesh_name, now)?;
            let state = CaState::Generated {
                cert_pem: root.cert_pem,
                key_pem: Secret(root.key_pem),
            };
            Ok((ca, state, Some("generated a new CA (ECDSA P-256)".into())))
        }
        (None, Some(f)) => {
            let (ca, cert_pem) = supplied(f)?;
            let state = CaState::Supplied {
                cert_path: f.cert.clone(),
                key_path: f.key.clone(),
                cert_pem,
            };
            Ok((ca, state, None))
        }
        (Some(state @ CaState::Generated { cert_pem, key_pem }), None) => {
            let what = format!("the CA stored in {dir}");
            let ca = Ca::from_pem(cert_pem, &key_pem.0, &what, now)?;
            Ok((ca, state.clone(), None))
        }
        (Some(CaState::Generated { .. }), Some(f)) => Err(StartError::CaConflict(format!(
            "{} already holds a CA that the control plane generated; it cannot switch to {} \
             (a CA rotation is done on the running control plane: `hopwise control rotate-ca`): \
             drop --ca-cert/--ca-key, or start on a new state directory",
            dir,
            f.cert.display()
        ))),
        (
            Some(CaState::Supplied {
                cert_path,
                key_path,
                cert_pem,
            }),
            f,
        ) => {
            let f = f.cloned().unwrap_or(CaFiles {
                cert: cert_path.clone(),
                key: key_path.clone(),
            });
            let (ca, cert) = supplied(&f)?;
            if !ca::same_certificate(&cert, cert_pem) {
                return Err(StartError::CaConflict(format!(
                    "{} holds a different CA certificate than the one {} was started with \
                     (a CA rotation is done on the running control plane: `hopwise control \
                     rotate-ca`)",
                    f.cert.display(),
                    dir
                )));
            }
            let state = CaState::Supplied {
                cert_path: f.cert.clone(),
                key_path: f.key.clone(),
                cert_pem: cert,
            };
            Ok((ca, state, None))
        }
    }
}

/// The CA of `state` (stored, or the operator's files, or generated when there is none), with
/// the other root trusted while a rotation is in progress.
pub(super) fn ca_of(
    state: &State,
    files: Option<&CaFiles>,
    mesh_name: &str,
    place: &str,
    now: SystemTime,
) -> Result<(Ca, CaState, Option<String>), StartError> {
    let (ca, ca_state, note) = load_ca(state.ca.as_ref(), files, mesh_name, place, now)?;
    let ca = match &state.rotation {
        None => ca,
        Some(Rotation::Added { next_cert_pem, .. }) => ca.trusting(
            next_cert_pem,
            Place::After,
            &format!("the new root stored in {place}"),
        )?,
        Some(Rotation::Reissued {
            previous_cert_pem, ..
        }) => ca.trusting(
            previous_cert_pem,
            Place::Before,
            &format!("the old root stored in {place}"),
        )?,
    };
    Ok((ca, ca_state, note))
}

impl Plane {
    /// Starts on `store`: counts the start, loads or creates the CA, takes the mesh file (the
    /// stored one if there is one, else `opts.config`, which must pass `hopwise check`), makes
    /// a join token for every service that runs a proxy, and writes the state, the token files
    /// and the trust bundle.
    pub fn start(mut store: Store, opts: Options, now: SystemTime) -> Result<Started, StartError> {
        if opts.cert_lifetime < Duration::from_secs(1) {
            return Err(StartError::Lifetime(opts.cert_lifetime));
        }
        let dir = store.location();
        let mut next: State = store.state().clone();
        let mut notes = Vec::new();
        next.starts += 1;
        // An older layout is written back in the current one.
        next.format = store::FORMAT;

        let mesh = take_mesh(
            &mut next,
            opts.config.as_ref(),
            &store.location(),
            now,
            &mut notes,
        )?;

        // The CA (a rotation in progress: the other root is trusted too).
        let (ca, ca_state, note) = ca_of(&next, opts.ca_files.as_ref(), &mesh.name, &dir, now)?;
        next.ca = Some(ca_state);
        notes.extend(note);
        notes.extend(next.rotation.as_ref().map(rotation_note));

        // A token for every service that runs a proxy, and the admin token.
        add_tokens(&mut next, &mesh)?;
        if next.admin_token.is_none() {
            next.admin_token = Some(Secret(token::new_admin_token()?));
        }

        let written = store.commit(next)?;
        let token_files = store.write_tokens()?;
        let admin_token_file = store.write_admin_token()?;
        let bundle_file = store.write_bundle(&ca.trust_bundle_pem())?;
        let ca_generation = store.state().ca_generation;
        let mut remote = proxies::Remote::default();
        let Begin {
            mode,
            epoch,
            changes,
            registry,
        } = Mode::begin(&mut store, written, &mut remote);
        let mut plane = Plane {
            store,
            ca: Arc::new(ca),
            ca_generation,
            bundle_version: 0,
            started_at: now,
            mesh: Arc::new(mesh),
            lifetime: opts.cert_lifetime,
            registry,
            epoch,
            changes,
            proxies: BTreeMap::new(),
            issued: BTreeMap::new(),
            mesh_text_in_force: String::new(),
            tokens_seen: BTreeMap::new(),
            wake_everyone: false,
            replica: String::new(),
            replica_lease: None,
            remote,
            proxies_idle: BTreeMap::new(),
            mode,
            config_stamp: 0,
            snapshots: Default::default(),
            callers: Default::default(),
            token_index: Default::default(),
            vouched: Default::default(),
            discovered: BTreeMap::new(),
            kube: Default::default(),
        };
        plane.token_index = TokenIndex::of(&plane.store.state().tokens);
        plane.mesh_text_in_force = plane.mesh_text().to_owned();
        plane.tokens_seen = plane.store.state().tokens.clone();
        // Every proxy confirms the bundle again after a restart; with a shared store, the
        // other replicas' proxies may have confirmed it already, from the CA's revision on.
        plane.bundle_version = plane.ca_revision().unwrap_or(plane.version());
        Ok(Started {
            plane,
            notes,
            token_files,
            bundle_file,
            admin_token_file,
        })
    }
}

/// The mesh file to start on: the stored one (noting a `--config` that differs), or on a first
/// start `config`, which must pass `hopwise check` (then stored in `next`).
fn take_mesh(
    next: &mut State,
    config: Option<&ConfigFile>,
    location: &str,
    now: SystemTime,
    notes: &mut Vec<String>,
) -> Result<Mesh, StartError> {
    match (&next.mesh, config) {
        (None, None) => Err(StartError::NoConfig {
            location: location.to_owned(),
        }),
        (None, Some(config)) => {
            let prepared = prepare(&config.text, &config.name);
            let (mesh, report) = match prepared.result {
                Ok(ok) => ok,
                Err(diags) => {
                    return Err(StartError::InvalidConfig {
                        name: config.name.clone(),
                        rendered: diags.render(&config.name),
                        count: diags.0.len(),
                    });
                }
            };
            if report.has_errors() {
                return Err(StartError::Refused {
                    name: config.name.clone(),
                    findings: report.findings,
                });
            }
            next.mesh = Some(MeshState {
                text: config.text.clone(),
                version: 1,
                source: config.name.clone(),
                applied_unix_ms: unix_ms(now),
            });
            Ok(mesh)
        }
        (Some(stored), given) => {
            let mesh = Mesh::from_yaml(&stored.text).map_err(|d| StartError::StoredConfig {
                location: location.to_owned(),
                rendered: d.render(&stored.source),
            })?;
            if let Some(given) = given
                && given.text != stored.text
            {
                notes.push(format!(
                    "{} differs from the mesh file in force (version {}, from {}); it was \
                     NOT applied: send it with `hopwise control apply {} --server ADDR --state DIR`",
                    given.name, stored.version, stored.source, given.name
                ));
            }
            Ok(mesh)
        }
    }
}

/// What the operator is told of a rotation in progress at a start.
fn rotation_note(r: &Rotation) -> String {
    format!(
        "a CA rotation is in progress (stage {} done); continue it with `hopwise control \
         rotate-ca --stage {} --server ADDR --state DIR`",
        rotation_name(Some(r)),
        match r {
            Rotation::Added { .. } => "reissue",
            Rotation::Reissued { .. } => "retire",
        }
    )
}

/// Adds a token for every service of `mesh` that runs a proxy and has none. Returns how many.
pub(super) fn add_tokens(state: &mut State, mesh: &Mesh) -> Result<usize, RandomError> {
    let mut added = 0;
    for s in mesh.services.values() {
        if s.external.is_none() && !state.tokens.contains_key(&s.name) {
            state
                .tokens
                .insert(s.name.clone(), Secret(token::new_token()?));
            added += 1;
        }
    }
    Ok(added)
}
