//! Reading a mesh file from disk: the text, the validated `Mesh` (every problem rendered with
//! the file's name, line and column), and the directory relative paths in it start from.

use std::path::{Path, PathBuf};

use anyhow::Context;
use hopwise_model::Mesh;

/// Reads and validates a mesh file; the error lists every problem with file:line:column.
/// Returns the mesh and the directory its relative paths (`mesh.certs`) are taken from.
pub fn load(path: &Path) -> anyhow::Result<(Mesh, PathBuf)> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the mesh file {name}"))?;
    let mesh = Mesh::from_yaml(&text).map_err(|d| anyhow::anyhow!("{}", d.render(&name)))?;
    let base = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    Ok((mesh, base))
}
