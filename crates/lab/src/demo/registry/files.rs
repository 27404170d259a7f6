//! "Files touched": every file under a layout's configuration directory read whole before and
//! after a copy is added, and the paths created, changed or removed between the two. What the
//! processes write for themselves (their caches, the control plane's state, stderr) lives
//! elsewhere, so only what an operator would have to write counts.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{LabError, io};

/// Every file under `dir` (relative path → content).
pub(super) type Snapshot = BTreeMap<String, Vec<u8>>;

pub(super) fn snapshot(dir: &Path) -> Result<Snapshot, LabError> {
    let mut out = Snapshot::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).map_err(io(format!("cannot list {}", d.display())))?;
        for entry in entries {
            let path = entry
                .map_err(io(format!("cannot list {}", d.display())))?
                .path();
            if path.is_dir() {
                todo.push(path);
                continue;
            }
            let content =
                std::fs::read(&path).map_err(io(format!("cannot read {}", path.display())))?;
            let name = path.strip_prefix(dir).unwrap_or(&path);
            out.insert(name.display().to_string(), content);
        }
    }
    Ok(out)
}

/// The paths created, changed or removed from `before` to `after`, in order.
pub(super) fn touched(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut names: Vec<String> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .collect();
    names.extend(before.keys().filter(|k| !after.contains_key(*k)).cloned());
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_changed_and_removed_files_are_touched_and_nothing_else() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("no temporary directory")
        };
        let write = |p: &str, s: &str| {
            let path = dir.path().join(p);
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            assert!(std::fs::write(path, s).is_ok());
        };
        write("mesh.yaml", "a");
        write("certs/b.pem", "b");
        write("gone", "x");
        let before = snapshot(dir.path()).unwrap_or_default();
        assert_eq!(before.len(), 3);
        assert!(touched(&before, &before).is_empty());
        write("mesh.yaml", "a2");
        write("certs/c.pem", "c");
        assert!(std::fs::remove_file(dir.path().join("gone")).is_ok());
        let after = snapshot(dir.path()).unwrap_or_default();
        assert_eq!(
            touched(&before, &after),
            ["certs/c.pem", "gone", "mesh.yaml"]
        );
    }
}
