//! A new mesh file: read and checked outside the plane's lock ([`prepare`]), then put in force
//! ([`Plane::commit`]) or refused whole with the problems or findings.

use std::sync::Arc;
use std::time::SystemTime;

use hopwise_analyze::{Finding, Options as CheckOptions, Report, Severity};
use hopwise_model::{Diagnostics, Mesh};

use super::{ApiError, Plane, add_tokens, unix_ms};
use crate::store::{MeshState, StoreError};

/// A mesh file read and checked, ready to [`Plane::commit`]. Reading and checking take the
/// time; they need no lock.
#[derive(Debug)]
pub struct Prepared {
    pub(super) text: String,
    pub(super) file_name: String,
    pub(super) result: Result<(Mesh, Report), Diagnostics>,
}

/// Reads and `hopwise check`s a mesh file, as `Apply` does before anything changes.
pub fn prepare(text: &str, file_name: &str) -> Prepared {
    let file_name = if file_name.is_empty() {
        "<applied>"
    } else {
        file_name
    };
    let result = Mesh::from_yaml(text).map(|mesh| {
        let report = hopwise_analyze::check(&mesh, &CheckOptions::default());
        (mesh, report)
    });
    Prepared {
        text: text.to_owned(),
        file_name: file_name.to_owned(),
        result,
    }
}

impl Prepared {
    /// Why it would be refused as a mesh file: it does not read, or `hopwise check` finds an
    /// error (the first one's text).
    pub fn refusal(&self) -> Option<String> {
        match &self.result {
            Err(diags) => Some(
                diags
                    .0
                    .iter()
                    .map(|d| d.render(&self.file_name))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            Ok((_, report)) => report
                .findings
                .iter()
                .find(|f| f.severity == Severity::Error)
                .map(|f| format!("`hopwise check`: {}: {}", f.code, f.message)),
        }
    }

    /// What an admission webhook answers of it (`hopwise webhook`'s `/validate-mesh`): refused
    /// with [`Prepared::refusal`]'s words, or admitted with `hopwise check`'s warnings, each
    /// with its place in the file.
    pub fn admission(&self) -> Result<Vec<String>, String> {
        if let Some(why) = self.refusal() {
            return Err(why);
        }
        let Ok((_, report)) = &self.result else {
            return Ok(Vec::new());
        };
        Ok(report
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .map(|f| format!("hopwise check: {}: {} ({})", f.code, f.message, f.path))
            .collect())
    }

    pub(super) fn text(&self) -> &str {
        &self.text
    }

    /// The mesh read (`None` when it did not read).
    pub(super) fn into_mesh(self) -> Option<Mesh> {
        self.result.ok().map(|(mesh, _)| mesh)
    }
}

/// What applying a mesh file did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// In force now (changed, or the same as before).
    pub applied: bool,
    /// The same text as the one in force: nothing changed.
    pub unchanged: bool,
    pub config_version: u64,
    pub version: u64,
    /// Why the file could not be read, each problem rendered with its place.
    pub diagnostics: Vec<String>,
    /// `hopwise check`'s findings (errors among them refuse the file).
    pub findings: Vec<Finding>,
    pub message: String,
}

impl Plane {
    /// Applies a prepared mesh file: refused (nothing changes) when it could not be read,
    /// `hopwise check` finds an error, or it changes the trust domain; otherwise written to the
    /// store first, then put in force with a new version. Tokens are made for new services.
    /// `Err` only when the state could not be saved (then nothing changed either).
    pub fn commit(&mut self, prepared: Prepared, now: SystemTime) -> Result<Applied, ApiError> {
        let Prepared {
            text,
            file_name,
            result,
        } = prepared;
        let (mesh, report) = match result {
            Ok(ok) => ok,
            Err(diags) => {
                let mut r = self.refused(format!(
                    "{file_name}: {} problem(s); nothing was applied",
                    diags.0.len()
                ));
                r.diagnostics = diags.0.iter().map(|d| d.render(&file_name)).collect();
                return Ok(r);
            }
        };
        if let Some(refusal) = self.refusal(&file_name, &mesh, &report) {
            return Ok(refusal);
        }
        if text == self.mesh_text() {
            return Ok(Applied {
                applied: true,
                unchanged: true,
                config_version: self.config_version(),
                version: self.version(),
                diagnostics: Vec::new(),
                findings: report.findings,
                message: format!(
                    "{file_name}: unchanged (config version {})",
                    self.config_version()
                ),
            });
        }
        self.put_in_force(text, file_name, mesh, report.findings, now)
    }

