//! Where `up`'s proxies send their spans: to the dashboard's own OTLP receiver unless the mesh
//! file names a collector of the user's. `up` gives the control plane a copy of the file
//! (`RUN/mesh.yaml`) with `mesh.tracing.collector` set to the receiver — and, when the file has
//! no `mesh.tracing`, with `sampling: --traces` too (default 100 %: `up` runs on one machine for
//! a person who wants to see every request they send; the store keeps only the latest traces).
//! [`follow`] keeps the copy in step with the file, so an edit still reaches the proxies.
//! The edit is a line or two of text, checked by reading the result with the model's parser;
//! a file it cannot edit so is served as written, with a note.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hopwise_model::Mesh;

use super::gateway::Front;

/// What `up` serves, and what it says about spans.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub text: String,
    pub note: String,
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The line index of a block key `key:` at `indent` (nothing after it but a comment), from
/// `from` on, before the block ends.
pub(super) fn block(lines: &[&str], key: &str, indent: usize, from: usize) -> Option<usize> {
    for (i, l) in lines.iter().enumerate().skip(from) {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if indent_of(l) < indent {
            return None;
        }
        if indent_of(l) == indent
            && let Some(rest) = t.strip_prefix(key).and_then(|r| r.strip_prefix(':'))
            && (rest.trim().is_empty() || rest.trim_start().starts_with('#'))
        {
            return Some(i);
        }
    }
    None
}

/// The indent of the block under line `at` (its first non-blank line), or `parent + 2`.
pub(super) fn child_indent(lines: &[&str], at: usize) -> usize {
    lines
        .iter()
        .skip(at + 1)
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| indent_of(l))
        .filter(|i| *i > indent_of(lines[at]))
        .unwrap_or(indent_of(lines[at]) + 2)
}

/// `text` with `insert` after line `at`.
pub(super) fn with_lines(lines: &[&str], at: Option<usize>, insert: &[String]) -> String {
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    match at {
        Some(i) => {
            for (k, l) in insert.iter().enumerate() {
                out.insert(i + 1 + k, l.clone());
            }
        }
        None => out.extend(insert.iter().cloned()),
    }
    out.join("\n") + "\n"
}

/// The file as `up` serves it, for a dashboard receiving spans on `receiver`.
pub fn served(text: &str, receiver: SocketAddr, ratio: f64) -> Served {
    let as_written = |note: String| Served {
        text: text.to_owned(),
        note,
    };
    let Ok(mesh) = Mesh::from_yaml(text) else {
        return as_written(String::new());
    };
    let lines: Vec<&str> = text.lines().collect();
    let collector = format!("collector: '{receiver}'");
    let edited = match &mesh.observe.tracing {
        Some(t) if t.collector.is_some() => {
            return as_written(format!(
                "traces: the mesh file sends spans to {}; the dashboard shows none",
                t.collector.as_deref().unwrap_or_default()
            ));
        }
        None if ratio <= 0.0 => return as_written("traces: off (--traces 0)".to_owned()),
        Some(_) => block(&lines, "mesh", 0, 0).and_then(|m| {
            let ind = child_indent(&lines, m);
            let t = block(&lines, "tracing", ind, m + 1)?;
            let pad = " ".repeat(child_indent(&lines, t));
            Some(with_lines(&lines, Some(t), &[format!("{pad}{collector}")]))
        }),
        None => {
            let sampling = format!("sampling: {ratio}");
            match block(&lines, "mesh", 0, 0) {
                Some(m) => {
                    let pad = " ".repeat(child_indent(&lines, m));
                    Some(with_lines(
                        &lines,
                        Some(m),
                        &[
                            format!("{pad}tracing:"),
                            format!("{pad}  {collector}"),
                            format!("{pad}  {sampling}"),
                        ],
                    ))
                }
                // No `mesh:` key at all (a flow mapping would be one: then it is refused below).
                None if !lines.iter().any(|l| l.starts_with("mesh")) => Some(with_lines(
                    &lines,
                    None,
                    &[
                        "mesh:".to_owned(),
                        "  tracing:".to_owned(),
                        format!("    {collector}"),
                        format!("    {sampling}"),
                    ],
                )),
                None => None,
            }
        }
    };
    let checked = edited.filter(|e| {
        Mesh::from_yaml(e).is_ok_and(|m| {
            m.observe
                .tracing
                .and_then(|t| t.collector)
                .is_some_and(|c| c == receiver.to_string())
        })
    });
    match checked {
        Some(text) => Served {
            text,
            note: format!("traces: the proxies send spans to the dashboard ({receiver})"),
        },
        None => as_written(
            "traces: mesh.tracing is written in a form `up` cannot extend (a flow mapping?); \
             add `collector:` to it to see traces on the dashboard"
                .to_owned(),
        ),
    }
}

/// Writes the copy of `from` the control plane reads (`to`) now, with `up`'s gateway in front
/// ([`super::gateway`]), and returns its note.
pub fn write(
    from: &Path,
    to: &Path,
    receiver: SocketAddr,
    ratio: f64,
    front: &Front,
) -> std::io::Result<String> {
    let fronted = front.apply(&std::fs::read_to_string(from)?);
    let s = served(&fronted.text, receiver, ratio);
    std::fs::write(to, &s.text)?;
    Ok(format!("{}\n{}", s.note, fronted.note))
}

/// Rewrites `to` whenever `from` changes (every half second), until the runtime ends.
pub async fn follow(from: PathBuf, to: PathBuf, receiver: SocketAddr, ratio: f64, front: Front) {
    let mut seen = std::fs::read_to_string(&from).ok();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Gone for a moment (an editor's rename): looked at again later.
        let Ok(now) = std::fs::read_to_string(&from) else {
            continue;
        };
        if seen.as_deref() != Some(now.as_str()) {
            let fronted = front.apply(&now).text;
            let _ = std::fs::write(&to, served(&fronted, receiver, ratio).text);
            seen = Some(now);
        }
    }
}

#[cfg(test)]
#[path = "traces_tests.rs"]
mod tests;

/// The dashboard's receiver and the copy of the file the control plane reads.
#[derive(Debug)]
pub struct Prepared {
    pub file: PathBuf,
    pub receiver: SocketAddr,
    pub note: String,
    /// Holds `receiver`'s port for the run ([`crate::processes::ports`]).
    _held: crate::processes::ports::Held,
}

impl Prepared {
    /// `up`'s part when it runs a dashboard: a port for its receiver, `RUN/mesh.yaml` written.
    pub fn new(
        file: &Path,
        run: &Path,
        ratio: f64,
        front: &Front,
    ) -> Result<Prepared, crate::error::LabError> {
        let held = crate::processes::ports::hold(1)?;
        let receiver = held.addrs()[0];
        let served = run.join("mesh.yaml");
        let note = write(file, &served, receiver, ratio, front).map_err(|e| {
            crate::error::LabError::Failed(format!("cannot write {}: {e}", served.display()))
        })?;
        Ok(Prepared {
            file: served,
            receiver,
            note,
            _held: held,
        })
    }

    pub fn control_args(&self) -> [String; 2] {
        ["--traces-listen".to_owned(), self.receiver.to_string()]
    }
}

/// `--traces`: a ratio from 0 to 1, or a percentage.
pub fn parse_ratio(s: &str) -> Result<f64, String> {
    let r = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => s.parse::<f64>(),
    }
    .map_err(|_| format!("`{s}` is not a ratio (0.1) or a percentage (10%)"))?;
    if !(0.0..=1.0).contains(&r) {
        return Err(format!("{s}: choose from 0 to 1 (0 to 100%)"));
    }
    Ok(r)
}
