//! `hopwise convert`'s second file: the same mesh with `check`'s fixes applied
//! (`hopwise_analyze::fix::apply`), written by the same writer as the first, so the two files
//! differ only where a fix sets a field. Each fix becomes an [`Edit`] in the translation's terms
//! (where a fix adds a retry condition, the whole list the fixed mesh resolves to), and the
//! file's header lists every fix. The text is read back by the model's reader, as the first is.

use hopwise_analyze::fix::{self, Change, Fix};
use hopwise_analyze::{Options, Report};
use hopwise_model::{Dur, Mesh};

use crate::ir::{self, Destination, Field, Route};
use crate::node::At;
use crate::{Imported, Problems, emit};

/// What one fix sets on one call (or route) of the written file.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// `services.a.calls.b[.routes.r]`.
    pub call: String,
    pub set: Set,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Set {
    RetryCount(u64),
    PerTryTimeout(Dur),
    Timeout(Dur),
    Budget(ir::Budget),
    OnlyIfSafe,
    /// The whole list, as the fixed mesh resolves it.
    RetryOn(Vec<String>),
    Limits(Vec<(&'static str, u64)>),
}

/// The second file and what it holds.
#[derive(Debug, Clone)]
pub struct FixedFile {
    pub text: String,
    pub mesh: Mesh,
    pub fixes: Vec<Fix>,
    /// `check` of the fixed mesh: the findings left.
    pub report: Report,
}

/// The imported mesh with `check`'s fixes applied, as a hopwise mesh file.
pub fn write(imp: &Imported, opts: &Options) -> Result<FixedFile, Problems> {
    let fixed = fix::apply(&imp.mesh, opts);
    let edits: Vec<Edit> = fixed
        .fixes
        .iter()
        .map(|f| Edit {
            call: f.call.clone(),
            set: set(f, &fixed.mesh),
        })
        .collect();
    let mut assume = imp.assume.clone();
    assume.header = header(&fixed.fixes);
    let (text, origins, _) = emit::write_edited(&imp.translation, &imp.calls, &assume, &edits);
    let mesh = Mesh::from_yaml(&text).map_err(|d| crate::back(&d, &origins))?;
    Ok(FixedFile {
        text,
        mesh,
        fixes: fixed.fixes,
        report: fixed.report,
    })
}

/// One line per fix: `services.a.calls.b: retries.count 0 (retry-fanout)`.
pub fn describe(f: &Fix) -> String {
    let value = match &f.change {
        Change::RetryCount(n) => n.to_string(),
        Change::PerTryTimeout(d) | Change::Timeout(d) => Dur(*d).to_string(),
        Change::Budget(b) => format!("ratio {}", b.ratio),
        Change::OnlyIfSafe => "true".to_owned(),
        Change::RetryOn(on) => {
            let names: Vec<&str> = on.iter().map(|c| c.name()).collect();
            format!("+ {}", names.join(", "))
        }
        Change::Limits(caps) => caps
            .iter()
            .map(|(n, v)| format!("{n} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    format!("{}: {} {value} ({})", f.call, f.change.field(), f.code)
}

fn header(fixes: &[Fix]) -> Vec<String> {
    let mut out = vec![format!(
        "The same mesh with `hopwise check`'s {} fix(es) applied:",
        fixes.len()
    )];
    out.extend(fixes.iter().map(|f| format!("  {}", describe(f))));
    out
}

fn set(f: &Fix, mesh: &Mesh) -> Set {
    match &f.change {
        Change::RetryCount(n) => Set::RetryCount(u64::from(*n)),
        Change::PerTryTimeout(d) => Set::PerTryTimeout(Dur(*d)),
        Change::Timeout(d) => Set::Timeout(Dur(*d)),
        Change::Budget(b) => Set::Budget(ir::Budget {
            ratio: Some(b.ratio),
            min_per_second: Some(u64::from(b.min_per_second)),
            window: Some(b.window),
        }),
        Change::OnlyIfSafe => Set::OnlyIfSafe,
        Change::RetryOn(_) => {
            let on = mesh
                .calls()
                .find(|c| c.path == f.call)
                .map(|c| {
                    c.policy
                        .retry
                        .on
                        .iter()
                        .map(|o| o.name().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            Set::RetryOn(on)
        }
        Change::Limits(caps) => {
            Set::Limits(caps.iter().map(|(n, v)| (*n, u64::from(*v))).collect())
        }
    }
}

/// `route` with the edits of its path; `None` stays `None` unless an edit sets a field.
pub fn route(route: Option<Route>, edits: &[&Edit], at: &At) -> Option<Route> {
    let sets: Vec<&Set> = edits
        .iter()
        .map(|e| &e.set)
        .filter(|s| !matches!(s, Set::Limits(_)))
        .collect();
    if sets.is_empty() {
        return route;
    }
    let mut r = route.unwrap_or_else(|| Route::new(at.clone()));
    let field = |value| Field {
        value,
        at: at.clone(),
    };
    for s in sets {
        match s {
            Set::RetryCount(n) => r.retry_count = Some(field(*n)),
            Set::PerTryTimeout(d) => {
                r.per_try_timeout = Some(Field {
                    value: Some(*d),
                    at: at.clone(),
                })
            }
            Set::Timeout(d) => {
                r.timeout = Some(Field {
                    value: Some(*d),
                    at: at.clone(),
                })
            }
            Set::Budget(b) => {
                r.budget = Some(Field {
                    value: *b,
                    at: at.clone(),
                })
            }
            Set::OnlyIfSafe => {
                r.only_if_safe = Some(Field {
                    value: true,
                    at: at.clone(),
                })
            }
            Set::RetryOn(on) => {
                r.retry_on = Some(Field {
                    value: on.clone(),
                    at: at.clone(),
                })
            }
            Set::Limits(_) => {}
        }
    }
    Some(r)
}

/// `dest` with the caps the edits of its path set.
pub fn destination(dest: Option<&Destination>, edits: &[&Edit], at: &At) -> Option<Destination> {
    let caps: Vec<&(&str, u64)> = edits
        .iter()
        .filter_map(|e| match &e.set {
            Set::Limits(c) => Some(c),
            _ => None,
        })
        .flatten()
        .collect();
    if caps.is_empty() {
        return dest.cloned();
    }
    let mut d = dest
        .cloned()
        .unwrap_or_else(|| Destination::new(at.clone()));
    for (name, v) in caps {
        let f = Some(Field {
            value: *v,
            at: at.clone(),
        });
        match *name {
            "max_connections" => d.max_connections = f,
            "max_pending" => d.max_pending = f,
            "max_requests" => d.max_requests = f,
            _ => d.max_retries = f,
        }
    }
    Some(d)
}
