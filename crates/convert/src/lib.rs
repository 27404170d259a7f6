//! A team's existing Istio, Linkerd and Gateway API configuration, read and translated into a
//! hopwise mesh file so that `hopwise check` counts it: the same arithmetic, the same tables and
//! findings, each finding naming the object and line it came from
//! (`virtualservice/pricing (pricing-vs.yaml:14): http[0].retries.retryOn`).
//!
//! One way: Kubernetes YAML ([`objects`]) → a [`ir::Translation`] per host ([`istio`],
//! [`linkerd`], [`gateway`], by kind in [`translate`]) → with the user's calls ([`calls`]) a mesh
//! file's text and the map back ([`emit`], [`origins`]) → the model's own reader (`Mesh`), the
//! analyser unchanged ([`check`]),.
//! Pure: text in, text and values out; no I/O, no clock. Errors are typed ([`Problems`]), every
//! one with its file and line.

pub mod calls;
pub mod conditions;
pub mod emit;
pub mod fixed;

pub mod gateway;
pub mod ir;
pub mod istio;
pub mod linkerd;
pub mod meshconfig;
pub mod names;
pub mod node;
pub mod objects;
pub mod origins;
pub mod problem;
pub mod report;
pub mod translate;

use hopwise_model::Mesh;
use serde::Serialize;

pub use fixed::FixedFile;
pub use ir::Flavor;
pub use node::At;
pub use objects::Source;
pub use problem::{Problem, Problems};
pub use report::{Checked, check};

/// What the input cannot say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The mesh's name in the written file.
    pub name: String,
    /// Whose defaults apply to what is absent; `None`: by the objects seen (Linkerd's if only
    /// Linkerd's were seen, else Istio's).
    pub flavor: Option<Flavor>,
    /// Count back-off as the seed's checker does (the same 25 ms before every retry) instead of
    /// Envoy's jittered back-off.
    pub fixed_backoff: bool,
}

/// The configuration, translated and read back as a hopwise mesh.
#[derive(Debug, Clone, Serialize)]
pub struct Imported {
    /// The hopwise mesh file (`hopwise convert` writes it).
    pub text: String,
    #[serde(skip)]
    pub mesh: Mesh,
    pub flavor: Flavor,
    pub origins: origins::Origins,
    /// Objects translated.
    pub read: Vec<At>,
    /// Objects (and fields) read but not translated, and why.
    pub skipped: Vec<ir::Skipped>,
    /// How some figures are counted (a call with several routes).
    pub notes: Vec<String>,
    /// Hosts the configuration speaks of that no call reaches.
    pub unused: Vec<String>,
    pub calls: calls::Calls,
    /// What the file was written from, for the second file ([`fixed`]).
    #[serde(skip)]
    pub translation: ir::Translation,
    #[serde(skip)]
    pub assume: emit::Assume,
}

/// Reads the configuration and the calls, translates them and reads the result as a mesh.
/// `Err` holds every problem, each at its file and line.
pub fn import(config: &[Source], calls: &[Source], opts: &Options) -> Result<Imported, Problems> {
    let mut problems = Vec::new();
    let parsed = objects::Parsed::read(config, &mut problems);
    let objects = parsed.objects(&mut problems);
    let t = translate::translate(&objects, &mut problems);
    let c = calls::read(calls, &mut problems);
    let (t, c) = names::settle(t, c, &mut problems);
    if c.calls.is_empty() && c.entries.is_empty() && problems.is_empty() {
        problems.push(Problem {
            file: calls.first().map_or("(no calls file)", |s| s.name).to_owned(),
            pos: None,
            object: None,
            message: "no calls: configuration says where a route goes, not who calls whom; give them one per line (`frontend -> checkout`)".to_owned(),
        });
    }
    let flavor = match (opts.flavor, t.seen.as_slice()) {
        (Some(f), _) => f,
        (None, [Flavor::Linkerd]) => Flavor::Linkerd,
        (None, [_, _]) => {
            problems.push(Problem {
                file: config.first().map_or("", |s| s.name).to_owned(),
                pos: None,
                object: None,
                message: "both Istio and Linkerd objects: say whose defaults apply (`--mesh istio` or `--mesh linkerd`)".to_owned(),
            });
            Flavor::Istio
        }
        (None, _) => Flavor::Istio,
    };
    if !problems.is_empty() {
        // In file order (files as first met), then by line.
        let mut files: Vec<String> = Vec::new();
        for p in &problems {
            if !files.contains(&p.file) {
                files.push(p.file.clone());
            }
        }
        problems.sort_by_key(|p| (files.iter().position(|f| *f == p.file), p.pos));
        return Err(Problems(problems));
    }
    let assume = emit::Assume {
        name: opts.name.clone(),
        flavor,
        fixed_backoff: opts.fixed_backoff,
        inputs: config
            .iter()
            .chain(calls)
            .map(|s| s.name.to_owned())
            .collect(),
        header: Vec::new(),
    };
    let (text, origins, written) = emit::write(&t, &c, &assume);
    if !written.problems.is_empty() {
        return Err(Problems(written.problems));
    }
    let mesh = Mesh::from_yaml(&text).map_err(|d| back(&d, &origins))?;
    let called: Vec<&str> = c.calls.iter().map(|c| c.to.as_str()).collect();
    let unused = t
        .hosts
        .keys()
        .filter(|h| !called.contains(&h.as_str()))
        .cloned()
        .collect();
    let mut skipped = t.skipped.clone();
    skipped.extend(written.skipped);
    Ok(Imported {
        text,
        mesh,
        flavor,
        origins,
        read: t.read.clone(),
        skipped,
        notes: written.notes,
        unused,
        calls: c,
        translation: t,
        assume,
    })
}

/// The model's problems with the written file, at the input's places.
pub(crate) fn back(d: &hopwise_model::Diagnostics, origins: &origins::Origins) -> Problems {
    Problems(
        d.0.iter()
            .map(|d| match origins.at(&d.path) {
                Some(at) => Problem {
                    file: at.file.clone(),
                    pos: Some(at.pos),
                    object: Some(at.object.clone()).filter(|o| o != "calls"),
                    message: d.message.clone(),
                },
                None => Problem {
                    file: "(written mesh file)".to_owned(),
                    pos: d.pos,
                    object: None,
                    message: format!("{}: {}", d.path, d.message),
                },
            })
            .collect(),
    )
}
