//! What the import tests share: the shipped examples read from `examples/import/`, imported and
//! checked, and the figures picked out of the report.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use hopwise_analyze::{Failure, Options};
use hopwise_convert::{Checked, Flavor, Imported, Source, import};

const IMPORT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/import");

/// `(name, text)` of `examples/import/<path>`: the file, or a directory's YAML files in order.
pub fn example(path: &str) -> Vec<(String, String)> {
    let full = Path::new(IMPORT).join(path);
    let mut files: Vec<_> = if full.is_dir() {
        std::fs::read_dir(&full)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect()
    } else {
        vec![full]
    };
    files.sort();
    files
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(p).unwrap())
        })
        .collect()
}

pub fn sources(v: &[(String, String)]) -> Vec<Source<'_>> {
    v.iter().map(|(n, t)| Source { name: n, text: t }).collect()
}

pub fn imported(
    config: &[(String, String)],
    calls: &[(String, String)],
    flavor: Option<Flavor>,
    fixed: bool,
) -> Imported {
    let opts = hopwise_convert::Options {
        name: "example".into(),
        flavor,
        fixed_backoff: fixed,
    };
    import(&sources(config), &sources(calls), &opts).unwrap_or_else(|p| panic!("{}", p.render()))
}

/// Imports `examples/import/<dir>` with its `calls`.
pub fn example_imported(dir: &str, calls: &str, fixed: bool) -> Imported {
    imported(
        &example(dir),
        &example(&format!("{dir}/{calls}")),
        None,
        fixed,
    )
}

/// Imports and checks `examples/import/<dir>` with its `calls`.
pub fn run(dir: &str, calls: &str, fixed: bool) -> Checked {
    hopwise_convert::check(&example_imported(dir, calls, fixed), &Options::default())
}

pub fn attempts(c: &Checked, service: &str, failure: Failure) -> u64 {
    c.report
        .fanout
        .iter()
        .find(|r| r.service == service && r.failure == failure)
        .map(|r| r.attempts)
        .unwrap_or_else(|| panic!("no row for {service} {failure:?}"))
}

pub fn ms(v: u64) -> Option<Duration> {
    Some(Duration::from_millis(v))
}

/// The text, or a panic naming what is missing.
pub fn has(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}
