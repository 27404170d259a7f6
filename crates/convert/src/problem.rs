//! What stops an import: a problem in one input file, at its line and column, in the object it
//! belongs to (`virtualservice/pricing`). Every problem is collected before giving up.

use std::fmt;

use hopwise_model::Pos;
use serde::Serialize;

/// One problem in an input file (Kubernetes YAML or the calls file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub file: String,
    pub pos: Option<Pos>,
    /// `virtualservice/pricing`, when the problem is inside an object.
    pub object: Option<String>,
    pub message: String,
}

impl fmt::Display for Problem {
    /// `pricing-vs.yaml:14:9: virtualservice/pricing: message`, the form editors jump to.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(p) = self.pos {
            write!(f, ":{}:{}", p.line, p.column)?;
        }
        if let Some(o) = &self.object {
            write!(f, ": {o}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found, in input order; nothing was checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} problem(s) in the configuration", .0.len())]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    /// One problem per line.
    pub fn render(&self) -> String {
        self.0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }
}
