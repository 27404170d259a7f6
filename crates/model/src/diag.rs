//! Problems found in a mesh file, each naming where it is: the field's path
//! (`services.checkout.calls.pricing.per_try_timeout`) and its line and column.

use std::fmt;

use serde::Serialize;

/// A place in the file, both 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

/// One problem in a mesh file. Validation collects all of them before giving up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct Diagnostic {
    /// Dotted path of the field, empty for the document itself.
    pub path: String,
    pub pos: Option<Pos>,
    pub message: String,
}

impl Diagnostic {
    pub fn new(path: impl Into<String>, pos: Option<Pos>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            pos,
            message: message.into(),
        }
    }

    /// Renders as `file:line:column: path: message`, the form editors jump to.
    pub fn render(&self, file: &str) -> String {
        let mut out = String::from(file);
        if let Some(p) = self.pos {
            out.push_str(&format!(":{}:{}", p.line, p.column));
        }
        out.push_str(": ");
        if !self.path.is_empty() {
            out.push_str(&self.path);
            out.push_str(": ");
        }
        out.push_str(&self.message);
        out
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render("<mesh>"))
    }
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} problem(s) in the mesh file", .0.len())]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn render(&self, file: &str) -> String {
        self.0
            .iter()
            .map(|d| d.render(file))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The line and message of the problem reported at `path`, for tests that read a file with
/// mistakes and check each is named where it stands.
#[cfg(test)]
pub(crate) fn problem_at(errors: &[Diagnostic], path: &str) -> (Option<usize>, String) {
    let d = errors
        .iter()
        .find(|d| d.path == path)
        .unwrap_or_else(|| panic!("no error at {path}: {errors:#?}"));
    (d.pos.map(|p| p.line), d.message.clone())
}