    /// Nothing applied, with `message`.
    fn refused(&self, message: String) -> Applied {
        Applied {
            applied: false,
            unchanged: false,
            config_version: self.config_version(),
            version: self.version(),
            diagnostics: Vec::new(),
            findings: Vec::new(),
            message,
        }
    }

    /// Why a readable mesh file is refused: `hopwise check` finds an error, or it changes the
    /// trust domain.
    fn refusal(&self, file_name: &str, mesh: &Mesh, report: &Report) -> Option<Applied> {
        if report.has_errors() {
            let errors = report
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .count();
            let mut r = self.refused(format!(
                "{file_name}: `hopwise check` finds {errors} error(s); nothing was applied"
            ));
            r.findings.clone_from(&report.findings);
            return Some(r);
        }
        if mesh.trust_domain != self.mesh.trust_domain {
            let mut r = self.refused(format!(
                "{file_name}: the trust domain cannot change; nothing was applied"
            ));
            r.diagnostics = vec![format!(
                "{file_name}: mesh.trust_domain: `{}` would replace `{}`, which every issued \
                 certificate names; changing it is not supported yet",
                mesh.trust_domain, self.mesh.trust_domain
            )];
            return Some(r);
        }
        None
    }

    /// Writes the new mesh file (and tokens for new services) to the store, then puts it in
    /// force with a new version.
    fn put_in_force(
        &mut self,
        text: String,
        file_name: String,
        mesh: Mesh,
        findings: Vec<Finding>,
        now: SystemTime,
    ) -> Result<Applied, ApiError> {
        let mut next = self.store.state().clone();
        let version = self.config_version() + 1;
        next.mesh = Some(MeshState {
            text,
            version,
            source: file_name.clone(),
            applied_unix_ms: unix_ms(now),
        });
        let new_tokens =
            add_tokens(&mut next, &mesh).map_err(|e| ApiError::Store(e.to_string()))?;
        let store_error = |e: StoreError| ApiError::Store(e.to_string());
        let written = self.store.commit(next).map_err(store_error)?;
        // The state is saved, so the change is in force even if a token file cannot be written
        // (it is rewritten on the next start; the new service's proxies wait until then).
        let tokens_note = match new_tokens {
            0 => String::new(),
            n => match self.store.write_tokens() {
                Ok(_) => format!(
                    "; {n} new token(s) in {}",
                    self.store.dir().join(crate::store::TOKENS_DIR).display()
                ),
                Err(e) => format!("; {n} new token(s), but the token files were not written: {e}"),
            },
        };
        self.mesh = Arc::new(mesh);
        self.mesh_text_in_force = self.mesh_text().to_owned();
        self.tokens_seen = self.store.state().tokens.clone();
        self.bump(written);
        self.everyone();
        // Kubernetes's routes go on top of the new file (each checked again against it).
        self.reoverlay();
        Ok(Applied {
            applied: true,
            unchanged: false,
            config_version: version,
            version: self.version(),
            diagnostics: Vec::new(),
            findings,
            message: format!("{file_name}: applied as config version {version}{tokens_note}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::prepare;

    const WARNED: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  web: { calls: { api: { timeout: none } } }
  api: {}
";

    #[test]
    fn an_admission_refuses_as_apply_does_and_admits_with_the_warnings_placed() {
        let refused = "services: { web: { entry: { timeout: 1s }, calls: { api: { timeout: 5s } } }, api: {} }";
        let why = prepare(refused, "Mesh/default").admission().unwrap_err();
        assert!(why.contains("exceeds-"), "{why}");
        let unreadable = prepare("services: [", "Mesh/default")
            .admission()
            .unwrap_err();
        assert!(unreadable.contains("Mesh/default"), "{unreadable}");
        let warnings = prepare(WARNED, "Mesh/default").admission().unwrap();
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("hopwise check: no-timeout")
                    && w.ends_with("(services.web.calls.api.timeout)")),
            "{warnings:?}"
        );
    }
}
