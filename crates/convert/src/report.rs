//! `check` over an imported configuration: the analyser's report unchanged, each finding beside
//! the place in the input it is about, and what was read, skipped and assumed.

use hopwise_analyze::{Options, Report, render};
use serde::Serialize;

use crate::Imported;

/// The report and, per finding (same order), its place in the input.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    #[serde(flatten)]
    pub report: Report,
    /// Per finding: `virtualservice/pricing (pricing-vs.yaml:14): http[0].retries.retryOn`.
    pub places: Vec<String>,
    /// What was read and assumed.
    pub import: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Whose defaults apply to what the input leaves out.
    pub defaults: &'static str,
    pub read: Vec<String>,
    pub skipped: Vec<String>,
    /// Each call and the line that says it is made.
    pub calls: Vec<String>,
    pub unused: Vec<String>,
    pub notes: Vec<String>,
}

pub fn check(imp: &Imported, opts: &Options) -> Checked {
    let report = hopwise_analyze::check(&imp.mesh, opts);
    let places = report
        .findings
        .iter()
        .map(|f| imp.origins.place(&f.path))
        .collect();
    let import = Summary {
        defaults: imp.flavor.preset(),
        read: imp.read.iter().map(ToString::to_string).collect(),
        skipped: imp
            .skipped
            .iter()
            .map(|s| format!("{}: {}", s.at, s.why))
            .collect(),
        calls: imp
            .calls
            .calls
            .iter()
            .map(|c| {
                format!(
                    "{} → {} ({}:{}, {})",
                    c.from, c.to, c.at.file, c.at.pos.line, c.at.object
                )
            })
            .collect(),
        unused: imp.unused.clone(),
        notes: imp.notes.clone(),
    };
    Checked {
        report,
        places,
        import,
    }
}

impl Checked {
    /// What `hopwise check` prints for an imported configuration.
    pub fn text(&self) -> String {
        let s = &self.import;
        let mut out = format!(
            "Read {} object(s); what they leave out takes {}'s defaults (the `{}` preset)\n",
            s.read.len(),
            if s.defaults == "linkerd" {
                "Linkerd"
            } else {
                "Istio"
            },
            s.defaults
        );
        for r in &s.read {
            out.push_str(&format!("  read     {r}\n"));
        }
        for r in &s.skipped {
            out.push_str(&format!("  skipped  {r}\n"));
        }
        for c in &s.calls {
            out.push_str(&format!("  call     {c}\n"));
        }
        for n in &s.notes {
            out.push_str(&format!("  note     {n}\n"));
        }
        for u in &s.unused {
            out.push_str(&format!("  unused   {u}: no call reaches it\n"));
        }
        out.push('\n');
        out.push_str(&render::tables(&self.report));
        let at = |f: &hopwise_analyze::Finding| {
            self.report
                .findings
                .iter()
                .position(|g| std::ptr::eq(g, f))
                .and_then(|i| self.places.get(i))
                .cloned()
                .unwrap_or_else(|| f.path.clone())
        };
        out.push_str(&render::findings(&self.report, at));
        out
    }
}
